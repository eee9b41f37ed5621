"""The long-lived discovery process (`manage.py discover_fleet`): list, then watch, Nodes, the `gpu.nvidia.com`
ResourceSlices and ResourceClaims, and hand what changed to the discovery services (cluster/discovery.py).

One thread per collection talks to the API server (through the adapter only): it lists in pages, then watches
from the list's resourceVersion with bookmarks, resuming from the last resourceVersion it saw when a watch ends
or breaks. On 410 Gone (the resourceVersion is older than the server keeps) it lists again; it also lists again
every FATIA_DISCOVERY_RESYNC_S, so anything a watch could have missed is caught. The threads never touch the
database: they queue what they read, and the main thread keeps the in-memory view of the cluster, works out
which nodes and claims changed, and writes them through the services every FLUSH_S (a change reaches the
database in a fraction of a second; bench/discovery.py measures it).

Slices are cut down as they are read (allocations/cluster/published.py), so the process stays small whatever
the fleet: a thousand 8-GPU nodes publish about 400 MB of slices.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
import uuid
from collections.abc import Callable, Collection, Iterator
from dataclasses import dataclass, field
from typing import Any, Protocol

from django.conf import settings
from django.db import DatabaseError, close_old_connections

from allocations.cluster import kube
from allocations.cluster.discovery import (
    ClaimView,
    DiscoveredNode,
    DiscoveryReport,
    sync_claimed_devices,
    sync_fleet,
)
from allocations.cluster.published import DriverPools, SliceSummary, summarize
from portal.metrics import events as metric_events
from tenants.models import TenantNamespace

logger = logging.getLogger(__name__)

KINDS = ("nodes", "slices", "claims")
# How long the main thread gathers changes before writing them: small, so a change reaches the database fast,
# large enough that a burst (a node and its nine slices) is one write.
FLUSH_S = 0.05
# The API server ends a watch after this long; the next one resumes from the last resourceVersion seen.
WATCH_S = 240
RETRY_S = (0.5, 1.0, 2.0, 5.0, 10.0)


class Adapter(Protocol):
    """What discovery needs of the Kubernetes adapter (allocations/cluster/kube.py); tests may fake it."""

    def list_collection(self, kind: str, each: Callable[[Any], None]) -> str: ...

    def watch_collection(self, kind: str, resource_version: str, *, timeout_s: int) -> Iterator[kube.WatchEvent]: ...


class KubeAdapter:
    def list_collection(self, kind: str, each: Callable[[Any], None]) -> str:
        return kube.list_collection(kind, each)

    def watch_collection(self, kind: str, resource_version: str, *, timeout_s: int) -> Iterator[kube.WatchEvent]:
        return kube.watch_collection(kind, resource_version, timeout_s=timeout_s)


@dataclass(frozen=True, slots=True)
class _Listed:
    kind: str
    items: list[Any]


@dataclass(frozen=True, slots=True)
class _Changed:
    kind: str
    event: kube.WatchEvent


def claim_view(info: kube.ClaimInfo, prefix: str, owned: Collection[str] = frozenset()) -> ClaimView | None:
    """What discovery keeps of a claim: None while it holds no gpu.nvidia.com device. The portal's label counts
    only in the namespaces it manages, where nobody else may claim NVIDIA devices (the claim admission policy): the
    ones it made (`prefix`) and those tenants own (`owned`); anywhere else a claim is outside Fatia, label or not."""
    if not info.devices:
        return None
    ours = info.namespace.startswith(prefix) or info.namespace in owned
    allocation = info.labels.get(kube.LABEL_ALLOCATION) if ours else None
    try:
        allocation = str(uuid.UUID(allocation)) if allocation else None
    except ValueError:
        allocation = None
    return ClaimView(
        namespace=info.namespace,
        name=info.name,
        uid=info.uid,
        allocation_uuid=allocation,
        devices=tuple((d.pool, d.device) for d in info.devices),
        shares=tuple((d.share_id, d.consumed_memory_mib) for d in info.devices),
    )


def _convert(kind: str, obj: Any) -> Any:
    # Slices are summarised in the collection's thread, before they are queued: that keeps memory flat.
    return summarize(obj) if kind == "slices" else obj


@dataclass
class ClusterView:
    """The cluster as the watches last said, and what changed since the last write."""

    prefix: str
    # The namespaces tenants own (TenantNamespace), read again before each batch of changes is taken.
    owned: frozenset[str] = frozenset()
    nodes: dict[str, kube.NodeInfo] = field(default_factory=dict)
    pools: DriverPools = field(default_factory=DriverPools)
    claims: dict[tuple[str, str], ClaimView] = field(default_factory=dict)
    dirty_nodes: set[str] = field(default_factory=set)
    dirty_claims: set[tuple[str, str]] = field(default_factory=set)
    full_nodes: bool = False
    full_claims: bool = False
    listed: set[str] = field(default_factory=set)

    def load(self, kind: str, items: list[Any]) -> None:
        """A fresh list of one collection replaces what the view had of it."""
        self.listed.add(kind)
        if kind == "nodes":
            self.dirty_nodes |= set(self.nodes)
            self.nodes = {n.name: n for n in items}
            self.dirty_nodes |= set(self.nodes)
            self.full_nodes = True
        elif kind == "slices":
            self.dirty_nodes |= self.pools.pools()
            self.pools.clear()
            for summary in items:
                self.pools.put(summary)
            self.dirty_nodes |= self.pools.pools()
        else:
            self.dirty_claims |= set(self.claims)
            views = [claim_view(c, self.prefix, self.owned) for c in items]
            self.claims = {(v.namespace, v.name): v for v in views if v is not None}
            self.dirty_claims |= set(self.claims)
            self.full_claims = True

    def apply(self, kind: str, event: kube.WatchEvent) -> None:
        obj = event.obj
        deleted = event.kind == "DELETED"
        if isinstance(obj, kube.NodeInfo):
            before = self.nodes.get(obj.name)
            if deleted:
                self.nodes.pop(obj.name, None)
            else:
                self.nodes[obj.name] = obj
            # Status heartbeats change nothing discovery keeps.
            if deleted or before is None or before.labels != obj.labels:
                self.dirty_nodes.add(obj.name)
        elif isinstance(obj, SliceSummary):
            before_view = self.pools.published(obj.pool)
            pool = self.pools.remove(obj.name) if deleted else self.pools.put(obj)
            if pool is not None and self.pools.published(pool) != before_view:
                self.dirty_nodes.add(pool)
        elif isinstance(obj, kube.ClaimInfo):
            key = (obj.namespace, obj.name)
            view = None if deleted else claim_view(obj, self.prefix, self.owned)
            if self.claims.get(key) != view:
                if view is None:
                    self.claims.pop(key, None)
                else:
                    self.claims[key] = view
                self.dirty_claims.add(key)

    @property
    def ready(self) -> bool:
        return self.listed >= set(KINDS)

    def flush(self) -> DiscoveryReport:
        """Write what changed through the services; what is written is no longer dirty."""
        report = DiscoveryReport()
        if not self.ready:
            return report
        if self.dirty_nodes or self.full_nodes:
            names = set(self.nodes) if self.full_nodes else self.dirty_nodes
            found = [
                DiscoveredNode(name=n, labels=self.nodes[n].labels, published=self.pools.published(n))
                for n in sorted(names)
                if n in self.nodes
            ]
            gone = sorted(n for n in self.dirty_nodes if n not in self.nodes)
            report.merge(sync_fleet(nodes=found, gone=gone, everything=self.full_nodes))
            self.dirty_nodes.clear()
            self.full_nodes = False
        if self.dirty_claims or self.full_claims:
            keys = set(self.claims) if self.full_claims else self.dirty_claims
            report.claimed_devices += sync_claimed_devices(
                claims=[self.claims[k] for k in sorted(keys) if k in self.claims],
                removed=sorted(k for k in self.dirty_claims if k not in self.claims),
                everything=self.full_claims,
            )
            self.dirty_claims.clear()
            self.full_claims = False
        return report


class FleetDiscovery:
    """List, watch and write (see the module docstring). `sync_once` lists everything and writes it in one go;
    `start` + `pump` (or `run_forever`) keep the database following the cluster."""

    def __init__(self, adapter: Adapter | None = None, *, resync_s: float | None = None) -> None:
        self.adapter: Adapter = adapter or KubeAdapter()
        self.resync_s = float(resync_s if resync_s is not None else settings.FATIA_DISCOVERY_RESYNC_S)
        self.view = ClusterView(prefix=settings.FATIA_KUBE_NAMESPACE_PREFIX)
        self.queue: queue.Queue[_Listed | _Changed] = queue.Queue()
        self.stopping = threading.Event()
        self.lists: dict[str, int] = dict.fromkeys(KINDS, 0)  # how often each collection was listed
        self.threads: list[threading.Thread] = []

    def _list(self, kind: str) -> tuple[list[Any], str]:
        items: list[Any] = []
        version = self.adapter.list_collection(kind, lambda obj: items.append(_convert(kind, obj)))
        self.lists[kind] += 1
        return items, version

    def sync_once(self) -> DiscoveryReport:
        """List nodes, slices and claims, and write the whole picture (nodes not listed are gone).
        Raises KubeUnavailable."""
        self._read_owned()
        for kind in KINDS:
            items, _ = self._list(kind)
            self.view.load(kind, items)
        report = self.view.flush()
        metric_events.record_pass("discovery")
        return report

    # --- the long-lived process ---------------------------------------------------------------------------

    def start(self) -> None:
        for kind in KINDS:
            thread = threading.Thread(target=self._follow, args=(kind,), name=f"discover-{kind}", daemon=True)
            thread.start()
            self.threads.append(thread)

    def stop(self) -> None:
        self.stopping.set()

    def _follow(self, kind: str) -> None:
        """List, then watch until the resync is due or the resourceVersion is gone; again, until stopped."""
        failures = 0
        while not self.stopping.is_set():
            try:
                items, version = self._list(kind)
            except kube.KubeError as exc:
                # KubeRejected too: an API server that just restarted answers 403 until its RBAC cache is
                # filled; a lasting 403 (the ClusterRole lacks list/watch) is logged every time it is tried.
                failures += 1
                logger.warning("discovery: listing %s failed (%s); retrying", kind, exc.message)
                self.stopping.wait(RETRY_S[min(failures, len(RETRY_S)) - 1])
                continue
            failures = 0
            self.queue.put(_Listed(kind, items))
            del items
            listed_at = time.monotonic()
            while not self.stopping.is_set():
                remaining = self.resync_s - (time.monotonic() - listed_at)
                if remaining <= 0:
                    break  # periodic resync: list again
                timeout = max(int(min(remaining, WATCH_S)), 1)
                try:
                    for event in self.adapter.watch_collection(kind, version, timeout_s=timeout):
                        version = event.resource_version or version
                        if event.obj is not None:
                            converted = kube.WatchEvent(event.kind, _convert(kind, event.obj), version)
                            self.queue.put(_Changed(kind, converted))
                        if self.stopping.is_set():
                            return
                    failures = 0
                except kube.KubeGone as exc:
                    logger.info("discovery: %s watch: %s; listing again", kind, exc.message)
                    break
                except kube.KubeError as exc:
                    failures += 1
                    logger.warning("discovery: %s watch broke (%s); resuming", kind, exc.message)
                    self.stopping.wait(RETRY_S[min(failures, len(RETRY_S)) - 1])

    def pump(self, timeout: float) -> DiscoveryReport:
        """Take what the threads read for up to `timeout` seconds (writing every FLUSH_S while changes come in);
        returns what the writes changed. A database error keeps the changes for the next write."""
        report = DiscoveryReport()
        deadline = time.monotonic() + timeout
        while True:
            wait = deadline - time.monotonic()
            if wait <= 0:
                break
            try:
                message = self.queue.get(timeout=wait)
            except queue.Empty:
                break
            self._read_owned()
            self._take(message)
            # Gather what arrives together (a node and its slices), then write it.
            gather_until = time.monotonic() + FLUSH_S
            while (left := gather_until - time.monotonic()) > 0:
                try:
                    self._take(self.queue.get(timeout=left))
                except queue.Empty:
                    break
            report.merge(self._flush())
        return report

    def _read_owned(self) -> None:
        """The namespaces tenants own now (one query per batch); the last ones known while the database is away."""
        try:
            self.view.owned = frozenset(TenantNamespace.objects.values_list("name", flat=True))
        except DatabaseError:
            logger.warning("discovery: could not read the tenants' namespaces; keeping the last ones read")
            close_old_connections()

    def _take(self, message: _Listed | _Changed) -> None:
        if isinstance(message, _Listed):
            self.view.load(message.kind, message.items)
        else:
            self.view.apply(message.kind, message.event)

    def _flush(self) -> DiscoveryReport:
        try:
            report = self.view.flush()
        except DatabaseError:
            logger.exception("discovery: could not write to the database; trying again")
            close_old_connections()
            return DiscoveryReport()
        # The database follows the cluster as of now: a change, or at least the resync's full list, is written
        # every FATIA_DISCOVERY_RESYNC_S while discovery is healthy (fatia_discovery_last_success_timestamp_seconds).
        metric_events.record_pass("discovery")
        return report

    def run_forever(self) -> None:
        self.start()
        while not self.stopping.is_set():
            close_old_connections()
            report = self.pump(timeout=5.0)
            if report.changed:
                logger.info(
                    "discovery: %d nodes written (joined %s, left %s, gone %s, back %s, GPUs changed %s), "
                    "%d claimed devices",
                    len(report.updated),
                    report.joined,
                    report.left,
                    report.gone,
                    report.back,
                    report.gpus_changed,
                    report.claimed_devices,
                )
