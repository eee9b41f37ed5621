"""Template filters that put audit events into words (tenants/audit_text.py)."""

from __future__ import annotations

from django import template

from tenants import audit_text
from tenants.models import AuditEvent

register = template.Library()


@register.filter
def audit_sentence(event: AuditEvent) -> str:
    return audit_text.describe_event(event)


@register.filter
def audit_fields(event: AuditEvent) -> list[tuple[str, str]]:
    return audit_text.event_fields(event)
