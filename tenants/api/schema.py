"""OpenAPI description of our token authentication (drf-spectacular finds it by import)."""

from __future__ import annotations

from typing import Any

from drf_spectacular.extensions import OpenApiAuthenticationExtension


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
