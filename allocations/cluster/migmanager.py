"""MIG-manager mode: have NVIDIA's MIG manager (GPU Operator) apply a layout Fatia chose, and follow it.

Two plain functions for the reconfiguration orchestration (pool mode ``static-manager``):

* :func:`apply_manager_layout` validates the layout (counts per profile per GPU) against the node's GPU model,
  adds its ``fatia-<hash>`` entry to the manager's ConfigMap (``FATIA_MIG_MANAGER_NAMESPACE`` /
  ``FATIA_MIG_MANAGER_CONFIGMAP``, key ``config.yaml``) and points the node's ``nvidia.com/mig.config`` at it.
  Repeating the call changes nothing.
* :func:`manager_apply_state` is the step the orchestration calls until it answers ``success`` or ``failed``:
  it reads ``nvidia.com/mig.config.state`` (``pending`` -> optional ``rebooting`` -> ``success`` | ``failed``),
  and turns a change pending longer than ``FATIA_MIG_MANAGER_TIMEOUT_S`` into ``failed``. It never sleeps.

Counts, not slots: mig-parted has no placement field, so the driver picks where each instance goes; the portal
reads the slots back from what the DRA plugin republishes after its restart (the orchestration's next step).

The ConfigMap is shared with whoever else writes mig-parted entries (the operator's defaults, an admin's own).
Writes read the config, add Fatia's entry and write it back only if nobody changed it in between (the
ConfigMap's resourceVersion); on a conflict they read again. Entries Fatia did not write are never removed or
changed, and Fatia's own are left in place too (another node may still name one).
"""

from __future__ import annotations

import logging
import random
import time
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Literal

from django.conf import settings
from django.utils import timezone

from allocations.cluster import kube
from allocations.mig.catalog import GpuModel, load_catalog
from allocations.mig.migparted import CONFIG_KEY, NodeLayout, build_config, merged_config
from allocations.models import Node

logger = logging.getLogger(__name__)

CONFIG_LABEL = "nvidia.com/mig.config"
STATE_LABEL = "nvidia.com/mig.config.state"
# When Fatia last pointed the node at a config: the start of the bounded wait.
REQUESTED_AT = "fatia.io/mig-config-requested-at"
# Concurrent writers each lose a few rounds (every node's reconfiguration and an admin may write at once); with a
# jittered back-off between rounds, past this many the ConfigMap is being rewritten non-stop.
WRITE_ATTEMPTS = 16
WRITE_BACKOFF_S = 0.05
WRITE_BACKOFF_MAX_S = 1.0

ApplyState = Literal["pending", "success", "failed"]


class MigManagerError(Exception):
    """The MIG manager cannot be asked for this layout (unknown node, a ConfigMap Fatia must not overwrite)."""


@dataclass(frozen=True, slots=True)
class ManagerApplyStatus:
    """Where a node's MIG-manager change stands; ``reason`` says why when it failed."""

    state: ApplyState
    reason: str = ""


def apply_manager_layout(*, node_name: str, layout: NodeLayout, model: GpuModel | None = None) -> str:
    """Write the mig-parted config for ``layout`` (profile -> count per GPU index) and set the node's
    ``nvidia.com/mig.config`` to it; returns the config name. Idempotent.

    ``model`` defaults to the GPU model of the node's pool. Raises :class:`~allocations.mig.migparted.
    InvalidManagerLayout` for counts that cannot be packed, :class:`MigManagerError` for an unknown node or a
    ConfigMap that is not a mig-parted config, and the adapter's ``KubeUnavailable``/``KubeRejected``.
    """
    name, entries = build_config(model or _node_model(node_name), layout)
    _write_entry(name, entries)
    _point_node_at(node_name, name)
    return name


def manager_apply_state(node_name: str, config_name: str) -> ApplyState:
    """``pending``, ``success`` or ``failed`` for the change to ``config_name`` on the node (the step function)."""
    return manager_apply_status(node_name, config_name).state


def manager_apply_status(node_name: str, config_name: str, *, now: datetime | None = None) -> ManagerApplyStatus:
    """:func:`manager_apply_state` with the reason of a failure: the manager's latest warning event about the
    node when it left one, a relabelled node, a vanished node, or the wait running out."""
    metadata = kube.read_node_metadata(node_name)
    if metadata is None:
        return ManagerApplyStatus("failed", f"node {node_name} no longer exists")
    current = metadata.labels.get(CONFIG_LABEL)
    if current != config_name:
        return ManagerApplyStatus(
            "failed", f"{CONFIG_LABEL} on {node_name} is now {current or '(unset)'}, not {config_name}"
        )
    state = metadata.labels.get(STATE_LABEL, "")
    started = _parse_time(metadata.annotations.get(REQUESTED_AT, ""))
    if state == "success":
        return ManagerApplyStatus("success")
    if state == "failed":
        return ManagerApplyStatus("failed", _failure_reason(node_name, config_name, started))
    # pending, rebooting, or not set yet (the manager has not seen the label): wait, within the bound.
    limit = timedelta(seconds=settings.FATIA_MIG_MANAGER_TIMEOUT_S)
    if started is not None and (now or timezone.now()) - started > limit:
        return ManagerApplyStatus(
            "failed",
            f"the MIG manager left {node_name} {state or 'without a state'} for more than "
            f"{settings.FATIA_MIG_MANAGER_TIMEOUT_S} s after {CONFIG_LABEL}={config_name}",
        )
    return ManagerApplyStatus("pending")


def _node_model(node_name: str) -> GpuModel:
    node = Node.objects.select_related("pool").filter(name=node_name).first()
    if node is None:
        raise MigManagerError(f"no node named {node_name} in the portal")
    if node.pool is None:
        raise MigManagerError(f"node {node_name} is in no pool, so its GPU model is unknown")
    return load_catalog().model(node.pool.gpu_model)


def _write_entry(name: str, entries: list[dict[str, object]]) -> None:
    namespace = settings.FATIA_MIG_MANAGER_NAMESPACE
    configmap = settings.FATIA_MIG_MANAGER_CONFIGMAP
    for attempt in range(WRITE_ATTEMPTS):
        found = kube.read_config_map_key(namespace, configmap, CONFIG_KEY)
        try:
            text = merged_config(found.value if found else None, name, [dict(e) for e in entries])
        except ValueError as exc:  # InvalidManagerConfig: someone else's config we must not overwrite
            raise MigManagerError(f"ConfigMap {namespace}/{configmap}: {exc}") from exc
        if text is None:
            return  # already there
        version = found.resource_version if found else None
        if kube.write_config_map_key(namespace, configmap, CONFIG_KEY, text, resource_version=version):
            logger.info("mig-parted config %s written to %s/%s", name, namespace, configmap)
            return
        # Lost the race: wait a random, growing while, so that writers that collided do not collide again in step.
        time.sleep(random.uniform(0, min(WRITE_BACKOFF_S * 2**attempt, WRITE_BACKOFF_MAX_S)))  # noqa: S311
    raise kube.KubeUnavailable(
        f"ConfigMap {namespace}/{configmap} changed under each of {WRITE_ATTEMPTS} writes; try again later"
    )


def _point_node_at(node_name: str, name: str) -> None:
    metadata = kube.read_node_metadata(node_name)
    if metadata is None:
        raise MigManagerError(f"node {node_name} does not exist in the cluster")
    if metadata.labels.get(CONFIG_LABEL) == name:
        return  # a repeated call: the manager already has it, and its state label is about this config
    # The state label describes the previous config until the manager sees the change; removing it in the same
    # write keeps a stale `success` from being read as this change's.
    kube.patch_node_metadata(
        node_name,
        labels={CONFIG_LABEL: name, STATE_LABEL: None},
        annotations={REQUESTED_AT: timezone.now().isoformat()},
    )


def _failure_reason(node_name: str, config_name: str, since: datetime | None) -> str:
    # The manager's own words, when it left an event about the node since Fatia asked; otherwise where to look.
    events = [
        e
        for e in kube.list_node_events(node_name)
        if e.type == "Warning"
        and "mig" in e.component.lower()
        # Event times have whole seconds.
        and (since is None or (_parse_time(e.time) or since) >= since.replace(microsecond=0))
    ]
    if events:
        last = events[-1]
        return f"{last.component}: {last.reason}: {last.message}"
    return f"the MIG manager set {STATE_LABEL}=failed for {config_name} on {node_name} (its pod's log has the cause)"


def _parse_time(text: str) -> datetime | None:
    try:
        return datetime.fromisoformat(text) if text else None
    except ValueError:
        return None
