"""Over-use of a time-sliced GPU (allocations/overshare.py): the agent reports memory in use per GPU; more than
the GPU's shares hold is flagged on the request page and counted in showback."""

from __future__ import annotations

from django.test import Client
from django.utils import timezone

from allocations import services
from allocations.models import Allocation, SlicePlacement
from allocations.nodeagent.models import DeviceState
from allocations.overshare import over_share_counts, over_shared_gpus
from tests.sharing.conftest import Shared


def share(shared: Shared, *, mib: int, charlie: bool = False) -> Allocation:
    world = shared.world
    allocation, _ = services.request_allocation(
        tenant_id=(world.tenant_b if charlie else world.tenant_a).pk,
        pool_id=shared.l4.pk,
        profile="",
        memory_mib=mib,
        count=1,
        lease_hours=3,
        purpose="serving",
        actor=world.charlie if charlie else world.alice,
    )
    if allocation.status == Allocation.Status.PENDING:
        services.approve_allocation(allocation_id=allocation.pk, actor=world.root)
    return services.provision_allocation(allocation_id=allocation.pk)


def report(allocation: Allocation, used_mib: int) -> None:
    """What the node agent's ingest records for a GPU without MIG: one `gpu` row with its memory in use."""
    gpu = SlicePlacement.objects.select_related("gpu__node").get(allocation=allocation).gpu
    now = timezone.now()
    DeviceState.objects.update_or_create(
        node=gpu.node,
        uuid=gpu.uuid,
        defaults={
            "gpu": gpu,
            "kind": DeviceState.Kind.GPU,
            "gpu_uuid": gpu.uuid,
            "memory_used_mib": used_mib,
            "memory_total_mib": 23034,
            "processes": 2,
            "sampled_at": now,
            "minute": now,
        },
    )


def test_a_lone_tenant_using_more_than_its_share_is_flagged_and_named(shared: Shared) -> None:
    allocation = share(shared, mib=4096)
    report(allocation, 4000)
    assert over_shared_gpus() == {}
    # when
    report(allocation, 9000)
    # then
    found = list(over_shared_gpus().values())
    assert [(o.used_mib, o.shared_mib, o.excess_mib, o.single_tenant) for o in found] == [(9000, 4096, 4904, True)]
    client = Client()
    client.force_login(shared.world.alice)
    page = client.get(f"/requests/{allocation.pk}/").content.decode()
    assert "4904 MiB more than its shares hold" in page
    assert "Team A is over its share" in page
    usage = client.get("/dashboard/usage/").content.decode()
    assert "Over its GPU share now" in usage and "1 GPU<" in usage


def test_with_several_tenants_on_the_gpu_each_is_flagged_and_none_is_blamed(shared: Shared) -> None:
    first = share(shared, mib=4096)
    second = share(shared, mib=4096, charlie=True)
    assert SlicePlacement.objects.get(allocation=first).gpu_id == SlicePlacement.objects.get(allocation=second).gpu_id
    report(first, 10000)
    assert over_share_counts() == {shared.world.tenant_a.pk: 1, shared.world.tenant_b.pk: 1}
    client = Client()
    client.force_login(shared.world.charlie)
    page = client.get(f"/requests/{second.pk}/").content.decode()
    assert "whose process took the excess is not known" in page


def test_mps_shares_are_not_checked_their_memory_limit_is_enforced(shared: Shared) -> None:
    world = shared.world
    allocation, _ = services.request_allocation(
        tenant_id=world.tenant_a.pk,
        pool_id=shared.mps.pk,
        profile="",
        memory_mib=4096,
        thread_percentage=20,
        count=1,
        lease_hours=3,
        purpose="mps",
        actor=world.alice,
    )
    allocation = services.provision_allocation(allocation_id=allocation.pk)
    report(allocation, 40000)
    assert over_shared_gpus() == {}
