"""The hold variant of the Kubernetes placement policy (issue 14).

On Kubernetes DynamicMIG the portal pins the GPU and the scheduler picks the slot (its first fit, in the order the
driver publishes the devices: allocations/mig/scheduler.py), so what a placement strands is what that slot strands.
`ours-first-slot` ranks GPUs by that slot; this variant holds, with `ours-hold`'s rule, a request whose first-fit
slot strands too much on every GPU. It is `ours-hold` (whatever its hold rule is) choosing among the first-slot
options only, so the rule lives in one place (allocations/mig/policies.py).

Both carry the policy's fill-left rule (allocations/mig/fill_left.py: a request that would open an empty GPU the
fill's 7g still need is held too), as `settings.FATIA_HOLD_FILL_LEFT` sets it; unset, the policy's own default.
"""

from __future__ import annotations

import copy
import functools
from typing import cast

from django.conf import settings

from allocations.mig.fill_left import FillLeftRule
from allocations.mig.policies import FragmentationAwareFirstSlot, HoldingFragmentationAware, Policy, get_policy


class HoldingFirstSlot(HoldingFragmentationAware, FragmentationAwareFirstSlot):
    """``ours-first-slot-hold``: ``ours-hold``'s rank and hold rule over ``ours-first-slot``'s options."""

    name = "ours-first-slot-hold"


HOLD_POLICY = "ours-hold"
SCHEDULER_HOLD_POLICY = HoldingFirstSlot()


def hold_policy(*, scheduler: bool = False) -> str | Policy:
    """The hold policy of a pool with admission (`scheduler`: the Kubernetes variant), its fill-left rule as
    `settings.FATIA_HOLD_FILL_LEFT` says ("": the policy's own, `HoldingFragmentationAware.FILL_LEFT`)."""
    rule: str = settings.FATIA_HOLD_FILL_LEFT
    if not rule:
        return SCHEDULER_HOLD_POLICY if scheduler else HOLD_POLICY
    return _with_fill_left(cast(FillLeftRule, rule), scheduler=scheduler)  # portal/settings.py checked it


@functools.cache
def _with_fill_left(rule: FillLeftRule, *, scheduler: bool) -> Policy:
    policy = copy.copy(SCHEDULER_HOLD_POLICY if scheduler else get_policy(HOLD_POLICY))
    if not isinstance(policy, HoldingFragmentationAware):
        raise TypeError(f"{policy.name} has no fill-left rule")
    policy.FILL_LEFT = rule
    return policy
