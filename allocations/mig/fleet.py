"""Plain data the engine works on: the fleet's GPUs and their instances, requests and decisions.

These are deliberately dumb dataclasses so the Django side can build them from its models (or the
agent's reports) without the engine knowing about either.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .catalog import GpuModel


@dataclass(frozen=True, slots=True)
class Instance:
    """A GPU instance that exists on a GPU.

    ``owner`` is the allocation that holds it; ``None`` means a *free* instance (created, e.g. by static
    MIG configuration, but unallocated). ``idle`` marks a held instance whose tenant is not using it:
    the defrag planner may propose to move it; busy (non-idle) instances are never touched.
    """

    profile: str
    start: int
    owner: str | None = None
    idle: bool = False

    @property
    def free(self) -> bool:
        return self.owner is None

    @property
    def movable(self) -> bool:
        """Free instances can be destroyed and idle ones moved; busy ones are immovable."""
        return self.owner is None or self.idle


@dataclass(slots=True)
class Gpu:
    """One MIG-enabled GPU: its node, its index on the node, its model and its current layout."""

    node: str
    index: int
    model: GpuModel
    instances: list[Instance] = field(default_factory=list)


@dataclass(slots=True)
class Node:
    name: str
    gpus: list[Gpu]
    pool: str = "default"


@dataclass(slots=True)
class Fleet:
    """Nodes in *device order*: the order first-fit walks (node order, then GPU order on a node)."""

    nodes: list[Node]

    def gpus(self, pool: str | None = None) -> list[Gpu]:
        return [g for n in self.nodes if pool is None or n.pool == pool for g in n.gpus]

    def node(self, name: str) -> Node:
        for n in self.nodes:
            if n.name == name:
                return n
        raise KeyError(f"no node {name!r} in the fleet")

    def gpu(self, node: str, index: int) -> Gpu:
        for g in self.node(node).gpus:
            if g.index == index:
                return g
        raise KeyError(f"node {node!r} has no GPU {index}")


@dataclass(frozen=True, slots=True)
class PlacementRequest:
    """``count`` instances of ``profile`` on one node of ``pool`` (any pool when ``None``).

    Only GPUs whose model has a profile of that name are candidates; ``model`` narrows them further.
    The instances of one request go to one node (a pod, and a DRA claim, lives on one node).
    ``force``: place it wherever it fits even under a policy that may hold requests (``ours-hold``); set for
    a request that has waited long enough, so holding can never starve it.
    """

    profile: str
    count: int = 1
    pool: str | None = None
    model: str | None = None
    force: bool = False

    def __post_init__(self) -> None:
        if self.count < 1:
            raise ValueError("a request needs at least one instance")


@dataclass(frozen=True, slots=True)
class SlotChoice:
    """Where one instance goes. ``reuse``: an existing free instance at ``start``; else create one."""

    node: str
    gpu_index: int
    profile: str
    start: int
    reuse: bool = False


@dataclass(frozen=True, slots=True)
class PlacementDecision:
    """The chosen node and, per requested instance, the GPU and memory slot."""

    node: str
    slots: tuple[SlotChoice, ...]
    policy: str
    # The policy's rank of the choice (lower is better; summed over instances): comparable between policies
    # that rank alike, e.g. ``ours`` and ``ours-first-slot``.
    rank: tuple[float, ...] = ()

    @property
    def gpu_index(self) -> int:
        """GPU of the first instance (the only one for single-instance requests)."""
        return self.slots[0].gpu_index

    @property
    def start(self) -> int:
        return self.slots[0].start
