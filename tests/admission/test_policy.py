"""The hold variant of the Kubernetes policy (issue 14, allocations/admission/policy.py): `ours-hold`'s rule over the
slot the scheduler takes (no database)."""

from __future__ import annotations

from allocations.admission.policy import SCHEDULER_HOLD_POLICY
from allocations.costs import gpu_model_for
from allocations.mig.demand import DemandMix
from allocations.mig.engine import choose_placement, empty_fleet
from allocations.mig.fleet import Instance, PlacementRequest
from allocations.mig.policies import get_policy
from allocations.mig.scheduler import driver_order
from tests.queue.helpers import H100

WHOLE_GPUS = DemandMix(counts={"7g.80gb": 20.0}, prior_weight=20.0)


def test_it_ranks_and_holds_by_the_slot_the_scheduler_takes():
    model = gpu_model_for(H100)
    fleet = empty_fleet(model, 1, 1, pool="p")
    request = PlacementRequest("1g.10gb", 1, "p")
    # when: a 1g.10gb on the only, empty GPU of a pool whose demand is whole GPUs
    held = choose_placement(fleet, request, SCHEDULER_HOLD_POLICY, WHOLE_GPUS)
    forced = choose_placement(fleet, PlacementRequest("1g.10gb", 1, "p", force=True), SCHEDULER_HOLD_POLICY, WHOLE_GPUS)
    # then: held, as `ours-hold` holds it; forced, at the first start in the driver's device order
    assert choose_placement(fleet, request, "ours-hold", WHOLE_GPUS) is None
    assert held is None and forced is not None
    [slot] = forced.slots
    legal = [0, 1, 2, 3, 4, 5, 6]
    assert slot.start == min(legal, key=driver_order)
    assert forced.rank[0] == 1.0 and forced.policy == "ours-first-slot-hold"


def test_next_to_other_slices_it_is_not_held():
    model = gpu_model_for(H100)
    fleet = empty_fleet(model, 1, 1, pool="p")
    fleet.nodes[0].gpus[0].instances = [Instance("1g.10gb", 0, owner="a")]
    decision = choose_placement(fleet, PlacementRequest("1g.10gb", 1, "p"), SCHEDULER_HOLD_POLICY, WHOLE_GPUS)
    assert decision is not None and decision.rank[0] == 0.0
    assert get_policy(SCHEDULER_HOLD_POLICY).admission is True
