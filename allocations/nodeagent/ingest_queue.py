"""The telemetry queue between the web processes and the drain worker: a Redis stream (FATIA_INGEST_QUEUE_URL).

A report the web process accepted is one stream entry (node id, accepted-at, validated payload). The drain worker
reads entries through a consumer group and acknowledges *and deletes* them only after the transaction that applied
them committed, so the stream's length is the backlog: entries accepted and not yet applied. A worker that dies
between reading and committing leaves its entries pending in the group; the next one takes them again (its own at
once, another consumer's after FATIA_INGEST_CLAIM_IDLE_S), and the apply skips samples already applied (boot id +
sequence), so every accepted sample is applied exactly once.

Also here: the per-node "commands waiting" flag the telemetry answer carries, so that idle agents need not poll.
It is set after a batch of commands commits and cleared when the agent lists its commands.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import redis
from django.conf import settings

log = logging.getLogger(__name__)

STREAM = "fatia:ingest:telemetry"
GROUP = "drain"
DEAD = "fatia:ingest:dead"  # entries that could not be applied even alone (a bug or a vanished node), kept to read
WAITING = "fatia:ingest:commands-waiting"  # hash: node id -> 1 while commands wait for that node's agent

# One round trip, atomic: refuse past the bound, else append and say whether commands wait for the node.
_ACCEPT = """
if redis.call('XLEN', KEYS[1]) >= tonumber(ARGV[1]) then return -1 end
redis.call('XADD', KEYS[1], '*', 'n', ARGV[2], 't', ARGV[3], 'p', ARGV[4])
return tonumber(redis.call('HGET', KEYS[2], ARGV[2]) or '0')
"""

# The agent's request, one round trip: the credential shared by every web process (shared_credentials.py; ARGV[5]
# when the caller just looked it up, and then kept for ARGV[6] s), its node's name against the report's, the bound,
# the append, the commands-waiting flag, and whether `last_used_at` is due (at most once a minute per credential).
_ACCEPT_AS = """
local credential = ARGV[5]
if credential == '' then
  credential = redis.call('GET', KEYS[3])
  if not credential then return {-2} end
elseif tonumber(ARGV[6]) > 0 then
  redis.call('SET', KEYS[3], credential, 'EX', ARGV[6])
end
local node_id, credential_id, name = string.match(credential, '^(%d+) (%d+) (.*)$')
if name ~= ARGV[2] then return {-3, name} end
if redis.call('XLEN', KEYS[1]) >= tonumber(ARGV[1]) then return {-1} end
redis.call('XADD', KEYS[1], '*', 'n', node_id, 't', ARGV[3], 'p', ARGV[4])
local due = redis.call('SET', KEYS[4], '1', 'NX', 'EX', 60) and 1 or 0
return {tonumber(redis.call('HGET', KEYS[2], node_id) or '0'), due, tonumber(credential_id)}
"""

_clients: dict[str, redis.Redis] = {}


def enabled() -> bool:
    return bool(settings.FATIA_INGEST_QUEUE_URL)


_scripts: dict[tuple[str, str], Any] = {}


def _script(source: str) -> Any:
    """The script object of this process's client (registering hashes the source: once, not per request)."""
    url = str(settings.FATIA_INGEST_QUEUE_URL)
    found = _scripts.get((url, source))
    if found is None:
        found = _scripts[(url, source)] = client().register_script(source)
    return found


def client() -> redis.Redis:
    """One client per process and URL (it pools connections and is safe across threads)."""
    url = str(settings.FATIA_INGEST_QUEUE_URL)
    found = _clients.get(url)
    if found is None:
        found = _clients[url] = redis.Redis.from_url(url, socket_timeout=5, socket_connect_timeout=5)
    return found


class Backlogged(Exception):
    """The queue holds FATIA_INGEST_BACKLOG_MAX reports not yet applied: refuse (503) until the worker catches up."""


@dataclass(frozen=True, slots=True)
class QueuedReport:
    entry_id: str
    node_id: int
    accepted_at: datetime
    payload: dict[str, Any]


def accept_report(*, node_id: int, payload: dict[str, Any], accepted_at: datetime) -> int:
    """Queue one validated report; returns the node's commands-waiting flag (0 or 1). Raises Backlogged."""
    body = json.dumps(payload, separators=(",", ":"))
    script = _script(_ACCEPT)
    answer = int(
        script(
            keys=[STREAM, WAITING],
            args=[settings.FATIA_INGEST_BACKLOG_MAX, node_id, accepted_at.timestamp(), body],
        )
    )
    if answer < 0:
        raise Backlogged
    return answer


class NotShared(Exception):
    """No shared entry for this credential: look it up and call again with ``known``."""


class ForAnotherNode(Exception):
    """The credential belongs to another node than the report names (403)."""

    def __init__(self, node_name: str) -> None:
        super().__init__(node_name)
        self.node_name = node_name


@dataclass(frozen=True, slots=True)
class Accepted:
    commands: int  # the node's commands-waiting flag
    touch_due: bool  # write the credential's last_used_at (once a minute per credential, across processes)
    credential_id: int


def accept_from_agent(
    *, digest: str, payload: dict[str, Any], accepted_at: datetime, known: str = "", keep_s: int = 0
) -> Accepted:
    """Queue one validated report sent with the credential of token digest ``digest``: one round trip. ``known``
    (shared_credentials.entry) when the caller has just looked the credential up, then kept ``keep_s`` seconds.
    Raises NotShared, ForAnotherNode or Backlogged; nothing is queued then."""
    from allocations.nodeagent import shared_credentials  # it imports this module

    body = json.dumps(payload, separators=(",", ":"))
    script = _script(_ACCEPT_AS)
    answer: Any = script(
        keys=[STREAM, WAITING, shared_credentials.key(digest), shared_credentials.used_key(digest)],
        args=[settings.FATIA_INGEST_BACKLOG_MAX, payload["node"], accepted_at.timestamp(), body, known, keep_s],
    )
    code = int(answer[0])
    if code == -2:
        raise NotShared
    if code == -3:
        raise ForAnotherNode(answer[1].decode())
    if code == -1:
        raise Backlogged
    return Accepted(commands=code, touch_due=bool(answer[1]), credential_id=int(answer[2]))


def backlog() -> int:
    return int(client().xlen(STREAM))


_groups: set[str] = set()


def _ensure_group() -> None:
    url = str(settings.FATIA_INGEST_QUEUE_URL)
    if url in _groups:
        return
    try:
        # From the stream's start ("0"): reports accepted before the first worker ever ran are applied too.
        client().xgroup_create(STREAM, GROUP, id="0", mkstream=True)
    except redis.ResponseError as exc:
        if "BUSYGROUP" not in str(exc):
            raise
    _groups.add(url)


def _decode(entry_id: bytes, fields: dict[bytes, bytes]) -> QueuedReport:
    return QueuedReport(
        entry_id=entry_id.decode(),
        node_id=int(fields[b"n"]),
        accepted_at=datetime.fromtimestamp(float(fields[b"t"]), UTC),
        payload=json.loads(fields[b"p"]),
    )


def read_reports(*, consumer: str, count: int, block_ms: int, recover: bool = True) -> list[QueuedReport]:
    """See _read; the group is made once per process, and again if Redis lost it (emptied, or restarted)."""
    try:
        return _read(consumer=consumer, count=count, block_ms=block_ms, recover=recover)
    except redis.ResponseError as exc:
        if "NOGROUP" not in str(exc):
            raise
        _groups.discard(str(settings.FATIA_INGEST_QUEUE_URL))
        return _read(consumer=consumer, count=count, block_ms=block_ms, recover=recover)


def _read(*, consumer: str, count: int, block_ms: int, recover: bool) -> list[QueuedReport]:
    """Up to ``count`` reports for ``consumer``, oldest first: with ``recover``, its own unacknowledged ones (a crash
    or a failed apply left them), then those a silent consumer held past FATIA_INGEST_CLAIM_IDLE_S; then new ones
    (waiting up to ``block_ms`` for one). The worker recovers at start, after a failure and now and then, not on
    every read: two round trips saved per batch."""
    _ensure_group()
    r = client()
    if not recover:
        new: Any = r.xreadgroup(GROUP, consumer, {STREAM: ">"}, count=count, block=block_ms or None)
        return [_decode(entry_id, fields) for entry_id, fields in (new[0][1] if new else []) if fields]
    # redis-py's stubs type these answers as any of the protocol's shapes; they are lists of (id, fields).
    own: Any = r.xreadgroup(GROUP, consumer, {STREAM: "0"}, count=count)
    entries: list[Any] = own[0][1] if own else []
    if not entries:
        idle_ms = int(settings.FATIA_INGEST_CLAIM_IDLE_S * 1000)
        claimed: Any = r.xautoclaim(STREAM, GROUP, consumer, min_idle_time=idle_ms, start_id="0-0", count=count)
        entries = [e for e in claimed[1] if e[1]]  # deleted entries come back empty
    if not entries:
        fresh: Any = r.xreadgroup(GROUP, consumer, {STREAM: ">"}, count=count, block=block_ms or None)
        entries = fresh[0][1] if fresh else []
    return [_decode(entry_id, fields) for entry_id, fields in entries if fields]


def ack_reports(entry_ids: list[str]) -> None:
    """Forget applied reports: acknowledged in the group and deleted from the stream (which stays the backlog)."""
    if not entry_ids:
        return
    pipe = client().pipeline(transaction=True)
    pipe.xack(STREAM, GROUP, *entry_ids)
    pipe.xdel(STREAM, *entry_ids)
    pipe.execute()


def bury_report(report: QueuedReport, reason: str) -> None:
    """Move a report that cannot be applied to the dead-letter stream (capped), and forget it."""
    fields: Any = {
        "n": report.node_id,
        "t": report.accepted_at.timestamp(),
        "p": json.dumps(report.payload),
        "why": reason[:500],
    }
    client().xadd(DEAD, fields, maxlen=10_000, approximate=True)
    ack_reports([report.entry_id])


# --- commands waiting -------------------------------------------------------------------------------------------


def note_commands_waiting(node_id: int) -> None:
    """Commands were queued for the node: its next telemetry answer says so. Best effort (the agent's slow
    fallback poll finds them anyway): a Redis failure is logged, never raised."""
    if not enabled():
        return
    try:
        client().hset(WAITING, str(node_id), 1)
    except (redis.RedisError, OSError) as exc:
        log.warning("could not flag commands waiting for node %s: %s", node_id, exc)


def clear_commands_waiting(node_id: int) -> None:
    """The agent is listing its commands now: no need to tell it again (cleared before the listing reads them, so
    a batch queued meanwhile sets the flag again)."""
    if not enabled():
        return
    try:
        client().hdel(WAITING, str(node_id))
    except (redis.RedisError, OSError) as exc:
        log.warning("could not clear commands waiting for node %s: %s", node_id, exc)
