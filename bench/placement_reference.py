"""The fair reference for an online policy that never refuses (issue 14, "a policy that generalises").

The family's reference (``allocations/mig/offline.py``) is the offline optimum of the request *multiset*:
it knows every request and chooses which to serve. A placement policy in a portal that admits whatever
fits cannot refuse a 4g that fits to keep room for a 7g that comes later. So the family's "gap closed"
mixes two things: placement (where an admitted request goes) and admission (whether to take it).

:func:`must_accept_optimum` separates them: the best any policy can do on the *sequence* when it must
place every request that fits somewhere when it arrives, but chooses the GPU and the slot knowing the
future. It is an upper bound for every non-refusing online policy (``ours`` included). Search: dynamic
programming over fleet states in arrival order, a state being the multiset of GPU layouts (GPUs with the
same layout are interchangeable), keeping per state the most compute served. When the states of one
step exceed ``beam`` it keeps the ``beam`` best (served, then the fleet's summed expected fill under the
sample's true mix), and the result is only a lower bound of the must-accept optimum, flagged so.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

from allocations.mig.catalog import GpuModel
from allocations.mig.layout import LayoutKey, geometry
from allocations.mig.policies import expected_fill

State = tuple[tuple[LayoutKey, int], ...]  # sorted (layout, GPUs) pairs


@dataclass(frozen=True)
class MustAccept:
    value: int  # compute slices served by the best must-accept schedule found
    exact: bool  # False when the beam cut states: then value is a lower bound of the must-accept optimum
    peak_states: int


def _add(state: dict[LayoutKey, int], old: LayoutKey, new: LayoutKey) -> State:
    out = dict(state)
    out[old] -= 1
    if not out[old]:
        del out[old]
    out[new] = out.get(new, 0) + 1
    return tuple(sorted(out.items()))


def must_accept_optimum(
    model: GpuModel,
    gpus: int,
    requests: Sequence[str],
    weights: tuple[float, ...] | None = None,
    beam: int = 20_000,
) -> MustAccept:
    """Most compute slices servable from ``requests`` in order on ``gpus`` empty GPUs when every request
    that fits somewhere must be placed (placement chosen with hindsight). ``weights``: the mix (per profile
    index of the model) used only to order states when the beam cuts; default uniform."""
    geom = geometry(model)
    w = weights if weights is not None else tuple(1.0 / len(geom.profiles) for _ in geom.profiles)
    states: dict[State, int] = {(((), gpus),): 0}
    exact = True
    peak = 1
    for name in requests:
        i = geom.profile_index(name)
        c = geom.compute[i]
        nxt: dict[State, int] = {}
        for state, served in states.items():
            layouts = dict(state)
            children = [_add(layouts, key, o.after) for key in layouts for o in geom.options(key, i)]
            if not children:
                if nxt.get(state, -1) < served:
                    nxt[state] = served
                continue
            for child in set(children):
                if nxt.get(child, -1) < served + c:
                    nxt[child] = served + c
        peak = max(peak, len(nxt))
        if len(nxt) > beam:
            exact = False

            def score(item: tuple[State, int]) -> tuple[int, float]:
                return item[1], sum(n * expected_fill(geom, key, w, 0.9) for key, n in item[0])

            nxt = dict(sorted(nxt.items(), key=score, reverse=True)[:beam])
        states = nxt
    return MustAccept(max(states.values()), exact, peak)


def true_weights(model: GpuModel, requests: Sequence[str]) -> tuple[float, ...]:
    geom = geometry(model)
    counts = Counter(requests)
    return tuple(counts.get(p.name, 0) / len(requests) for p in geom.profiles)
