"""Whether a request's slot is steered (FATIA_KUBE_STEER_SLOTS; docs/kubernetes.md, "Steering").

Steering taints the devices kube-scheduler would take before the slot our policy chose (DeviceTaintRules), and
the GPU takes no other claim until the steered one is allocated. With requests arriving one at a time that costs
nothing, and the cluster gets the layouts the policy plans (bench/provision.py, trickle). In a burst the held GPUs
turn the requests behind away to other GPUs, often fresh ones: after 500 back-to-back requests it left 527 whole
GPUs where first fit left 579. So "adaptive" (the default) steers only while the pool's arrivals are sparse: at most
FATIA_KUBE_STEER_MAX_IN_FLIGHT other requests of the pool in flight, approved and waiting for a worker or with
claims the scheduler has not allocated. Otherwise the slot is the scheduler's first fit (our GPU), on any GPU
that admits one more claim. The other condition, a GPU with no claim in flight, is placement's
(plan_slices_for_scheduler: only such GPUs are steering candidates).
"""

from __future__ import annotations

from dataclasses import dataclass

from django.conf import settings

from allocations.models import Allocation

Status = Allocation.Status

MODES = ("off", "adaptive", "always")
# Approved and not yet given to the scheduler, or given and not yet allocated (a PoolBusy retry stays APPROVED).
IN_FLIGHT = (Status.APPROVED, Status.PROVISIONING)


@dataclass(frozen=True, slots=True)
class Steering:
    steer: bool
    # Adaptive only: how many other requests of the pool were in flight (counted up to the limit + 1), else None.
    others_in_flight: int | None = None

    def audit(self) -> dict[str, object]:
        """What the provision audit says about a request adaptive steering left to first fit (a burst)."""
        if self.steer or self.others_in_flight is None:
            return {}
        return {"steering": f"first fit: a burst, {self.others_in_flight} other requests of the pool in flight"}


def steer_mode() -> str:
    """The setting's mode; the booleans it held before (and tests' overrides) mean always and off."""
    value = settings.FATIA_KUBE_STEER_SLOTS
    if isinstance(value, bool):
        return "always" if value else "off"
    if value not in MODES:
        raise ValueError(f"FATIA_KUBE_STEER_SLOTS must be one of {', '.join(MODES)}, not {value!r}")
    return str(value)


def decide_steering(*, allocation: Allocation) -> Steering:
    """Whether `allocation` (about to be planned; its own status does not count) may be steered. Only a single
    slice ever is (a claim of several slices pins GPUs, each slot first fit)."""
    mode = steer_mode()
    if allocation.count != 1 or mode == "off":
        return Steering(steer=False)
    if mode == "always":
        return Steering(steer=True)
    limit = settings.FATIA_KUBE_STEER_MAX_IN_FLIGHT
    others = (
        Allocation.objects.filter(pool_id=allocation.pool_id, status__in=IN_FLIGHT)
        .exclude(pk=allocation.pk)
        .values_list("pk", flat=True)[: limit + 1]
    )
    n = len(others)
    return Steering(steer=n <= limit, others_in_flight=n)
