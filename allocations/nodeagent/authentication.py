"""Node agents authenticate with ``Authorization: Bearer fagent_<prefix>_<secret>`` on /api/v1/agent/ only.

The request's user is an :class:`AgentPrincipal` (not a person: no tenant, no staff rights); ``request.auth`` is the
:class:`~allocations.nodeagent.models.AgentCredential`, whose node is the only one it may report for.
"""

from __future__ import annotations

import hmac
import time
from typing import Any

from django.conf import settings
from drf_spectacular.extensions import OpenApiAuthenticationExtension
from rest_framework import authentication, exceptions
from rest_framework.request import Request

from allocations.nodeagent.models import AgentCredential
from allocations.nodeagent.services import TOKEN_PREFIX, hash_agent_token

# Credentials this process has checked lately, by token digest: (checked at, credential with its node). Every
# node reports every few seconds, and a lookup costs a query; a revocation therefore reaches a process at the latest
# FATIA_AGENT_CREDENTIAL_CACHE_S after it (at once in the process that revoked). Unknown and revoked tokens are
# never kept. Bounded: one entry per node, emptied when it would outgrow _CACHE_MAX.
_recent: dict[str, tuple[float, AgentCredential]] = {}
_CACHE_MAX = 20_000


def forget_agent_credentials() -> None:
    """Empty this process's credential cache (after a revocation)."""
    _recent.clear()


def _lookup(token: str, prefix: str) -> AgentCredential | None:
    digest = hash_agent_token(token)
    ttl = settings.FATIA_AGENT_CREDENTIAL_CACHE_S
    now = time.time()
    cached = _recent.get(digest)
    if cached is not None and now - cached[0] < ttl:
        return cached[1]
    credential = AgentCredential.objects.select_related("node").filter(prefix=prefix).first()
    if credential is None or not hmac.compare_digest(credential.digest, digest):
        return None
    if ttl > 0 and credential.revoked_at is None:
        if len(_recent) >= _CACHE_MAX:
            _recent.clear()
        _recent[digest] = (now, credential)
    return credential


class AgentPrincipal:
    """The node agent behind a request."""

    is_authenticated = True
    is_active = True
    is_staff = False
    is_superuser = False
    pk = None

    def __init__(self, node_name: str) -> None:
        self.username = f"agent:{node_name}"

    def get_username(self) -> str:
        return self.username


class AgentAuthError(Exception):
    """A node agent's credential is missing, malformed, unknown or revoked (401)."""

    def __init__(self, message: str, code: str = "authentication_failed") -> None:
        super().__init__(message)
        self.message = message
        self.code = code


def parse_agent_header(value: str) -> tuple[str, str]:
    """The token and its prefix from an ``Authorization`` header's value (no lookup), or AgentAuthError."""
    header = value.split()
    if not header or header[0] != "Bearer":
        raise AgentAuthError("Authentication credentials were not provided.", code="not_authenticated")
    pieces = header[1].split("_", 2) if len(header) == 2 else []
    if len(pieces) != 3 or pieces[0] != TOKEN_PREFIX:
        raise AgentAuthError("Authorization must be 'Bearer fagent_<prefix>_<secret>'.")
    return header[1], pieces[1]


def check_agent_header(value: str) -> AgentCredential:
    """The credential of an ``Authorization`` header's value, or AgentAuthError. Shared by the DRF endpoints and
    the plain telemetry view (``api/telemetry.py``)."""
    token, prefix = parse_agent_header(value)
    credential = _lookup(token, prefix)
    if credential is None:
        raise AgentAuthError("Invalid node agent credential.")
    if credential.revoked_at is not None:
        raise AgentAuthError("This node agent credential has been revoked.")
    return credential


class AgentCredentialAuthentication(authentication.BaseAuthentication):
    keyword = "Bearer"

    def authenticate(self, request: Request) -> tuple[AgentPrincipal, AgentCredential] | None:
        value = authentication.get_authorization_header(request).decode("latin-1")
        if not value.split() or value.split()[0] != self.keyword:
            return None
        try:
            credential = check_agent_header(value)
        except AgentAuthError as exc:
            raise exceptions.AuthenticationFailed(exc.message) from None
        return AgentPrincipal(credential.node.name), credential

    def authenticate_header(self, request: Request) -> str:
        return self.keyword


class AgentCredentialScheme(OpenApiAuthenticationExtension):  # type: ignore[no-untyped-call]
    target_class = "allocations.nodeagent.authentication.AgentCredentialAuthentication"
    name = "agentCredential"

    def get_security_definition(self, auto_schema: Any) -> dict[str, str]:
        return {
            "type": "http",
            "scheme": "bearer",
            "bearerFormat": "fagent_<prefix>_<secret>",
            "description": "A node agent's credential (manage.py agent_credential issue <node>); it reports for "
            "its own node only.",
        }
