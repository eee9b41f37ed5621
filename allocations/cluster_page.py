"""The platform admin's cluster check page, /manage/cluster-check/: the last report of `check_cluster_task` and
a button that queues another (allocations/cluster/check_runs.py says why a task and not the request)."""

from __future__ import annotations

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.utils import timezone
from django.views.decorators.http import require_http_methods

from allocations.cluster import check_runs
from allocations.cluster.checks import Level
from tenants.views import signed_in_user, staff_required

BADGES = {Level.OK: "badge--active", Level.WARN: "badge--pending", Level.FAIL: "badge--failed"}


@login_required
@staff_required
@require_http_methods(["GET", "POST"])
def cluster_check(request: HttpRequest) -> HttpResponse:
    user = signed_in_user(request)
    if request.method == "POST":
        if check_runs.request_cluster_check(actor=user):
            messages.success(request, "The check is queued; this page shows its report when a worker has run it.")
        else:
            messages.info(request, "A check is already waiting for a worker; this page shows its report when done.")
        return redirect("manage-cluster-check")
    state = check_runs.read_cluster_check()
    now = timezone.now()
    report = state.report
    return render(
        request,
        "allocations/manage_cluster_check.html",
        {
            "state": state,
            "report": report,
            "rows": [(r, BADGES[r.level]) for r in report.results] if report else [],
            "summary_badge": BADGES[report.level] if report else "",
            "fails": report.count(Level.FAIL) if report else 0,
            "warnings": report.count(Level.WARN) if report else 0,
            "waiting_s": state.waiting_s(now),
            "overdue": state.overdue(now),
            "refresh_s": check_runs.REFRESH_S,
        },
    )
