"""What fleet discovery found, for platform admins: the /manage/fleet/ page and `manage.py fleet_report`.

Pools with their node selectors and the nodes they took; GPU nodes no pool takes, with the reason; per node the
driver version, DynamicMIG on or off, its GPUs and where its published figures and the catalog disagree (the
cluster's figures apply to that node: allocations/mig/figures.py); devices held by claims the portal did not
make. Read-only, a fixed number of queries whatever the fleet size (figures compared once per distinct row).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime

from django.db.models import Count, Max

from allocations.costs import gpu_model_for
from allocations.mig.catalog import GpuModel, UnknownGpuModel, load_catalog
from allocations.models import ClaimedDevice, Gpu, Node, NodePool
from allocations.selectors import figures_disagreements


@dataclass
class NodeLine:
    node_id: int
    name: str
    state: str
    state_label: str
    pool: str  # slug, "" when none
    note: str
    driver_version: str
    dynamic_mig: bool | None
    gpus: int
    products: str
    discovered: bool
    outside: int = 0  # devices held by claims the portal did not make
    disagreements: list[str] = field(default_factory=list)

    @property
    def dynamic_mig_label(self) -> str:
        return {True: "on", False: "off", None: "unknown"}[self.dynamic_mig]


@dataclass
class PoolLine:
    pk: int
    name: str
    slug: str
    gpu_model: str
    node_selector: str
    mig_mode: str
    nodes: list[NodeLine] = field(default_factory=list)

    @property
    def gpu_count(self) -> int:
        return sum(n.gpus for n in self.nodes)


@dataclass
class FleetReport:
    pools: list[PoolLine]
    unmatched: list[NodeLine]
    last_discovered_at: datetime | None
    disagreeing_nodes: int
    outside_devices: int

    @property
    def nodes(self) -> list[NodeLine]:
        return [n for p in self.pools for n in p.nodes] + self.unmatched


def _model_for(name: str) -> GpuModel | None:
    try:
        return gpu_model_for(name)
    except UnknownGpuModel:
        return None


def fleet_report() -> FleetReport:
    """Everything discovery found (see the module docstring). Six queries."""
    pools = list(NodePool.objects.order_by("name"))
    by_pk = {p.pk: p for p in pools}
    lines = {p.pk: PoolLine(p.pk, p.name, p.slug, p.gpu_model, p.node_selector, p.mig_mode) for p in pools}
    gpus: dict[int, list[tuple[str, int | None]]] = {}
    for node_id, product, figures_id in Gpu.objects.order_by("node_id", "index").values_list(
        "node_id", "product", "figures_id"
    ):
        gpus.setdefault(node_id, []).append((product, figures_id))
    outside = dict(
        ClaimedDevice.objects.outside_fatia()
        .filter(gpu__isnull=False)
        .values("gpu__node_id")
        .annotate(n=Count("pk"))
        .order_by()
        .values_list("gpu__node_id", "n")
    )
    states = dict(Node.State.choices)
    unmatched: list[NodeLine] = []
    disagreeing = 0
    catalog = load_catalog()
    for node in Node.objects.order_by("name"):
        found = gpus.get(node.pk, [])
        products = Counter(p for p, _ in found if p)
        line = NodeLine(
            node_id=node.pk,
            name=node.name,
            state=node.state,
            state_label=str(states.get(node.state, node.state)),
            pool=by_pk[node.pool_id].slug if node.pool_id in by_pk else "",
            note=node.pool_note,
            driver_version=node.driver_version,
            dynamic_mig=node.dynamic_mig,
            gpus=len(found),
            products=", ".join(f"{n} x {p}" for p, n in products.items()),
            discovered=node.discovered_at is not None,
            outside=outside.get(node.pk, 0),
        )
        # Compared with the pool's model, or for a node no pool takes, with the catalog's model of its product.
        pool = by_pk.get(node.pool_id) if node.pool_id is not None else None
        product = next(iter(products), "")
        model = (
            _model_for(pool.gpu_model) if pool is not None else (catalog.model(product) if product in catalog else None)
        )
        if model is not None:
            for _product, gpu_figures in found:
                for note in figures_disagreements(model, gpu_figures):
                    if note not in line.disagreements:
                        line.disagreements.append(note)
        disagreeing += 1 if line.disagreements else 0
        if pool is not None:
            lines[pool.pk].nodes.append(line)
        elif node.discovered_at is not None:
            unmatched.append(line)
    return FleetReport(
        pools=list(lines.values()),
        unmatched=unmatched,
        last_discovered_at=Node.objects.aggregate(m=Max("discovered_at"))["m"],
        disagreeing_nodes=disagreeing,
        outside_devices=sum(outside.values()),
    )


def report_text(report: FleetReport) -> str:
    """The report as plain text (manage.py fleet_report)."""
    out: list[str] = []
    when = report.last_discovered_at.strftime("%Y-%m-%d %H:%M:%S UTC") if report.last_discovered_at else "never"
    out.append(f"Fleet discovery, last write {when}")
    out.append(
        f"{len(report.pools)} pools, {len(report.nodes)} nodes ({len(report.unmatched)} in no pool), "
        f"{report.disagreeing_nodes} with figures that differ from the catalog, "
        f"{report.outside_devices} devices held outside Fatia"
    )
    for pool in report.pools:
        out.append("")
        selector = pool.node_selector or "(none: nodes registered by hand)"
        out.append(f"Pool {pool.slug} ({pool.gpu_model}): selector {selector}")
        out.append(f"  {_count(len(pool.nodes), 'node')}, {_count(pool.gpu_count, 'GPU')}")
        out += [_node_text(n) for n in pool.nodes]
    out.append("")
    out.append(f"GPU nodes in no pool: {len(report.unmatched)}")
    out += [_node_text(n) for n in report.unmatched]
    return "\n".join(out) + "\n"


def _node_text(node: NodeLine) -> str:
    driver = node.driver_version or "?"
    lines = [
        f"  {node.name}: {node.state_label}, {_count(node.gpus, 'GPU')} ({node.products or 'none published'}), "
        f"driver {driver}, "
        f"DynamicMIG {node.dynamic_mig_label}"
        + (f", {node.outside} devices held outside Fatia" if node.outside else "")
    ]
    if node.note:
        lines.append(f"    why no pool: {node.note}")
    lines += [f"    cluster figures: {d}" for d in node.disagreements]
    return "\n".join(lines)


def _count(n: int, what: str) -> str:
    return f"{n} {what}" if n == 1 else f"{n} {what}s"
