from __future__ import annotations

from django.apps import AppConfig


class TenantsConfig(AppConfig):
    name = "tenants"
    verbose_name = "Tenants and access"

    def ready(self) -> None:
        # Registers the OpenAPI description of token authentication with drf-spectacular.
        from tenants.api import schema  # noqa: F401
