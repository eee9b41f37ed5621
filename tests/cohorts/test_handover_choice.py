"""Which waiting lender takes over the notices of a lender admitted elsewhere (allocations/cohorts/handover.py
`choose_heirs`), pure: no database."""

from __future__ import annotations

from allocations.cohorts.handover import Heir, choose_heirs
from allocations.mig.fleet import PlacementRequest
from tests.cohorts.test_reclaim_choice import candidate, fleet


def test_each_heir_in_order_takes_the_fewest_notices_that_make_its_room_never_its_own_tenant_s():
    # two full GPUs, each with a borrowed 4g.40gb (tenant 2) on notice at start 0 and a 3g.40gb at start 4
    pool = fleet([("4g.40gb", 0, "1"), ("3g.40gb", 4, "10")], [("4g.40gb", 0, "2"), ("3g.40gb", 4, "11")])
    older, younger = candidate(1, 4, 4, age_h=2), candidate(2, 4, 4, age_h=1)
    own = Heir(7, 2, PlacementRequest("4g.40gb"))  # the borrowers' own tenant: nothing of its own taken back for it
    first, second = Heir(8, 1, PlacementRequest("4g.40gb")), Heir(9, 1, PlacementRequest("2g.20gb"))
    handed = choose_heirs(pool, [older, younger], [own, first, second])
    # the first heir gets one (the youngest, as pick_fitting), the second the other: each its own GPU
    assert handed == {8: [younger], 9: [older]}


def test_nothing_is_handed_to_an_heir_that_fits_as_things_are_or_that_the_notices_do_not_make_room_for():
    pool = fleet([("4g.40gb", 0, "1"), ("3g.40gb", 4, "10")], [("4g.40gb", 0, "11")])
    noticed = [candidate(1, 4, 4, age_h=1)]
    # a 3g.40gb fits at start 4 of the second GPU now; a 7g.80gb needs a whole GPU the notice does not free
    heirs = [Heir(8, 1, PlacementRequest("3g.40gb")), Heir(9, 1, PlacementRequest("7g.80gb"))]
    assert choose_heirs(pool, noticed, heirs) == {}
