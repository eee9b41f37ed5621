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
    # From the process's shared read (at most a second old), so a page costs no extra aggregate queries as a
    # rule. A change between that read and the page's own queries makes the stream announce it once more on
    # connect: one refetch too many, never one missed, unless the read is refreshed by this very call after
    # the view's queries, which leaves a window of the template's render time.
    return live.encode_event_id(live.viewer_versions(selectors.viewer_scope(user)))
