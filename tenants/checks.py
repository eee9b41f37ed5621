"""Fatia's own system checks (`manage.py check`, and `check --deploy` in production)."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.core.checks import Tags, Warning, register


@register(Tags.caches, deploy=True)
def shared_cache_check(app_configs: Any, **kwargs: Any) -> list[Warning]:
    """Throttles and sign-in lockouts count in Django's cache; per-process caches let each web worker count alone."""
    if settings.CACHE_URL or settings.DEBUG:
        return []
    return [
        Warning(
            "CACHE_URL is not set: API throttles and sign-in lockouts are counted per web process.",
            hint="Set CACHE_URL to a Redis database shared by every web process, e.g. redis://redis:6379/1.",
            id="fatia.W001",
        )
    ]


@register(Tags.security, deploy=True)
def oidc_issuer_https_check(app_configs: Any, **kwargs: Any) -> list[Warning]:
    """The client secret and the codes travel to the provider: plain HTTP would show them to the network."""
    if settings.DEBUG or not settings.FATIA_OIDC_ISSUER.startswith("http://"):
        return []
    return [
        Warning(
            f"FATIA_OIDC_ISSUER is plain HTTP ({settings.FATIA_OIDC_ISSUER}): the client secret and sign-in codes "
            "would cross the network unencrypted.",
            hint="Use the provider's https:// issuer URL.",
            id="fatia.W002",
        )
    ]
