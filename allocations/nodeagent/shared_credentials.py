"""Node agent credentials the web processes share in the telemetry queue's Redis (queued ingest only).

With the queue on, a checked credential is kept in Redis under its token's digest, so that one lookup serves every
web process: the telemetry request checks it in the same Lua script that queues the report (one round trip, no
query; ``ingest_queue.accept_from_agent``). Per-process caches missed most of the time: with N workers, a node's
reports reach the same worker only every N periods, past the cache's bound.

Revocation bound: ``revoke_agent_credential`` deletes the entry once its transaction commits, so the next report
with that token is looked up again and refused at once, in every process. Only a lookup that read the row just
before the revocation committed can put the entry back; it lasts FATIA_INGEST_CREDENTIAL_TTL_S (60 s) at most (the
entry's Redis TTL, also the bound when Redis was unreachable at the revocation). The TTL is not renewed by use, so
that bound holds; it is longer than a telemetry period, or most reports would pay the lookup again (a 10 s TTL
with reports every 5 s: every other one). Unknown and revoked tokens are never kept; a TTL of 0 keeps nothing (a
query per report).
"""

from __future__ import annotations

import logging

import redis

from allocations.nodeagent import ingest_queue
from allocations.nodeagent.models import AgentCredential

log = logging.getLogger(__name__)

PREFIX = "fatia:agent-credential:"
USED_PREFIX = "fatia:agent-credential-used:"  # set for a minute each time `last_used_at` is written


def key(digest: str) -> str:
    return PREFIX + digest


def used_key(digest: str) -> str:
    return USED_PREFIX + digest


def entry(credential: AgentCredential) -> str:
    """What the accept script reads back: node id, credential id, node name (a Kubernetes name: no spaces)."""
    return f"{credential.node_id} {credential.pk} {credential.node.name}"


def forget(digest: str) -> None:
    """Drop a credential's shared entry (after its revocation commits). Best effort: a Redis failure is logged,
    and the entry ends with its TTL."""
    if not ingest_queue.enabled():
        return
    try:
        ingest_queue.client().delete(key(digest), used_key(digest))
    except (redis.RedisError, OSError) as exc:
        log.warning("could not drop the shared entry of a revoked agent credential: %s", exc)
