"""Offline optimum: the most compute slices a set of identical GPUs can serve from a known demand.

Offline, the order of requests does not matter, so the question is which *configuration* (multiset of
profiles that some valid layout holds) each GPU gets. With ``x_c`` GPUs in configuration ``c`` holding
``n_cp`` instances of profile ``p`` worth ``v_c`` compute slices, the optimum solves the integer
program

    maximise  sum_c v_c x_c
    such that sum_c x_c <= gpus,   sum_c n_cp x_c <= demand_p,   x_c >= 0 integer,

which is exact for single-instance requests. We solve it by branch and bound over a small dense
simplex (pure Python; a few dozen configurations and a handful of rows). The benchmark uses it as the
bound that placement policies are measured against.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from .catalog import GpuModel
from .layout import decode, geometry

_EPS = 1e-9


def gpu_configurations(model: GpuModel, profiles: Sequence[str]) -> list[tuple[int, ...]]:
    """Distinct per-profile instance counts (in ``profiles`` order) of every valid layout that uses only
    those profiles, the empty one included."""
    geom = geometry(model)
    wanted = {geom.profile_index(p): k for k, p in enumerate(profiles)}
    seen: set[tuple[int, ...]] = set()
    for key in geom.all_layouts():
        counts = [0] * len(profiles)
        ok = True
        for code in key:
            i = decode(code)[1]
            if i not in wanted:
                ok = False
                break
            counts[wanted[i]] += 1
        if ok:
            seen.add(tuple(counts))
    return sorted(seen)


@dataclass(frozen=True, slots=True)
class OfflineResult:
    """``value``: compute slices served by the best solution found; ``bound``: an upper bound (equal to
    ``value`` when ``optimal``). ``placed``: instances per profile; ``configurations``: GPUs per
    configuration (as instance counts in the order of the demand's keys)."""

    value: int
    bound: float
    optimal: bool
    placed: Mapping[str, int]
    configurations: Mapping[tuple[int, ...], int]
    nodes_explored: int


def offline_optimum(model: GpuModel, gpus: int, demand: Mapping[str, int], node_limit: int = 50_000) -> OfflineResult:
    """Best compute slices servable by ``gpus`` empty GPUs of ``model`` from ``demand`` (instances per
    profile name). Stops after ``node_limit`` branch-and-bound nodes (then ``optimal`` is false)."""
    profiles = [p for p, n in demand.items() if n > 0]
    compute = [model.profile(p).compute_slices for p in profiles]
    configs = [c for c in gpu_configurations(model, profiles) if any(c)]
    values = [sum(n * v for n, v in zip(c, compute, strict=True)) for c in configs]
    rows = [[1.0] * len(configs)] + [[float(c[k]) for c in configs] for k in range(len(profiles))]
    rhs = [float(gpus)] + [float(demand[p]) for p in profiles]
    solver = _BranchAndBound(rows, rhs, [float(v) for v in values], node_limit)
    x = solver.solve()
    placed = {p: sum(n * c[k] for c, n in zip(configs, x, strict=True)) for k, p in enumerate(profiles)}
    used = {c: n for c, n in zip(configs, x, strict=True) if n}
    value = sum(v * n for v, n in zip(values, x, strict=True))
    return OfflineResult(value, solver.bound, solver.optimal, placed, used, solver.nodes)


def _simplex(rows: list[list[float]], rhs: list[float], obj: list[float]) -> tuple[float, list[float]] | None:
    """Maximise ``obj . x`` subject to ``rows x <= rhs``, ``x >= 0``, with ``rhs >= 0`` (so the slack
    basis is feasible). Returns ``(value, x)``; ``None`` if unbounded (cannot happen here)."""
    m, n = len(rows), len(obj)
    t = [
        [*row, *(1.0 if j == i else 0.0 for j in range(m)), b] for i, (row, b) in enumerate(zip(rows, rhs, strict=True))
    ]
    z = [-v for v in obj] + [0.0] * (m + 1)
    basis = [n + i for i in range(m)]
    for step in range(10_000):
        bland = step > 500  # Bland's rule after many pivots: guarantees termination on degenerate LPs
        col = -1
        best = -_EPS
        for j in range(n + m):
            if z[j] < best:
                col, best = j, z[j]
                if bland:
                    break
        if col < 0:
            break
        row = -1
        ratio = math.inf
        for i in range(m):
            a = t[i][col]
            if a > _EPS:
                r = t[i][-1] / a
                if r < ratio - _EPS or (abs(r - ratio) <= _EPS and basis[i] < basis[row]):
                    row, ratio = i, r
        if row < 0:
            return None
        piv = t[row][col]
        prow = [v / piv for v in t[row]]
        t[row] = prow
        for i in range(m):
            if i != row and t[i][col] != 0.0:
                f = t[i][col]
                ti = t[i]
                for j in range(n + m + 1):
                    ti[j] -= f * prow[j]
        f = z[col]
        for j in range(n + m + 1):
            z[j] -= f * prow[j]
        basis[row] = col
    x = [0.0] * n
    for i, b in enumerate(basis):
        if b < n:
            x[b] = t[i][-1]
    return z[-1], x


class _BranchAndBound:
    """Integer program ``max obj.x, rows x <= rhs, x >= 0 integer`` with non-negative ``rows``.

    Non-negative coefficients let a branch ``x_j >= k`` be handled by substitution (``x_j = k + y``),
    which keeps every right-hand side non-negative or proves the branch infeasible.
    """

    def __init__(self, rows: list[list[float]], rhs: list[float], obj: list[float], node_limit: int) -> None:
        self.rows, self.rhs, self.obj = rows, rhs, obj
        self.n = len(obj)
        self.node_limit = node_limit
        self.nodes = 0
        self.best_value = -1.0
        self.best_x: list[int] = [0] * self.n
        self.bound = math.inf
        self.optimal = True

    def _relax(self, lo: list[int], hi: list[float]) -> tuple[float, list[float]] | None:
        rhs = [b - sum(r[j] * lo[j] for j in range(self.n)) for r, b in zip(self.rows, self.rhs, strict=True)]
        if any(b < -_EPS for b in rhs):
            return None
        rows = [list(r) for r in self.rows]
        rhs = [max(b, 0.0) for b in rhs]
        for j in range(self.n):
            if hi[j] < math.inf:
                rows.append([1.0 if k == j else 0.0 for k in range(self.n)])
                rhs.append(hi[j] - lo[j])
        res = _simplex(rows, rhs, self.obj)
        if res is None:
            return None
        value, y = res
        return value + sum(o * lo_j for o, lo_j in zip(self.obj, lo, strict=True)), [
            a + b for a, b in zip(y, lo, strict=True)
        ]

    def solve(self) -> list[int]:
        root = self._relax([0] * self.n, [math.inf] * self.n)
        if root is None:
            return self.best_x
        self.bound = root[0]
        self._incumbent_from(root[1])
        stack: list[tuple[list[int], list[float]]] = [([0] * self.n, [math.inf] * self.n)]
        while stack:
            if self.nodes >= self.node_limit:
                self.optimal = False
                break
            lo, hi = stack.pop()
            self.nodes += 1
            res = self._relax(lo, hi)
            # Objective values are integers: a relaxation below best + 1 cannot improve on it.
            if res is None or math.floor(res[0] + 1e-6) <= self.best_value:
                continue
            value, x = res
            frac = [(abs(v - round(v)), j) for j, v in enumerate(x) if abs(v - round(v)) > 1e-6]
            if not frac:
                self.best_value, self.best_x = value, [round(v) for v in x]
                continue
            self._incumbent_from(x)
            _, j = max(frac)
            down_hi = list(hi)
            down_hi[j] = math.floor(x[j])
            up_lo = list(lo)
            up_lo[j] = math.ceil(x[j])
            stack.append((lo, down_hi))
            stack.append((up_lo, hi))  # explored first: rounding up tends to find full GPUs
        if self.optimal:
            self.bound = max(self.best_value, 0.0)
        return self.best_x

    def _incumbent_from(self, x: list[float]) -> None:
        """Round a fractional solution down, then greedily add the most valuable configurations."""
        cand = [math.floor(v + 1e-9) for v in x]
        slack = [b - sum(r[j] * cand[j] for j in range(self.n)) for r, b in zip(self.rows, self.rhs, strict=True)]
        for j in sorted(range(self.n), key=lambda j: -self.obj[j]):
            while all(s - r[j] >= -_EPS for s, r in zip(slack, self.rows, strict=True)):
                cand[j] += 1
                slack = [s - r[j] for s, r in zip(slack, self.rows, strict=True)]
        value = sum(o * c for o, c in zip(self.obj, cand, strict=True))
        if value > self.best_value:
            self.best_value, self.best_x = value, cand
