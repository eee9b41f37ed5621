"""The OpenID Connect provider's endpoints, read from its discovery document and cached.

The document is fetched once (on the first sign-in, not at start-up, so a provider that is down never stops the
portal from starting) and kept in the shared cache for FATIA_OIDC_DISCOVERY_CACHE_S. A failure is not cached:
the next sign-in tries again.
"""

from __future__ import annotations

import hashlib
from dataclasses import asdict, dataclass
from typing import Any

import requests
from django.conf import settings
from django.core.cache import cache


class ProviderUnavailable(Exception):
    """The identity provider did not answer, or answered with something that is not usable. Retryable by the
    user later; the sign-in page says so instead of failing with a 500."""


@dataclass(frozen=True)
class ProviderEndpoints:
    issuer: str
    authorization_endpoint: str
    token_endpoint: str
    jwks_uri: str
    userinfo_endpoint: str
    end_session_endpoint: str


def timeouts() -> tuple[float, float]:
    """(connect, read) seconds for every call to the provider."""
    seconds = float(settings.FATIA_OIDC_TIMEOUT_S)
    return (seconds, seconds)


def _cache_key(issuer: str) -> str:
    return "fatia:oidc-discovery:" + hashlib.sha256(issuer.encode()).hexdigest()[:32]


def provider_endpoints() -> ProviderEndpoints:
    """The configured issuer's endpoints; raises ProviderUnavailable when its document cannot be had."""
    issuer: str = settings.FATIA_OIDC_ISSUER
    if not issuer:
        raise ProviderUnavailable("Single sign-on is not configured (FATIA_OIDC_ISSUER is empty).")
    key = _cache_key(issuer)
    cached = cache.get(key)
    if isinstance(cached, dict):
        return ProviderEndpoints(**cached)
    endpoints = _fetch(issuer)
    cache.set(key, asdict(endpoints), settings.FATIA_OIDC_DISCOVERY_CACHE_S)
    return endpoints


def _fetch(issuer: str) -> ProviderEndpoints:
    url = f"{issuer}/.well-known/openid-configuration"
    try:
        response = requests.get(url, timeout=timeouts())
        response.raise_for_status()
        document: Any = response.json()
    except (requests.RequestException, ValueError) as exc:
        raise ProviderUnavailable(f"The identity provider's discovery document at {url} is unavailable: {exc}") from exc
    if not isinstance(document, dict):
        raise ProviderUnavailable(f"The discovery document at {url} is not a JSON object.")
    # OpenID Connect Discovery 1.0, section 4.3: the document's issuer must be the one we asked; anything else
    # could hand us another provider's keys.
    if str(document.get("issuer", "")).rstrip("/") != issuer:
        raise ProviderUnavailable(
            f"The discovery document at {url} names issuer {document.get('issuer')!r}, not {issuer!r}: "
            "check FATIA_OIDC_ISSUER."
        )
    missing = [name for name in ("authorization_endpoint", "token_endpoint", "jwks_uri") if not document.get(name)]
    if missing:
        raise ProviderUnavailable(f"The discovery document at {url} lacks {', '.join(missing)}.")
    return ProviderEndpoints(
        issuer=str(document["issuer"]),
        authorization_endpoint=str(document["authorization_endpoint"]),
        token_endpoint=str(document["token_endpoint"]),
        jwks_uri=str(document["jwks_uri"]),
        userinfo_endpoint=str(document.get("userinfo_endpoint") or ""),
        end_session_endpoint=str(document.get("end_session_endpoint") or ""),
    )
