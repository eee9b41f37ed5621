"""Template filters for slices: `{{ p.start|slot_range:p.size }}` reads "slot 0" or "slots 0–3"."""

from __future__ import annotations

from django import template

from tenants.audit_text import slot_range as _slot_range

register = template.Library()


@register.filter
def slot_range(start: int, size: int) -> str:
    return _slot_range(int(start), int(size))
