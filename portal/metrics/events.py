"""What the portal's processes record for /metrics, as fields of the shared store (portal/metrics/store.py).

Fields are "label|label|...|what"; every label is bounded (a URL pattern's name, an HTTP method, a status class,
a task's name, a pass's name), never a request id, a user name or a path.
"""

from __future__ import annotations

import bisect
import time

from portal.metrics.store import HTTP, PASSES, TASKS, get_store

#: Upper bounds (seconds) of the HTTP latency histogram's buckets; +Inf follows. Ten, from 10 ms: every bucket is
#: a sample of every series, and the scrape's time grows with the samples (bench/metrics.py).
HTTP_BUCKETS_S: tuple[float, ...] = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
SEP = "|"
METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})
#: The passes whose last success is reported (fatia_<name>_last_success_timestamp_seconds).
PASS_NAMES = ("discovery", "reconcile")


def status_class(status: int) -> str:
    return f"{status // 100}xx" if 100 <= status < 600 else "other"


def observe_request(*, view: str, method: str, status: int, seconds: float) -> None:
    """One answered request: its bucket (not cumulative; the collector sums them up), its count and its time."""
    labels = SEP.join((view, method if method in METHODS else "other", status_class(status)))
    bucket = bisect.bisect_left(HTTP_BUCKETS_S, seconds)  # len(HTTP_BUCKETS_S) is +Inf
    get_store().add(HTTP, {f"{labels}{SEP}{bucket}": 1, f"{labels}{SEP}sum": float(seconds)})


def record_task_retry(task: str) -> None:
    get_store().add(TASKS, {f"{task}{SEP}retry": 1})


def record_task_failure(task: str) -> None:
    get_store().add(TASKS, {f"{task}{SEP}failure": 1})


def record_pass(name: str, *, at: float | None = None) -> None:
    """A pass (discovery's full list, a reconcile pass) that finished without error, at Unix time `at` (now)."""
    if name not in PASS_NAMES:
        raise ValueError(f"unknown pass {name!r}")
    get_store().put(PASSES, {name: time.time() if at is None else at})
