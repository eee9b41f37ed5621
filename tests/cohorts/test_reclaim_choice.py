"""The slot-aware choice of borrowed allocations to take back (issue 15), pure: no database."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from allocations.cohorts.accounting import Shortfall
from allocations.cohorts.reclaim import Candidate, driver_slots, pick_fitting, pick_reclaims
from allocations.mig.catalog import load_catalog
from allocations.mig.fleet import Fleet, Gpu, Instance, Node, PlacementRequest

H100 = load_catalog().model("NVIDIA H100 80GB HBM3")
T0 = datetime(2026, 1, 1, tzinfo=UTC)


def fleet(*gpus: list[tuple[str, int, str]]) -> Fleet:
    """One node per GPU; each GPU's instances as (profile, start, owner)."""
    return Fleet(
        [
            Node(f"n{k}", [Gpu(f"n{k}", 0, H100, [Instance(p, s, o) for p, s, o in layout])])
            for k, layout in enumerate(gpus)
        ]
    )


def candidate(pk: int, compute: int, memory: int, age_h: int, tenant: int = 2) -> Candidate:
    return Candidate(pk, compute, memory, T0 - timedelta(hours=age_h), tenant_id=tenant)


def test_a_3g_freed_at_start_4_does_not_make_room_for_a_4g_but_an_older_4g_does():
    pool = fleet([("4g.40gb", 0, "1"), ("3g.40gb", 4, "10")], [("4g.40gb", 0, "11"), ("3g.40gb", 4, "2")])
    older, younger = candidate(1, 4, 4, age_h=2), candidate(2, 3, 4, age_h=1)
    request = PlacementRequest("4g.40gb")
    assert pick_fitting(pool, request, [older, younger]) == [older]
    # the count-based rule takes the youngest first, and then the older one as well
    assert pick_reclaims([older, younger], Shortfall(4, 4)) == [younger, older]


def test_the_youngest_of_equal_choices_and_nothing_when_no_release_makes_room():
    pool = fleet([("7g.80gb", 0, "9")], [("1g.10gb", 0, "1")], [("1g.10gb", 0, "2")])
    one, two = candidate(1, 1, 1, age_h=3), candidate(2, 1, 1, age_h=1)
    # a 7g needs a whole GPU: either 1g frees one; the younger is chosen
    assert pick_fitting(pool, PlacementRequest("7g.80gb"), [one, two]) == [two]
    # two 7g on one node cannot be placed on these one-GPU nodes, whatever is released
    assert pick_fitting(pool, PlacementRequest("7g.80gb", count=2), [one, two]) == []


def test_caps_keep_what_is_taken_from_a_tenant_within_what_it_borrowed():
    pool = fleet([("1g.10gb", 0, "1"), ("1g.10gb", 1, "2"), ("3g.40gb", 4, "3")])
    a1, a2, b = candidate(1, 1, 1, age_h=1, tenant=5), candidate(2, 1, 1, age_h=2, tenant=5), candidate(3, 3, 4, 9, 6)
    # a 4g.40gb needs starts 0-3: both of tenant 5's 1g; capped at one slice from it, no set fits
    assert pick_fitting(pool, PlacementRequest("4g.40gb"), [a1, a2, b], caps={5: (1, 1), 6: (3, 4)}) == []
    assert sorted(c.allocation_id for c in pick_fitting(pool, PlacementRequest("4g.40gb"), [a1, a2, b])) == [1, 2]


def test_on_kubernetes_the_choice_follows_the_driver_s_first_fit_not_only_our_layout_rules():
    # given: two A100 40GB; on n0 a device made outside the portal of a profile NVIDIA publishes no figures for
    # (1g.10gb there: the driver's counters for it are unknown, so nothing is predicted next to it) and a younger
    # borrowed 3g.20gb at start 4; on n1 guaranteed use at start 0 and an older borrowed 3g.20gb at start 4
    a100 = load_catalog().model("NVIDIA A100-SXM4-40GB")
    pool = Fleet(
        [
            Node("n0", [Gpu("n0", 0, a100, [Instance("1g.10gb", 0, "outside:0"), Instance("3g.20gb", 4, "7")])]),
            Node("n1", [Gpu("n1", 0, a100, [Instance("3g.20gb", 0, "g"), Instance("3g.20gb", 4, "8")])]),
        ]
    )
    candidates = [candidate(7, 3, 4, age_h=1), candidate(8, 3, 4, age_h=5)]
    lender = PlacementRequest("3g.20gb")
    # when: the lender's 3g.20gb is placed by our engine (simulated fleet): the younger one frees a start it fits
    assert [c.allocation_id for c in pick_fitting(pool, lender, candidates)] == [7]
    # when: the scheduler takes the slot (Kubernetes DynamicMIG): n0 would not take it even with start 4 free
    assert [c.allocation_id for c in pick_fitting(pool, lender, candidates, driver=True)] == [8]
    # and: the prediction itself says where the lender lands once the older one is gone
    freed = Fleet([pool.nodes[0], Node("n1", [Gpu("n1", 0, a100, [Instance("3g.20gb", 0, "g")])])])
    assert driver_slots(freed, lender) == {("n1", 0): [4]}
