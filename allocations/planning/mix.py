"""What-if: "which profile mix would this pool serve best", and how far its layouts are from it.

Expected demand: the learnt mix (allocations/mig/demand.py, the pool's recent requests blended with the default
prior), restricted to the offered profiles, scaled so that it asks for exactly the pool's compute slices. The
best mix is the exact offline optimum for that demand (allocations/mig/offline.py: which per-GPU configuration
each GPU gets so that the most compute slices are served). Distance: each GPU is matched to one GPU of the
target (GPUs holding the most slices choose first, each taking the target configuration it reaches most
cheaply); the cost of a GPU is exact over the model's valid layouts: the held slices that would have to move
(their owners' pods restart) and the instances to create, for the cheapest layout with the target's counts.
Static MIG pools would carve those instances; dynamic ones need nothing carved, the figure says where new slices
should go for the layouts to converge.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

from allocations.mig.catalog import GpuModel
from allocations.mig.demand import DemandMix
from allocations.mig.fleet import Fleet
from allocations.mig.layout import geometry
from allocations.mig.offline import offline_optimum
from allocations.mig.preshape import profile_weights

#: Branch-and-bound nodes the optimum may explore; past it the best found is given with ``optimal`` false.
NODE_LIMIT = 20_000

Config = tuple[tuple[str, int], ...]  # (profile, instances), sorted by profile order, zeros left out
Slots = frozenset[tuple[str, int]]  # a layout as {(profile, start)}


@dataclass(frozen=True, slots=True)
class GpuMix:
    counts: dict[str, int]
    gpus: int


@dataclass(frozen=True, slots=True)
class MixAnswer:
    model: str
    gpus: int
    weights: dict[str, float]  # share of requests per offered profile (the learnt mix)
    demand: dict[str, int]  # expected slices per profile, scaled to the pool's compute slices
    target: list[GpuMix]  # best layout mix, most used first
    served: dict[str, int]  # slices of each profile the target serves
    served_compute: int
    demand_compute: int
    optimal: bool
    current: list[GpuMix]  # held slices per GPU today, most common first
    gpus_on_target: int  # GPUs already holding exactly their target's instances
    gpus_without_moves: int  # GPUs that reach their target by creating instances only
    moves: int  # held slices that would have to move
    creates: int  # instances to create


def expected_demand(
    model: GpuModel, gpus: int, mix: DemandMix, offered: Sequence[str]
) -> tuple[dict[str, float], dict[str, int]]:
    """``(weights, demand)``: the mix's share per offered profile, and slices per profile that ask for the
    compute slices of ``gpus`` GPUs (rounded to whole slices)."""
    geom = geometry(model)
    allowed = [p for p in offered if model.has_profile(p)]
    shares = profile_weights(geom, mix, allowed)
    weights = {p.name: w for p, w in zip(model.profiles, shares, strict=True) if p.name in allowed}
    per_request = sum(w * model.profile(p).compute_slices for p, w in weights.items())
    requests = gpus * model.compute_slices / per_request if per_request > 0 else 0.0
    demand = {p: round(requests * w) for p, w in weights.items()}
    return weights, {p: n for p, n in demand.items() if n > 0}


def _config(model: GpuModel, counts: Counter[str]) -> Config:
    return tuple((p, counts[p]) for p in model.profile_names() if counts[p])


def best_mix(fleet: Fleet, *, model: GpuModel, offered: Sequence[str], mix: DemandMix) -> MixAnswer:
    """The target layout mix of the fleet's GPUs of ``model`` and the distance to it (see the module)."""
    gpus = [g for g in fleet.gpus() if g.model.name == model.name]
    weights, demand = expected_demand(model, len(gpus), mix, offered)
    result = offline_optimum(model, len(gpus), demand, node_limit=NODE_LIMIT) if demand else None
    names = list(demand)
    targets: list[Config] = []
    if result is not None:
        for counts, n in result.configurations.items():
            config = _config(model, Counter({names[k]: c for k, c in enumerate(counts)}))
            targets += [config] * n
    targets += [()] * (len(gpus) - len(targets))  # GPUs the optimum leaves empty
    held = [frozenset((i.profile, i.start) for i in g.instances) for g in gpus]
    moves, creates, on_target, no_moves = _match(model, held, targets)
    return MixAnswer(
        model=model.name,
        gpus=len(gpus),
        weights={p: round(w, 4) for p, w in weights.items()},
        demand=demand,
        target=_mixes(Counter(targets)),
        served={p: int(n) for p, n in (result.placed.items() if result else [])},
        served_compute=result.value if result else 0,
        demand_compute=sum(model.profile(p).compute_slices * n for p, n in demand.items()),
        optimal=result.optimal if result else True,
        current=_mixes(Counter(_config(model, Counter(p for p, _ in h)) for h in held)),
        gpus_on_target=on_target,
        gpus_without_moves=no_moves,
        moves=moves,
        creates=creates,
    )


def _mixes(configs: Counter[Config]) -> list[GpuMix]:
    return [GpuMix(dict(c), n) for c, n in sorted(configs.items(), key=lambda item: (-item[1], item[0]))]


def _match(model: GpuModel, held: Sequence[Slots], targets: Sequence[Config]) -> tuple[int, int, int, int]:
    """Greedy matching of GPUs to target configurations; ``(moves, creates, GPUs on target, GPUs without
    moves)``. Exact cost per pair: the cheapest valid layout with the target's counts."""
    geom = geometry(model)
    by_counts: dict[Config, list[Slots]] = {}
    for key in geom.all_layouts():
        slots = frozenset((p, s) for p, s, _ in geom.describe(key))
        by_counts.setdefault(_config(model, Counter(p for p, _ in slots)), []).append(slots)
    costs: dict[tuple[Slots, Config], tuple[int, int]] = {}

    def cost(h: Slots, t: Config) -> tuple[int, int]:
        found = costs.get((h, t))
        if found is None:
            # Every target comes from a valid layout, so by_counts has it; moving everything is the fallback.
            found = min(
                ((len(h - lay), len(lay) - len(h & lay)) for lay in by_counts.get(t, [])),
                default=(len(h), sum(n for _, n in t)),
            )
            costs[(h, t)] = found
        return found

    left = Counter(targets)
    moves = creates = on_target = no_moves = 0
    for h in sorted(held, key=len, reverse=True):
        t = min(left, key=lambda t: (cost(h, t), t))
        left[t] -= 1
        if not left[t]:
            del left[t]
        m, c = cost(h, t)
        moves, creates = moves + m, creates + c
        on_target += m == 0 and c == 0
        no_moves += m == 0
    return moves, creates, on_target, no_moves
