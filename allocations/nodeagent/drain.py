"""The drain worker's step: take queued telemetry reports, apply them in one transaction, then forget them.

Exactly once: entries are acknowledged (and deleted) only after the transaction that applied them committed. A
crash before the commit leaves them pending, and they are read again; a crash between the commit and the
acknowledgement makes them be read again too, and the apply skips their samples (boot id + sequence, under the
AgentStatus lock). A batch that fails for another reason than the database (a bug, a report the apply cannot take)
is retried one report at a time, and a report that fails alone goes to the dead-letter stream, so one bad entry
never stops the queue.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from django.db import DatabaseError, InterfaceError, OperationalError

from allocations.nodeagent import ingest_queue
from allocations.nodeagent.ingest_queue import QueuedReport
from allocations.nodeagent.telemetry import Report, apply_reports

log = logging.getLogger(__name__)


@dataclass
class DrainResult:
    reports: int = 0
    samples: int = 0
    buried: int = 0


def _apply(queued: list[QueuedReport]) -> int:
    results = apply_reports([Report(node_id=q.node_id, payload=q.payload, accepted_at=q.accepted_at) for q in queued])
    return sum(r.accepted for r in results if r is not None)


def drain_telemetry(*, consumer: str, count: int, block_ms: int = 0, recover: bool = True) -> DrainResult:
    """Apply up to ``count`` queued reports (waiting up to ``block_ms`` for one; with ``recover``, unfinished ones
    first: see ingest_queue.read_reports). Raises the database's OperationalError/InterfaceError when it is
    unreachable: the reports stay queued for the next call."""
    queued = ingest_queue.read_reports(consumer=consumer, count=count, block_ms=block_ms, recover=recover)
    if not queued:
        return DrainResult()
    try:
        samples = _apply(queued)
    except (OperationalError, InterfaceError):
        raise
    except DatabaseError as exc:
        log.warning("a batch of %d reports failed (%s); applying them one at a time", len(queued), exc)
        return _one_by_one(queued)
    except Exception:
        log.exception("a batch of %d reports failed; applying them one at a time", len(queued))
        return _one_by_one(queued)
    ingest_queue.ack_reports([q.entry_id for q in queued])
    return DrainResult(reports=len(queued), samples=samples)


def _one_by_one(queued: list[QueuedReport]) -> DrainResult:
    result = DrainResult()
    for q in queued:
        try:
            result.samples += _apply([q])
        except (OperationalError, InterfaceError):
            raise
        except Exception as exc:
            log.exception(
                "report %s of node %s cannot be applied; moved to %s", q.entry_id, q.node_id, ingest_queue.DEAD
            )
            ingest_queue.bury_report(q, f"{type(exc).__name__}: {exc}")
            result.buried += 1
            continue
        ingest_queue.ack_reports([q.entry_id])
        result.reports += 1
    return result
