"""The JSON the agent sends (``/api/v1/agent/inventory/`` and ``/api/v1/agent/telemetry/``).

Compact on purpose: a telemetry sample of 8 GPUs x 7 MIG devices is about 4 KB, sent every 5 s by every node.
Inventory is sent when the agent starts, when it changes and every few minutes; telemetry samples are batched, so
a sender that was cut off catches up in a few requests. The portal's serializers are the other half of this
contract (``allocations/nodeagent/api/serializers.py``).
"""

from __future__ import annotations

from typing import Any

from agent import AGENT_VERSION
from agent.nvml import GpuSample, HealthEvent, Inventory, Sample


def inventory_payload(node: str, inventory: Inventory) -> dict[str, Any]:
    """``profiles`` per GPU carry what ``allocations.mig.catalog.NvmlProfileReport`` needs."""
    return {
        "node": node,
        "agent_version": AGENT_VERSION,
        "driver_version": inventory.driver_version,
        "gpus": [
            {
                "uuid": g.uuid,
                "index": g.index,
                "minor": g.minor,
                "product": g.product,
                "memory_mib": g.memory_mib,
                "mig": {"current": g.mig_current, "pending": g.mig_pending},
                "profiles": [
                    {
                        "name": p.name,
                        "id": p.profile_id,
                        "slices": p.slice_count,
                        "instances": p.instance_count,
                        "memory_mib": p.memory_mib,
                        "sm": p.sm_count,
                        "placements": [list(pl) for pl in p.placements],
                    }
                    for p in g.profiles
                ],
                "instances": [
                    {
                        "gi": gi.gi_id,
                        "profile_id": gi.profile_id,
                        "profile": gi.profile,
                        "start": gi.start,
                        "size": gi.size,
                        "cis": [{"ci": ci.ci_id, "uuid": ci.uuid} for ci in gi.compute_instances],
                    }
                    for gi in g.instances
                ],
            }
            for g in inventory.gpus
        ],
    }


def _gpu(g: GpuSample) -> dict[str, Any]:
    return {
        "uuid": g.uuid,
        "mem": g.memory_used_mib,
        "util": g.utilisation,
        "src": g.utilisation_source,
        "ecc": [g.ecc_corrected, g.ecc_uncorrected],
        "mig": [
            {
                "uuid": m.uuid,
                "gi": m.gi_id,
                "profile": m.profile,
                "start": m.start,
                "mem": m.memory_used_mib,
                "total": m.memory_total_mib,
                "procs": m.processes,
                "util": m.utilisation,
            }
            for m in g.mig
        ],
    }


def _event(e: HealthEvent) -> dict[str, Any]:
    return {"gpu": e.gpu_uuid, "kind": e.kind, "code": e.code, "gi": e.gi_id, "ci": e.ci_id}


def telemetry_sample(seq: int, ts: float, sample: Sample) -> dict[str, Any]:
    """One sample: ``seq`` counts up from 1 for the agent's lifetime (with ``boot``, it makes a resend harmless)."""
    return {
        "seq": seq,
        "ts": round(ts, 3),
        "gpus": [_gpu(g) for g in sample.gpus],
        "events": [_event(e) for e in sample.events],
    }


def telemetry_payload(node: str, boot: str, dropped: int, samples: list[dict[str, Any]]) -> dict[str, Any]:
    """A batch; ``dropped`` is how many samples the agent's buffer has thrown away since it started."""
    return {"node": node, "boot": boot, "dropped": dropped, "samples": samples}
