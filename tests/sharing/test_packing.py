"""Packing shares of whole GPUs (allocations/sharing/packing.py): never over-commit memory or MPS threads, fill
shared GPUs before opening whole ones, keep tenants apart when they ask, same answer every time."""

from __future__ import annotations

import random

from allocations.sharing.packing import GpuShares, ShareRequest, place_shares, shares_that_fit, whole_gpus_free

L4 = 23034


def gpus(n: int, **used: tuple[int, int, frozenset[int]]) -> list[GpuShares]:
    out = []
    for i in range(n):
        memory, threads, tenants = used.get(f"g{i}", (0, 0, frozenset()))
        out.append(GpuShares(i, ("node-a", i), L4, memory, threads, tenants))
    return out


def test_a_share_goes_to_the_fullest_shared_gpu_that_fits_and_whole_gpus_stay_free() -> None:
    # given: gpu 0 has 8 GiB used, gpu 1 has 16 GiB used, gpus 2 and 3 are whole
    fleet = gpus(4, g0=(8192, 0, frozenset({1})), g1=(16384, 0, frozenset({1})))
    # when
    slots = place_shares(fleet, ShareRequest(tenant_id=2, memory_mib=4096, count=1))
    # then: best fit is gpu 1 (leaves 2554 MiB); the untouched GPUs are not opened
    assert slots is not None and [s.gpu_id for s in slots] == [1]


def test_a_share_opens_a_whole_gpu_only_when_no_shared_one_has_room() -> None:
    fleet = gpus(3, g0=(20000, 0, frozenset({1})))
    slots = place_shares(fleet, ShareRequest(tenant_id=1, memory_mib=4096, count=2))
    # both shares: gpu 0 cannot take 4 GiB; the first opens gpu 1, the second packs onto it
    assert slots is not None and [s.gpu_id for s in slots] == [1, 1]
    assert whole_gpus_free(fleet) == 2


def test_memory_is_never_over_committed_and_a_request_that_does_not_fit_gets_none() -> None:
    fleet = gpus(2)
    assert place_shares(fleet, ShareRequest(tenant_id=1, memory_mib=L4, count=2)) is not None
    assert place_shares(fleet, ShareRequest(tenant_id=1, memory_mib=L4, count=3)) is None
    assert place_shares(fleet, ShareRequest(tenant_id=1, memory_mib=L4 + 1, count=1)) is None


def test_mps_thread_shares_never_pass_one_hundred_percent() -> None:
    fleet = gpus(1, g0=(1024, 70, frozenset({1})))
    assert place_shares(fleet, ShareRequest(tenant_id=2, memory_mib=1024, count=1, thread_percentage=30)) is not None
    assert place_shares(fleet, ShareRequest(tenant_id=2, memory_mib=1024, count=1, thread_percentage=31)) is None


def test_a_tenant_that_avoids_co_tenants_gets_a_gpu_of_its_own() -> None:
    fleet = gpus(2, g0=(4096, 0, frozenset({1})))
    slots = place_shares(fleet, ShareRequest(tenant_id=2, memory_mib=4096, count=1, avoid_co_tenants=True))
    assert slots is not None and [s.gpu_id for s in slots] == [1]
    # and its own GPU is still packed with its own shares
    own = gpus(2, g0=(4096, 0, frozenset({2})))
    slots = place_shares(own, ShareRequest(tenant_id=2, memory_mib=4096, count=1, avoid_co_tenants=True))
    assert slots is not None and [s.gpu_id for s in slots] == [0]


def test_nobody_lands_next_to_a_tenant_that_avoids_co_tenants() -> None:
    fleet = [
        GpuShares(0, ("a", 0), L4, 4096, 0, frozenset({1}), exclusive_tenants=frozenset({1})),
        GpuShares(1, ("a", 1), L4),
    ]
    slots = place_shares(fleet, ShareRequest(tenant_id=2, memory_mib=1024, count=1))
    assert slots is not None and [s.gpu_id for s in slots] == [1]
    assert place_shares(fleet[:1], ShareRequest(tenant_id=2, memory_mib=1024, count=1)) is None


def test_the_same_gpus_and_request_give_the_same_slots_whatever_their_order() -> None:
    fleet = gpus(6, g1=(4096, 0, frozenset({1})), g4=(4096, 0, frozenset({3})))
    request = ShareRequest(tenant_id=2, memory_mib=6000, count=5)
    first = place_shares(fleet, request)
    shuffled = list(fleet)
    random.Random(7).shuffle(shuffled)
    assert first == place_shares(shuffled, request)
    assert first is not None and [s.gpu_id for s in first] == [1, 1, 1, 4, 4]


def test_random_streams_of_requests_never_over_commit_a_gpu() -> None:
    rng = random.Random(13)
    fleet = gpus(8)
    for _ in range(400):
        request = ShareRequest(
            tenant_id=rng.randint(1, 5),
            memory_mib=rng.choice([512, 1024, 2048, 4096, 8192, 12000]),
            count=rng.randint(1, 3),
            thread_percentage=rng.choice([10, 25, 50]),
            avoid_co_tenants=rng.random() < 0.2,
        )
        slots = place_shares(fleet, request)
        if slots is None:
            continue
        by_gpu = {g.gpu_id: g for g in fleet}
        for slot in slots:
            g = by_gpu[slot.gpu_id]
            by_gpu[slot.gpu_id] = GpuShares(
                g.gpu_id,
                g.order,
                g.memory_mib,
                g.used_memory_mib + slot.memory_mib,
                g.used_thread_percentage + (slot.thread_percentage or 0),
                g.tenants | {request.tenant_id},
                g.exclusive_tenants | ({request.tenant_id} if request.avoid_co_tenants else set()),
            )
        fleet = [by_gpu[g.gpu_id] for g in fleet]
        for g in fleet:
            assert g.used_memory_mib <= g.memory_mib
            assert g.used_thread_percentage <= 100
            assert not g.exclusive_tenants or g.tenants == g.exclusive_tenants
    assert any(g.used_memory_mib for g in fleet)


def test_capacity_counts_shares_of_a_size_per_gpu() -> None:
    fleet = gpus(2, g0=(20000, 0, frozenset({1})))
    assert shares_that_fit(fleet, memory_mib=4096) == 0 + 5
    assert shares_that_fit(fleet, memory_mib=1024) == 2 + 22
