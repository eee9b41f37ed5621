"""The advisor over the pools: checks the question, estimates, and for each pool picks its profile (or share),
its quota cost, and how many such slices fit there now."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from allocations.advisor.estimate import FULL_PRECISIONS, MODES, PRECISIONS, Estimate, Workload, estimate_memory
from allocations.advisor.fit import Fit, fit_profile, fit_share
from allocations.advisor.known_models import KNOWN_MODELS, assumed_architecture, find_model
from allocations.costs import gpu_model_for
from allocations.models import NodePool
from allocations.placement import pool_capacity
from allocations.share_placement import read_shared_pool
from allocations.sharing.packing import shares_that_fit
from allocations.sharing.units import unit_names
from allocations.static_capacity import static_pool_fits
from tenants.errors import InvalidInput

CONTEXT_MAX = 1_048_576
SEQUENCES_MAX = 1024
PARAMS_B_MAX = 2000.0


@dataclass(frozen=True, slots=True)
class PoolAdvice:
    pool: NodePool
    fit: Fit
    fits_now: int

    def as_dict(self) -> dict[str, Any]:
        names = unit_names(shared=self.pool.is_shared)
        fit = self.fit
        return {
            "pool": self.pool.pk,
            "pool_name": self.pool.name,
            "gpu_model": self.pool.gpu_model,
            "kind": self.pool.kind,
            "fits": fit.cost is not None,
            "profile": fit.profile,
            "share_memory_mib": fit.share_mib,
            "memory_gib": round(fit.memory_mib / 1024, 1),
            "cost": fit.cost.as_dict() if fit.cost else None,
            "units": {"compute": names.compute, "memory": names.memory},
            "fits_now": self.fits_now,
            "refused": [{"choice": choice, "reason": reason} for choice, reason in fit.refused],
        }


def _number(
    raw: dict[str, Any], key: str, default: Any, kind: type, low: float, high: float, errors: dict[str, list[str]]
) -> Any:
    value = raw.get(key)
    if value in (None, ""):
        return default
    try:
        number = kind(value)
    except (TypeError, ValueError):
        errors[key] = ["Give a number." if kind is float else "Give a whole number."]
        return default
    if not low <= number <= high or number != number:  # NaN fails both comparisons
        errors[key] = [f"Give a number from {low:g} to {high:g}."]
        return default
    return number


def parse_workload(raw: dict[str, Any]) -> Workload:
    """The question as the API, the page and the CLI ask it. Raises InvalidInput with a message per field."""
    errors: dict[str, list[str]] = {}
    name = str(raw.get("model") or "").strip()
    params_b = _number(raw, "params_b", None, float, 0.01, PARAMS_B_MAX, errors)
    architecture = find_model(name) if name else None
    if name and architecture is None and params_b is None and "params_b" not in errors:
        errors["model"] = [
            f"Unknown model {name!r}: give its parameter count (params_b), or one of {', '.join(KNOWN_MODELS)}."
        ]
    elif architecture is not None and params_b is not None:
        errors["params_b"] = [f"{architecture.name} has {architecture.params_b:g} B parameters; leave this empty."]
    elif not name and params_b is None and "params_b" not in errors:
        errors["model"] = ["Give a known model or a parameter count (params_b)."]
    precision = str(raw.get("precision") or "bf16")
    if precision not in PRECISIONS:
        errors["precision"] = [f"Choose one of {', '.join(PRECISIONS)}."]
    mode = str(raw.get("mode") or "serve")
    if mode not in MODES:
        errors["mode"] = [f"Choose one of {', '.join(MODES)}."]
    elif mode == "full" and precision in PRECISIONS and precision not in FULL_PRECISIONS:
        errors["precision"] = ["Full fine-tuning trains in fp32 or bf16; for a quantized base use lora."]
    context = _number(raw, "context_length", 4096, int, 1, CONTEXT_MAX, errors)
    sequences = _number(raw, "sequences", 1, int, 1, SEQUENCES_MAX, errors)
    if errors:
        raise InvalidInput(errors)
    if architecture is None:
        architecture = assumed_architecture(params_b)
    return Workload(architecture, precision, context, sequences, mode)


def advise(workload: Workload, pools: list[NodePool]) -> tuple[Estimate, list[PoolAdvice]]:
    estimate = estimate_memory(workload)
    return estimate, [_pool_advice(estimate, pool) for pool in pools]


def _pool_advice(estimate: Estimate, pool: NodePool) -> PoolAdvice:
    model = gpu_model_for(pool.gpu_model)
    if pool.is_shared:
        mps = pool.kind == NodePool.Kind.MPS
        fit = fit_share(estimate.total, model.memory_mib, mps=mps)
        fits_now = 0
        if fit.share_mib:
            gpus, _ = read_shared_pool(pool)
            fits_now = shares_that_fit(gpus, memory_mib=fit.share_mib, thread_percentage=100 if mps else None)
        return PoolAdvice(pool, fit, fits_now)
    fit = fit_profile(estimate.total, model, list(pool.profiles))
    if not fit.profile:
        return PoolAdvice(pool, fit, 0)
    static = static_pool_fits([pool]).get(pool.pk)
    free = pool_capacity(pool) if static is None else static.free
    return PoolAdvice(pool, fit, free.get(fit.profile, 0))


def advice_payload(raw: dict[str, Any]) -> dict[str, Any]:
    """The advice as the API answers it (the request page's panel shows the same). Raises InvalidInput."""
    workload = parse_workload(raw)
    pools = list(NodePool.objects.order_by("name"))
    if raw.get("pool") not in (None, ""):
        try:
            pools = [p for p in pools if p.pk == int(raw["pool"])]
        except (TypeError, ValueError):
            raise InvalidInput({"pool": ["Give a pool id."]}) from None
        if not pools:
            raise InvalidInput({"pool": ["No such pool."]})
    estimate, advice = advise(workload, pools)
    return {
        "model": workload.architecture.name,
        "known_model": workload.architecture.known,
        "estimate_gib": estimate.as_gib(),
        "notes": list(estimate.notes),
        "pools": [a.as_dict() for a in advice],
    }
