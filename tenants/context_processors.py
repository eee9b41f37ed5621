from __future__ import annotations

from typing import Any

from django.http import HttpRequest

from tenants.selectors import managed_tenant_ids


def navigation(request: HttpRequest) -> dict[str, Any]:
    """What the navigation bar needs: whether to show the manager and admin links."""
    user = request.user
    if not user.is_authenticated:
        return {}
    return {"nav_is_manager": bool(managed_tenant_ids(user)), "nav_is_admin": bool(user.is_staff)}
