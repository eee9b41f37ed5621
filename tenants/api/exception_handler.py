"""One place that maps domain, Django and database errors to API responses.

Every API error body has the same shape: `{"code": ..., "detail": ...}`, plus `errors` (field -> messages) for
input errors (see tenants/api/schema.py, which documents it on every operation).
"""

from __future__ import annotations

import logging
import math
from typing import Any

from django.core.exceptions import ObjectDoesNotExist, RequestDataTooBig
from django.core.exceptions import PermissionDenied as DjangoPermissionDenied
from django.db import OperationalError
from django.http import Http404
from rest_framework import exceptions, status
from rest_framework.response import Response
from rest_framework.views import exception_handler

from tenants import throttling
from tenants.errors import DomainError

logger = logging.getLogger(__name__)

# A deadlock or serialization failure rolled the transaction back, or the database connection broke: nothing was
# written, and the same request is likely to succeed in a moment.
RETRY_AFTER_S = 1


def handle_api_exception(exc: Exception, context: dict[str, Any]) -> Response | None:
    if isinstance(exc, DomainError):
        return Response({"code": exc.code, "detail": exc.message, "errors": exc.as_dict()}, status=exc.status)
    if isinstance(exc, OperationalError):
        logger.warning("transient database error answered with 503: %s", exc)
        return Response(
            {"code": "unavailable", "detail": "The portal is busy; nothing was changed. Try again in a moment."},
            status=status.HTTP_503_SERVICE_UNAVAILABLE,
            headers={"Retry-After": str(RETRY_AFTER_S)},
        )
    if isinstance(exc, ObjectDoesNotExist):
        exc = Http404()
    if isinstance(exc, DjangoPermissionDenied):
        exc = exceptions.PermissionDenied()
    if isinstance(exc, exceptions.NotAuthenticated | exceptions.AuthenticationFailed) and "request" in context:
        # Failed authentication counts against the caller's address; past the anonymous rate it is a 429, so
        # nobody can guess tokens at full speed (tenants/throttling.py).
        wait = throttling.anonymous_call_wait(context["request"])
        if wait is not None:
            exc = exceptions.Throttled(wait=wait)
    if isinstance(exc, RequestDataTooBig):
        return Response(
            {"code": "too_large", "detail": "The request body is too large."},
            status=status.HTTP_400_BAD_REQUEST,
        )
    response = exception_handler(exc, context)
    if response is None:
        return None  # an unexpected error: Django's handler500 answers JSON on API paths (tenants/error_views.py)
    if isinstance(exc, exceptions.ValidationError):
        data = response.data
        response.data = {
            "code": "invalid",
            "detail": "Invalid input.",
            "errors": data if isinstance(data, dict) else {"detail": data},
        }
        return response
    detail = response.data.get("detail", "") if isinstance(response.data, dict) else response.data
    code = getattr(exc, "default_code", "error")
    if isinstance(exc, Http404):
        code = "not_found"
    body: dict[str, Any] = {"code": code, "detail": str(detail)}
    wait = getattr(exc, "wait", None)
    if isinstance(exc, exceptions.Throttled) and wait is not None:
        body["retry_after"] = math.ceil(wait)
    response.data = body
    return response
