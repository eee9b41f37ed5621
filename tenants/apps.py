from __future__ import annotations

from django.apps import AppConfig


class TenantsConfig(AppConfig):
    name = "tenants"
    verbose_name = "Tenants and access"

    def ready(self) -> None:
        # Registers the OpenAPI description of token authentication with drf-spectacular.
        # Connects the sign-in failure counters to Django's auth signals; registers fatia's system checks.
        from tenants import checks, signin  # noqa: F401
        from tenants.api import schema  # noqa: F401
