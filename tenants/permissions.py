"""DRF permissions shared by both apps."""

from __future__ import annotations

from typing import Any

from rest_framework.permissions import SAFE_METHODS, BasePermission
from rest_framework.request import Request

from tenants.models import ApiToken


class TokenScopeAllows(BasePermission):
    """A read-scoped token may only use safe methods; sessions and write tokens may write."""

    message = "This API token is read-only; create a token with the write scope."

    def has_permission(self, request: Request, view: Any) -> bool:
        token = request.auth
        if isinstance(token, ApiToken) and token.scope == ApiToken.Scope.READ:
            return request.method in SAFE_METHODS
        return True


class IsPlatformAdmin(BasePermission):
    message = "Only platform admins can do this."

    def has_permission(self, request: Request, view: Any) -> bool:
        return bool(request.user and request.user.is_authenticated and request.user.is_staff)


class IsPlatformAdminOrReadOnly(BasePermission):
    message = "Only platform admins can change this."

    def has_permission(self, request: Request, view: Any) -> bool:
        if request.method in SAFE_METHODS:
            return True
        return bool(request.user and request.user.is_staff)
