"""Sign-in by an authenticating proxy (OpenShift's oauth-proxy and the like) that passes the user and their groups
in request headers.

Headers are only words in a request: anyone can send them. They count only when FATIA_AUTH_PROXY is on and the
connection comes straight from an address in FATIA_AUTH_PROXY_TRUSTED_CIDRS (the proxy's: a sidecar's 127.0.0.1,
or its pods' range). Otherwise they are ignored: nobody is signed in by them. The direct peer is REMOTE_ADDR,
never X-Forwarded-For, which the sender writes too.
"""

from __future__ import annotations

import ipaddress
import logging
from collections.abc import Callable
from functools import lru_cache
from typing import Any

from django.conf import settings
from django.contrib.auth import authenticate, login
from django.contrib.auth.backends import ModelBackend
from django.http import HttpRequest, HttpResponse

from tenants.sso.services import PROXY_ISSUER, sign_in_sso_user

logger = logging.getLogger(__name__)

# The session remembers whom the proxy named, so the groups are read (and memberships synced) once per sign-in,
# not on every request.
PROXY_SESSION_KEY = "fatia_proxy_user"

IpNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network


@lru_cache(maxsize=8)
def _networks(cidrs: tuple[str, ...]) -> tuple[IpNetwork, ...]:
    return tuple(ipaddress.ip_network(c, strict=False) for c in cidrs)


def from_trusted_proxy(request: HttpRequest) -> bool:
    """True when the connection's own peer address is one of the proxy's."""
    try:
        peer = ipaddress.ip_address(str(request.META.get("REMOTE_ADDR", "")))
    except ValueError:
        return False
    return any(peer in network for network in _networks(tuple(settings.FATIA_AUTH_PROXY_TRUSTED_CIDRS)))


def groups_from_header(raw: str) -> list[str]:
    """Group names separated by commas, as oauth2-proxy sends them."""
    return [g.strip() for g in raw.split(",") if g.strip()]


class AuthProxyBackend(ModelBackend):
    """Signs in the user the trusted proxy named; does nothing for any other kind of sign-in."""

    def authenticate(  # type: ignore[override]
        self,
        request: HttpRequest | None,
        proxy_user: str | None = None,
        proxy_groups: list[str] | None = None,
        **kwargs: Any,
    ) -> Any:
        if proxy_user is None or request is None or not settings.FATIA_AUTH_PROXY or not from_trusted_proxy(request):
            return None
        user = sign_in_sso_user(
            issuer=PROXY_ISSUER, subject=proxy_user, username=proxy_user, email="", groups=proxy_groups or []
        )
        return user if self.user_can_authenticate(user) else None


class AuthProxyMiddleware:
    """Signs in the user named by the trusted proxy's header (after AuthenticationMiddleware)."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        if settings.FATIA_AUTH_PROXY:
            self.sign_in(request)
        return self.get_response(request)

    def sign_in(self, request: HttpRequest) -> None:
        named = request.headers.get(settings.FATIA_AUTH_PROXY_USER_HEADER, "").strip()
        if not named:
            return
        if not from_trusted_proxy(request):
            logger.warning(
                "ignoring %s from %s: not a trusted proxy address",
                settings.FATIA_AUTH_PROXY_USER_HEADER,
                request.META.get("REMOTE_ADDR"),
            )
            return
        if request.user.is_authenticated and request.session.get(PROXY_SESSION_KEY) == named:
            return
        groups = groups_from_header(request.headers.get(settings.FATIA_AUTH_PROXY_GROUPS_HEADER, ""))
        user = authenticate(request, proxy_user=named[:255], proxy_groups=groups)
        if user is None:
            return
        login(request, user)
        request.session[PROXY_SESSION_KEY] = named
