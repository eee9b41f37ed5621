"""MIG catalog, layout validity, placement policies, what-if, reconfiguration and defrag planners.

Pure Python: nothing here imports Django, so the portal, the workers and the benchmark share it.
Design notes: docs/placement.md.

Entry points (import from the submodules or from here):

* ``catalog``: :func:`load_catalog`, :class:`Catalog` (``model``, ``from_nvml``), :class:`GpuModel`,
  :class:`MigProfile`, :func:`gpu_equivalents`;
* ``layout``: :func:`is_valid_layout`, :func:`layout_violations`;
* ``fleet``: :class:`Fleet`, :class:`Node`, :class:`Gpu`, :class:`Instance`, :class:`PlacementRequest`,
  :class:`PlacementDecision`;
* ``engine``: :class:`PlacementEngine`, :func:`choose_placement`, :func:`fits_now`;
* ``demand``: :class:`DemandLearner`, :class:`DemandMix`;
* ``reconfig``: :func:`plan_reconfiguration`; ``defrag``: :func:`plan_defrag`;
  ``offline``: :func:`offline_optimum`.
"""

from .catalog import (
    Catalog,
    GpuModel,
    MigProfile,
    Placement,
    UnknownGpuModel,
    UnknownProfile,
    gpu_equivalents,
    load_catalog,
)
from .defrag import DefragPlan, plan_defrag
from .demand import DemandLearner, DemandMix
from .engine import InvalidLayout, PlacementEngine, choose_placement, fits_now
from .fleet import Fleet, Gpu, Instance, Node, PlacementDecision, PlacementRequest, SlotChoice
from .layout import is_valid_layout, layout_violations
from .offline import offline_optimum
from .reconfig import Operation, ReconfigurationPlan, plan_reconfiguration

__all__ = [
    "Catalog",
    "DefragPlan",
    "DemandLearner",
    "DemandMix",
    "Fleet",
    "Gpu",
    "GpuModel",
    "Instance",
    "InvalidLayout",
    "MigProfile",
    "Node",
    "Operation",
    "Placement",
    "PlacementDecision",
    "PlacementEngine",
    "PlacementRequest",
    "ReconfigurationPlan",
    "SlotChoice",
    "UnknownGpuModel",
    "UnknownProfile",
    "choose_placement",
    "fits_now",
    "gpu_equivalents",
    "is_valid_layout",
    "layout_violations",
    "load_catalog",
    "offline_optimum",
    "plan_defrag",
    "plan_reconfiguration",
]
