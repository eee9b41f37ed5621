"""``POST /api/v1/agent/telemetry/``: a plain Django view, the one hot endpoint (every node, every 5 s).

DRF's request wrapping, negotiation and response rendering are skipped; what clients see is the same as on the
other agent endpoints: 401 for a bad credential (429 past the anonymous rate), 400 with ``errors`` per field from
the same compiled validator, 400 ``too_large`` or ``parse_error``, 403 for another node's report. The OpenAPI
schema still documents it through ``views.TelemetryView`` (see ``urls.py``).

With FATIA_INGEST_QUEUE_URL the report is queued and answered 202 (``{"queued": n, "commands": 0|1}``), or 503 with
Retry-After while the queue is over its bound; without it, applied at once and answered 200 (``{"accepted",
"duplicates", "commands"}``). ``commands`` non-zero: MIG commands wait for this node, so its agent polls now.
"""

from __future__ import annotations

import json
from typing import Any

import redis
from django.conf import settings
from django.core.exceptions import RequestDataTooBig
from django.http import HttpRequest, JsonResponse
from django.utils import timezone
from django.views.decorators.csrf import csrf_exempt
from rest_framework.exceptions import ValidationError

from allocations.nodeagent import ingest_queue, selectors, services
from allocations.nodeagent.api import serializers as s
from allocations.nodeagent.api.fastcheck import compile_serializer
from allocations.nodeagent.authentication import AgentAuthError, check_agent_header
from tenants import throttling

_validate = compile_serializer(s.TelemetryIn)


def _error(status: int, code: str, detail: str, **extra: Any) -> JsonResponse:
    return JsonResponse({"code": code, "detail": detail, **extra}, status=status)


@csrf_exempt
def telemetry(request: HttpRequest) -> JsonResponse:
    if request.method != "POST":
        response = _error(405, "method_not_allowed", f'Method "{request.method}" not allowed.')
        response["Allow"] = "POST"
        return response
    try:
        credential = check_agent_header(request.headers.get("Authorization", ""))
    except AgentAuthError as exc:
        # Failed authentication counts against the caller's address, as on every API endpoint.
        wait = throttling.anonymous_call_wait(request)
        if wait is not None:
            response = _error(429, "throttled", f"Request was throttled. Expected available in {wait} seconds.")
            response["Retry-After"] = str(wait)
            return response
        response = _error(401, exc.code, exc.message)
        response["WWW-Authenticate"] = "Bearer"
        return response
    try:
        data = json.loads(request.body)
    except RequestDataTooBig:
        return _error(400, "too_large", "The request body is too large.")
    except ValueError as exc:
        return _error(400, "parse_error", f"JSON parse error - {exc}")
    try:
        payload = _validate(data)
    except ValidationError as exc:
        return _error(400, "invalid", "Invalid input.", errors=exc.detail)
    node = credential.node
    if payload["node"] != node.name:
        refused = services.WrongNode(
            f"This credential reports for node {node.name}, not {payload['node']}.", field="node"
        )
        return _error(refused.status, refused.code, refused.message, errors=refused.as_dict())
    now = timezone.now()
    services.touch_agent_credential(credential=credential, now=now)
    if not ingest_queue.enabled():
        result = services.record_telemetry(credential=credential, payload=payload, now=now)
        waiting = selectors.commands_waiting(node_id=node.pk)
        return JsonResponse({"accepted": result.accepted, "duplicates": result.duplicates, "commands": waiting})
    try:
        waiting = ingest_queue.accept_report(node_id=node.pk, payload=payload, accepted_at=now)
    except (ingest_queue.Backlogged, redis.RedisError, OSError) as exc:
        busy = isinstance(exc, ingest_queue.Backlogged)
        response = _error(
            503,
            "unavailable",
            "The portal is behind on telemetry; nothing was queued. Send it again later."
            if busy
            else "The telemetry queue is unreachable; nothing was queued. Send it again later.",
        )
        response["Retry-After"] = str(settings.FATIA_INGEST_RETRY_AFTER_S)
        return response
    return JsonResponse({"queued": len(payload["samples"]), "commands": waiting}, status=202)
