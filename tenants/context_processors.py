from __future__ import annotations

from typing import Any

from django.http import HttpRequest

from allocations.selectors import nav_counts


def navigation(request: HttpRequest) -> dict[str, Any]:
    """What the header needs on every page: whether to show the manager and admin links, the unread
    notifications, and how many requests and lease extensions wait for the user's decision.

    One query (allocations.selectors.nav_counts) on top of the session and user that every signed-in
    page loads anyway."""
    # An error page for a request refused before the authentication middleware ran (a Host header outside
    # ALLOWED_HOSTS is refused by CommonMiddleware) has no user: show it as to a visitor.
    user = getattr(request, "user", None)
    if user is None or not user.is_authenticated:
        return {}
    counts = nav_counts(user)
    return {
        "nav_is_manager": counts.is_manager,
        "nav_is_admin": bool(user.is_staff),
        "nav_unread": counts.unread,
        "nav_pending_approvals": counts.pending_approvals,
    }
