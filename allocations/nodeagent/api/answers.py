"""What the plain telemetry view (``telemetry.py``, ``telemetry_queued.py``) answers besides success: DRF's shapes
(``{"code", "detail", "errors"}``) without DRF, and the reading and checking of a report's body."""

from __future__ import annotations

import json
from typing import Any

from django.core.exceptions import RequestDataTooBig
from django.http import HttpRequest, JsonResponse
from rest_framework.exceptions import ValidationError

from allocations.nodeagent import services
from allocations.nodeagent.api import serializers as s
from allocations.nodeagent.api.fastcheck import compile_serializer
from allocations.nodeagent.authentication import AgentAuthError
from tenants import throttling

_validate = compile_serializer(s.TelemetryIn)


def error(status: int, code: str, detail: str, **extra: Any) -> JsonResponse:
    return JsonResponse({"code": code, "detail": detail, **extra}, status=status)


def unauthorized(request: HttpRequest, exc: AgentAuthError) -> JsonResponse:
    """401; failed authentication counts against the caller's address, as on every API endpoint (429 past it)."""
    wait = throttling.anonymous_call_wait(request)
    if wait is not None:
        response = error(429, "throttled", f"Request was throttled. Expected available in {wait} seconds.")
        response["Retry-After"] = str(wait)
        return response
    response = error(401, exc.code, exc.message)
    response["WWW-Authenticate"] = "Bearer"
    return response


def wrong_node(own: str, named: str) -> JsonResponse:
    refused = services.WrongNode(f"This credential reports for node {own}, not {named}.", field="node")
    return error(refused.status, refused.code, refused.message, errors=refused.as_dict())


def read_report(request: HttpRequest) -> dict[str, Any] | JsonResponse:
    """The validated report, or the 400 that says what is wrong with the body."""
    try:
        data = json.loads(request.body)
    except RequestDataTooBig:
        return error(400, "too_large", "The request body is too large.")
    except ValueError as exc:
        return error(400, "parse_error", f"JSON parse error - {exc}")
    try:
        return _validate(data)
    except ValidationError as exc:
        return error(400, "invalid", "Invalid input.", errors=exc.detail)
