"""The OpenAPI schema's shared parts: our token authentication, and the error responses of every operation.

drf-spectacular finds the authentication extension by import (tenants/apps.py); REST_FRAMEWORK's
DEFAULT_SCHEMA_CLASS names FatiaAutoSchema. Every error body has one shape (tenants/api/exception_handler.py),
and every operation lists the error statuses it can answer, so a client (and the schemathesis run in the test
suite) can rely on the schema for failures as well as successes.
"""

from __future__ import annotations

from typing import Any

from drf_spectacular.extensions import OpenApiAuthenticationExtension
from drf_spectacular.openapi import AutoSchema
from drf_spectacular.utils import OpenApiResponse
from rest_framework import serializers


class ApiTokenScheme(OpenApiAuthenticationExtension):  # type: ignore[no-untyped-call]
    target_class = "tenants.authentication.ApiTokenAuthentication"
    name = "apiToken"

    def get_security_definition(self, auto_schema: Any) -> dict[str, str]:
        return {
            "type": "http",
            "scheme": "bearer",
            "bearerFormat": "fatia_<prefix>_<secret>",
            "description": "A personal API token (read or write scope) from /tokens/ or POST /api/v1/tokens/.",
        }


class ErrorSerializer(serializers.Serializer[Any]):
    """The body of every API error (tenants/api/exception_handler.py). Its fields come from get_fields because
    one of them is named `errors`, which a declared field would shadow on the serializer itself."""

    def get_fields(self) -> dict[str, serializers.Field[Any, Any, Any, Any]]:
        return {
            "code": serializers.CharField(
                help_text="What went wrong, for programs: invalid, parse_error, not_authenticated, "
                "authentication_failed, permission_denied, not_found, quota_exceeded, invalid_transition, "
                "idempotency_key_reused, throttled, unavailable, ..."
            ),
            "detail": serializers.CharField(help_text="What went wrong, for people."),
            "errors": serializers.DictField(
                required=False, help_text="Input errors (400, some 409): the field (or 'detail') -> its messages."
            ),
            "retry_after": serializers.IntegerField(
                required=False, help_text="429: seconds until a retry can succeed."
            ),
        }


ERROR_DESCRIPTIONS = {
    "400": "Invalid input: `errors` names each field and what is wrong with it.",
    "401": "No credentials, or a token that is unknown, expired or revoked.",
    "403": "Not allowed: a read-only token that writes, or a role that may not do this.",
    "404": "No such object, or one of a tenant you are not a member of (the same answer); for a list, a page "
    "past the last.",
    "409": "The request conflicts with the object's state: a transition it cannot make, a full quota, or an "
    "Idempotency-Key reused with other parameters.",
    "429": "Too many requests: wait for the Retry-After header's seconds.",
    "503": "The portal is busy (a database conflict or outage) and changed nothing: retry after Retry-After.",
}


class FatiaAutoSchema(AutoSchema):
    """drf-spectacular's AutoSchema, plus the error responses each operation can give."""

    def _get_response_bodies(self, direction: Any = "response") -> dict[str, Any]:
        responses: dict[str, Any] = super()._get_response_bodies(direction)
        for code in self._error_codes():
            if code not in responses:
                error = OpenApiResponse(ErrorSerializer, description=ERROR_DESCRIPTIONS[code])
                responses[code] = self._get_response_for_code(error, code, direction=direction)  # type: ignore[no-untyped-call]
        return responses

    def _error_codes(self) -> list[str]:
        codes = ["400", "401", "403"]
        if "{" in self.path or self._is_list_view():
            codes.append("404")
        if self.method == "POST":
            codes.append("409")
        return [*codes, "429", "503"]
