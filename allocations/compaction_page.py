"""The platform admin's compaction page, /manage/pools/<id>/compaction/: the plan a compaction would start now
(which request moves from which slot to which, what it frees), a button that starts it, and the pool's last plans."""

from __future__ import annotations

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_http_methods

from allocations.models import MovePlan, NodePool
from allocations.services.compaction import preview_compaction, start_compaction
from tenants.errors import InvalidInput
from tenants.views import signed_in_user, staff_required

RECENT_PLANS = 10


@login_required
@staff_required
@require_http_methods(["GET", "POST"])
def pool_compaction(request: HttpRequest, pool_id: int) -> HttpResponse:
    user = signed_in_user(request)
    pool = NodePool.objects.filter(pk=pool_id).first()
    if pool is None:
        raise Http404("No such pool.")
    if request.method == "POST":
        try:
            plan = start_compaction(pool_id=pool.pk, actor=user)
        except InvalidInput as exc:
            messages.error(request, exc.message)
        else:
            messages.success(
                request, f"Compaction #{plan.pk} started: {plan.moves.count()} move(s); the owners are told first."
            )
        return redirect("manage-pool-compaction", pool_id=pool.pk)
    plans = (
        MovePlan.objects.filter(pool=pool)
        .prefetch_related("moves__from_gpu__node", "moves__to_gpu__node")
        .order_by("-pk")[:RECENT_PLANS]
    )
    return render(
        request,
        "allocations/manage_compaction.html",
        {"pool": pool, "preview": preview_compaction(pool=pool), "plans": plans},
    )
