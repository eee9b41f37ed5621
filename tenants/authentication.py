"""API token authentication: `Authorization: Bearer fatia_<prefix>_<secret>`.

Tokens skip CSRF (no ambient credentials); browser sessions keep DRF's CSRF check.
"""

from __future__ import annotations

import hmac
from datetime import timedelta
from typing import Any

from django.utils import timezone
from rest_framework import authentication, exceptions
from rest_framework.request import Request

from tenants.models import ApiToken
from tenants.services import TOKEN_PREFIX, hash_token

# last_used_at is a hint for the owner, not an audit trail: write it at most this often, so
# authenticating is a read on the hot path.
LAST_USED_RESOLUTION = timedelta(minutes=1)


class ApiTokenAuthentication(authentication.BaseAuthentication):
    keyword = "Bearer"

    def authenticate(self, request: Request) -> tuple[Any, ApiToken] | None:
        header = authentication.get_authorization_header(request).decode("latin-1")
        if not header:
            return None
        parts = header.split()
        if parts[0] not in (self.keyword, "Token"):
            return None
        if len(parts) != 2:
            raise exceptions.AuthenticationFailed("Authorization header must be 'Bearer <token>'.")
        raw = parts[1]
        pieces = raw.split("_", 2)
        if len(pieces) != 3 or pieces[0] != TOKEN_PREFIX:
            raise exceptions.AuthenticationFailed("Malformed API token.")
        token = ApiToken.objects.select_related("user").filter(prefix=pieces[1]).first()
        if token is None or not hmac.compare_digest(token.digest, hash_token(raw)):
            raise exceptions.AuthenticationFailed("Invalid API token.")
        now = timezone.now()
        if token.revoked_at is not None:
            raise exceptions.AuthenticationFailed("This API token has been revoked.")
        if token.expires_at is not None and token.expires_at <= now:
            raise exceptions.AuthenticationFailed("This API token has expired.")
        if not token.user.is_active:
            raise exceptions.AuthenticationFailed("This user is inactive.")
        if token.last_used_at is None or now - token.last_used_at > LAST_USED_RESOLUTION:
            ApiToken.objects.filter(pk=token.pk).update(last_used_at=now)
        return token.user, token

    def authenticate_header(self, request: Request) -> str:
        return self.keyword
