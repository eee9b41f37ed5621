"""Counters that every process of the portal adds to: the web workers (HTTP latency), the Celery workers (task
retries and failures, reconcile passes) and fleet discovery (its passes).

Prometheus scrapes one web process at a time, so a counter kept in that process's memory would show only its
own share, and would restart from zero with it. These live in Redis instead (the shared cache, CACHE_URL), as
hashes of field -> number: one pipelined round trip per write, one HGETALL per family at scrape time. Without
CACHE_URL (the demo: one process) they live in this process's memory.

A broken Redis never breaks a request or a task: writes are dropped (and logged) for a short while, and the
scrape reports `fatia_metrics_store_up 0` instead of those families.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Mapping
from typing import Protocol

import redis
from django.conf import settings

logger = logging.getLogger(__name__)

#: A metrics write is not worth holding a request up for: give Redis this long, then drop the write.
SOCKET_TIMEOUT_S = 0.25
#: After a failed write, drop writes this long before trying again, so a dead Redis costs one timeout, not one
#: per request.
BACKOFF_S = 10.0

HTTP = "http"
TASKS = "tasks"
PASSES = "passes"


class StoreUnavailable(Exception):
    """The shared store could not be read."""


class Store(Protocol):
    def add(self, family: str, amounts: Mapping[str, float]) -> None:
        """Add each amount to its field (counters; created at zero). A field takes ints or floats, never both."""

    def put(self, family: str, values: Mapping[str, float]) -> None:
        """Set each field to its value (gauges such as a pass's time)."""

    def read(self, family: str) -> dict[str, float]:
        """Every field of the family; raises StoreUnavailable."""


class LocalStore:
    """One process's memory: the demo and development, where one process serves everything."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._data: dict[str, dict[str, float]] = {}

    def add(self, family: str, amounts: Mapping[str, float]) -> None:
        with self._lock:
            fields = self._data.setdefault(family, {})
            for field, amount in amounts.items():
                fields[field] = fields.get(field, 0.0) + amount

    def put(self, family: str, values: Mapping[str, float]) -> None:
        with self._lock:
            self._data.setdefault(family, {}).update(values)

    def read(self, family: str) -> dict[str, float]:
        with self._lock:
            return dict(self._data.get(family, {}))


class RedisStore:
    """Hashes in Redis, shared by every process that has the same CACHE_URL."""

    def __init__(self, url: str, prefix: str) -> None:
        self.client = redis.Redis.from_url(
            url, socket_timeout=SOCKET_TIMEOUT_S, socket_connect_timeout=SOCKET_TIMEOUT_S
        )
        self.prefix = prefix
        self._resume_at = 0.0

    def _write(self, family: str, amounts: Mapping[str, float], *, add: bool) -> None:
        if not amounts or time.monotonic() < self._resume_at:
            return
        key = self.prefix + family
        try:
            pipe = self.client.pipeline(transaction=True)
            if add:
                for field, amount in amounts.items():
                    # By type, not by value: once a field holds "2.3", Redis refuses HINCRBY on it.
                    if isinstance(amount, int):
                        pipe.hincrby(key, field, amount)
                    else:
                        pipe.hincrbyfloat(key, field, amount)
            else:
                pipe.hset(key, mapping={field: float(value) for field, value in amounts.items()})
            pipe.execute()
        except (redis.RedisError, OSError) as exc:
            self._resume_at = time.monotonic() + BACKOFF_S
            logger.warning(
                "metrics: the shared cache does not answer (%s); dropping metric writes for %.0f s",
                exc.__class__.__name__,
                BACKOFF_S,
            )

    def add(self, family: str, amounts: Mapping[str, float]) -> None:
        self._write(family, amounts, add=True)

    def put(self, family: str, values: Mapping[str, float]) -> None:
        self._write(family, values, add=False)

    def read(self, family: str) -> dict[str, float]:
        try:
            raw = self.client.hgetall(self.prefix + family)
        except (redis.RedisError, OSError) as exc:
            raise StoreUnavailable(str(exc)) from exc
        return {(field.decode() if isinstance(field, bytes) else field): float(value) for field, value in raw.items()}


_stores: dict[tuple[str | None, str], Store] = {}
_stores_lock = threading.Lock()


def get_store() -> Store:
    """The store for the current settings (one per process; a Redis client is safe to share across threads)."""
    url = settings.CACHE_URL
    prefix = str(settings.FATIA_METRICS_KEY_PREFIX)
    key = (str(url) if url else None, prefix)
    with _stores_lock:
        store = _stores.get(key)
        if store is None:
            store = _stores[key] = RedisStore(str(url), prefix) if url else LocalStore()
        return store
