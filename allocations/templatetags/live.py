"""`{% live_since %}`: the live stream's event id for the signed-in viewer, rendered into a page so that its
script opens /dashboard/events/?since=… and hears at once of anything that changed after the page was made
(allocations/live.py)."""

from __future__ import annotations

from typing import Any

from django import template
from django.contrib.auth.models import User

from allocations import live, selectors

register = template.Library()


@register.simple_tag(takes_context=True)
def live_since(context: dict[str, Any]) -> str:
    request = context.get("request")
    user = getattr(request, "user", None)
    if not isinstance(user, User):
        return ""
    return live.encode_event_id(live.viewer_versions(selectors.viewer_scope(user)))
