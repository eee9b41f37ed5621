"""The Kubernetes side of the compaction tests, faked at the adapter's boundary (fake_kube.py): requests' claims
applied and allocated where the portal recorded them, and a static-MIG pool of pre-created instances. Shared by
tests/compaction and tests/cohorts (lenders' rooms)."""

from __future__ import annotations

from typing import Any

from allocations.cluster import sync as kube_sync
from allocations.models import Allocation, Gpu, NodePool, SlicePlacement
from tests.compaction.fake_kube import FakeKube
from tests.compaction.world import Small

NODE = "small-node-0"


def on_cluster(fake: FakeKube, settings: Any, *allocations: Allocation) -> None:
    """The Kubernetes backend, with each allocation's claim and holder pod applied and allocated where recorded."""
    settings.FATIA_CLUSTER_BACKEND = "kubernetes"
    for allocation in allocations:
        allocation = Allocation.objects.get(pk=allocation.pk)
        [claim], pod = kube_sync.cluster_specs(allocation)
        fake.apply_resource_claim(claim)
        fake.apply_holder_pod(pod)
        [placement] = allocation.placements.all()
        fake.allocate(claim.namespace, claim.name, NODE, placement.device_name)
    fake.calls.clear()


def device(gpu: int, start: int) -> str:
    return f"gpu-{gpu}-mig-1g10gb-19-{start}"


def mig_uuid(gpu: int, start: int) -> str:
    return f"MIG-{gpu}-{start}"


def static_world(small: Small, fake: FakeKube, settings: Any, mode: str, held: dict[tuple[int, int], bool]) -> None:
    """Every GPU carved into seven 1g.10gb; at each (gpu, start) of `held`, an ACTIVE request of alice's (movable
    or not) pinned there by uuid, its claim allocated; then the pool is static and the backend Kubernetes."""
    made = [(small.active("1g.10gb", gpu=g, start=s, movable=m), g, s) for (g, s), m in held.items()]
    NodePool.objects.filter(pk=small.pool.pk).update(mig_mode=mode)
    for index in range(3):
        Gpu.objects.filter(node__pool=small.pool, index=index).update(
            static_instances=[
                {"profile": "1g.10gb", "start": s, "size": 1, "uuid": mig_uuid(index, s), "device": device(index, s)}
                for s in range(7)
            ]
        )
    settings.FATIA_CLUSTER_BACKEND = "kubernetes"
    for allocation, g, s in made:
        SlicePlacement.objects.filter(allocation=allocation).update(mig_uuid=mig_uuid(g, s))
        allocation = Allocation.objects.get(pk=allocation.pk)
        [claim], pod = kube_sync.cluster_specs(allocation)
        fake.apply_resource_claim(claim)
        fake.apply_holder_pod(pod)
        fake.allocate(claim.namespace, claim.name, NODE, device(g, s))
    fake.calls.clear()


def held_at(gpu: int, start: int) -> Allocation:
    return Allocation.objects.get(placements__gpu__index=gpu, placements__start=start, status="active")
