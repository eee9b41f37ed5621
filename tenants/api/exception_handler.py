"""One place that maps domain and Django errors to API responses."""

from __future__ import annotations

from typing import Any

from django.core.exceptions import ObjectDoesNotExist, RequestDataTooBig
from django.core.exceptions import PermissionDenied as DjangoPermissionDenied
from django.http import Http404
from rest_framework import exceptions, status
from rest_framework.response import Response
from rest_framework.views import exception_handler

from tenants.errors import DomainError


def handle_api_exception(exc: Exception, context: dict[str, Any]) -> Response | None:
    if isinstance(exc, DomainError):
        return Response({"code": exc.code, "errors": exc.as_dict(), "detail": exc.message}, status=exc.status)
    if isinstance(exc, ObjectDoesNotExist):
        exc = Http404()
    if isinstance(exc, DjangoPermissionDenied):
        exc = exceptions.PermissionDenied()
    if isinstance(exc, RequestDataTooBig):
        return Response(
            {"code": "too_large", "detail": "The request body is too large."},
            status=status.HTTP_400_BAD_REQUEST,
        )
    response = exception_handler(exc, context)
    if response is not None and isinstance(exc, exceptions.ValidationError):
        data = response.data
        response.data = {
            "code": "invalid",
            "errors": data if isinstance(data, dict) else {"detail": data},
            "detail": "Invalid input.",
        }
    return response
