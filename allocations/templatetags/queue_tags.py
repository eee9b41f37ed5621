"""The dashboard's queued demand (issue 15): per profile, slices waiting in a pool's queue, beside what fits now."""

from __future__ import annotations

from django import template
from django.db.models import Sum

from allocations.models import Allocation

register = template.Library()


@register.simple_tag
def fits_and_queued(pool_id: int, fits_now: dict[str, int]) -> list[tuple[str, int, int]]:
    """(profile, fits now, slices queued) per profile of the pool: counts only, every tenant's (as fits-now is)."""
    queued = dict(
        Allocation.objects.filter(pool_id=pool_id, status=Allocation.Status.QUEUED)
        .values("profile")
        .annotate(n=Sum("count"))
        .order_by()
        .values_list("profile", "n")
    )
    return [(profile, n, queued.get(profile, 0)) for profile, n in fits_now.items()]
