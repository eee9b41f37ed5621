"""The admin page's cluster check: asked for with a button, run by a Celery worker, its last report kept in the
cache, which the page reads.

Why a task, not the request itself (STYLE.md §8, requests never wait on the cluster): a check makes some 60 API
calls (a SelfSubjectAccessReview per verb, a rules review per tenant namespace, every ResourceSlice) and, against
a slow or unreachable API server, each may take the client's timeouts (FATIA_KUBE_CONNECT_TIMEOUT_S,
FATIA_KUBE_READ_TIMEOUT_S); a page that waited on that would hold a web worker for as long, once per click. A
page GET never calls the cluster; a POST only queues the task.

Why the cache, not a table: the report is a snapshot to read now, not history (the audit log is for changes, and
a check changes nothing). Web processes and workers must share the cache (CACHE_URL, Redis), as they already must
for throttles; the page says so when no worker's answer arrives.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from django.contrib.auth.models import User
from django.core.cache import cache
from django.db import transaction
from django.utils import timezone

from allocations.cluster.checks import CheckResult, ClusterReport, Level, check_cluster
from allocations.services.outbox import enqueue_task

REPORT_KEY = "fatia:check-cluster:report"
PENDING_KEY = "fatia:check-cluster:pending"
REPORT_TTL_S = 30 * 24 * 3600
# A request for a check stands this long; past it another may be queued (a lost task must not block the button).
PENDING_TTL_S = 600
# The task's own limits: the check bounds each call by the client timeouts, this bounds the whole run.
SOFT_TIME_LIMIT_S = 120
TIME_LIMIT_S = 150
# While a check waits, the page reloads itself this often (a meta refresh: no script, no stream).
REFRESH_S = 3


@dataclass(frozen=True, slots=True)
class CheckRunState:
    """What the page shows: the last report (None before the first run) and the check waiting for a worker."""

    report: ClusterReport | None
    requested_at: datetime | None
    requested_by: str

    @property
    def pending(self) -> bool:
        return self.requested_at is not None

    def waiting_s(self, now: datetime) -> int:
        return int((now - self.requested_at).total_seconds()) if self.requested_at else 0

    def overdue(self, now: datetime) -> bool:
        """No worker has answered within the time a run may take at most, plus some time in the queue."""
        return self.pending and self.waiting_s(now) > TIME_LIMIT_S + 30


def request_cluster_check(*, actor: User) -> bool:
    """Queue one check for the admin page, unless one is waiting already (cache.add is atomic: two clicks, or two
    admins, queue one run). Returns whether this call queued it."""
    marker = {"requested_at": timezone.now().isoformat(), "requested_by": actor.get_username()}
    if not cache.add(PENDING_KEY, marker, timeout=PENDING_TTL_S):
        return False
    with transaction.atomic():
        enqueue_task("allocations.tasks.check_cluster_task")
    return True


def run_cluster_check() -> ClusterReport:
    """Run every check and keep the report for the page; the waiting request is done."""
    return _record(check_cluster())


def record_unfinished_check() -> ClusterReport:
    """The run passed its time limit: say so on the page instead of leaving it waiting."""
    report = ClusterReport(
        server="",
        identity="",
        checked_at=timezone.now(),
        results=(
            CheckResult(
                "unfinished",
                "Check",
                Level.FAIL,
                f"The check did not finish within {SOFT_TIME_LIMIT_S} s.",
                "The API server answers too slowly; run `python manage.py check_cluster` on a worker host to see "
                "where it waits.",
            ),
        ),
    )
    return _record(report)


def _record(report: ClusterReport) -> ClusterReport:
    cache.set(REPORT_KEY, report.as_dict(), timeout=REPORT_TTL_S)
    cache.delete(PENDING_KEY)
    return report


def read_cluster_check() -> CheckRunState:
    """What the last run found and whether one is waiting; reads the cache only, never the cluster."""
    stored = cache.get(REPORT_KEY)
    pending = cache.get(PENDING_KEY)
    requested_at = datetime.fromisoformat(pending["requested_at"]) if pending else None
    return CheckRunState(
        report=ClusterReport.from_dict(stored) if stored else None,
        requested_at=requested_at,
        requested_by=str(pending["requested_by"]) if pending else "",
    )
