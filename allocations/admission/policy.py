"""The hold variant of the Kubernetes placement policy (issue 14).

On Kubernetes DynamicMIG the portal pins the GPU and the scheduler picks the slot (its first fit, in the order the
driver publishes the devices: allocations/mig/scheduler.py), so what a placement strands is what that slot strands.
`ours-first-slot` ranks GPUs by that slot; this variant holds, with `ours-hold`'s rule, a request whose first-fit
slot strands too much on every GPU. It is `ours-hold` (whatever its hold rule is) choosing among the first-slot
options only, so the rule lives in one place (allocations/mig/policies.py).
"""

from __future__ import annotations

from allocations.mig.policies import FragmentationAwareFirstSlot, HoldingFragmentationAware


class HoldingFirstSlot(HoldingFragmentationAware, FragmentationAwareFirstSlot):
    """``ours-first-slot-hold``: ``ours-hold``'s rank and hold rule over ``ours-first-slot``'s options."""

    name = "ours-first-slot-hold"


HOLD_POLICY = "ours-hold"
SCHEDULER_HOLD_POLICY = HoldingFirstSlot()
