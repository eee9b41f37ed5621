"""A large fleet for the fleet overview's tests, bulk-inserted (the services would take minutes for
thousands of slices). Test setup only: every layout is checked against the MIG catalog first."""

from __future__ import annotations

from datetime import timedelta

from django.contrib.auth.models import User
from django.utils import timezone

from allocations import services
from allocations.costs import gpu_model_for
from allocations.mig.layout import layout_violations
from allocations.models import Allocation, Gpu, Node, NodePool, SlicePlacement
from tenants.models import Tenant

H100 = "NVIDIA H100 80GB HBM3"
# (profile, start) layouts using 0, 1, 2, 4, 6, 7 and 8 of the 8 memory slots.
LAYOUTS: list[list[tuple[str, int]]] = [
    [],
    [("1g.10gb", 0)],
    [("2g.20gb", 0)],
    [("3g.40gb", 4)],
    [("3g.40gb", 4), ("2g.20gb", 0)],
    [("3g.40gb", 4), ("2g.20gb", 0), ("1g.10gb", 2)],
    [("7g.80gb", 0)],
]


def used_slots(layout: list[tuple[str, int]]) -> int:
    model = gpu_model_for(H100)
    return sum(model.profile(profile).memory_slices for profile, _ in layout)


def seed_fleet(
    *, root: User, tenant: Tenant, requester: User, nodes: int, gpus: int = 8, slug: str = "big"
) -> NodePool:
    """A pool of `nodes` nodes named big-node-0000... with `gpus` H100 each; GPU i of node n holds
    LAYOUTS[(n + i) % 7], as active slices of `tenant`. Every 50th node is cordoned."""
    model = gpu_model_for(H100)
    for layout in LAYOUTS:
        assert not layout_violations(model, layout), layout
    pool = services.create_node_pool(name="Big pool", slug=slug, gpu_model=H100, actor=root)
    node_rows = Node.objects.bulk_create(
        [
            Node(
                pool=pool,
                name=f"{slug}-node-{n:04d}",
                state=Node.State.CORDONED if n % 50 == 49 else Node.State.READY,
            )
            for n in range(nodes)
        ]
    )
    gpu_rows = Gpu.objects.bulk_create(
        [Gpu(node=node, index=i, uuid=f"GPU-{node.pk:08x}-{i:04x}") for node in node_rows for i in range(gpus)],
        batch_size=4000,
    )
    now = timezone.now()
    allocations: list[Allocation] = []
    where: list[tuple[Gpu, str, int, int]] = []
    for n in range(nodes):
        for i in range(gpus):
            gpu = gpu_rows[n * gpus + i]
            for profile, start in LAYOUTS[(n + i) % len(LAYOUTS)]:
                spec = model.profile(profile)
                allocations.append(
                    Allocation(
                        tenant=tenant,
                        pool=pool,
                        requested_by=requester,
                        profile=profile,
                        count=1,
                        lease_hours=24,
                        purpose="seeded",
                        compute_slices=spec.compute_slices,
                        memory_slices=spec.memory_slices,
                        status=Allocation.Status.ACTIVE,
                        claim_name=f"mig-alloc-seeded-{len(allocations)}",
                        activated_at=now - timedelta(hours=1),
                        lease_expires_at=now + timedelta(hours=23),
                    )
                )
                where.append((gpu, profile, start, spec.memory_slices))
    Allocation.objects.bulk_create(allocations, batch_size=4000)
    SlicePlacement.objects.bulk_create(
        [
            SlicePlacement(allocation=a, gpu=gpu, profile=profile, start=start, size=size)
            for a, (gpu, profile, start, size) in zip(allocations, where, strict=True)
        ],
        batch_size=4000,
    )
    return pool
