"""Template filters for shared GPUs: `{{ pool|isolation_text }}` says what the pool's kind isolates."""

from __future__ import annotations

from typing import Any

from django import template

from allocations.sharing.isolation import isolation_of

register = template.Library()


@register.filter
def isolation_text(pool: Any) -> str:
    return isolation_of(str(pool.kind)).text
