"""deploy/grafana/fatia.json: valid JSON, its data source an input, and every query names metrics that GET /metrics
exports; every family the portal exports has a panel."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from django.test import Client

from tests.conftest import World
from tests.web.test_metrics import AUTH, POD_IP, TOKEN

DASHBOARD = Path(__file__).resolve().parents[2] / "deploy" / "grafana" / "fatia.json"
METRIC = re.compile(r"\bfatia_[a-z0-9_]+\b")

pytestmark = pytest.mark.django_db


def exported_names(text: str) -> tuple[set[str], set[str]]:
    """(every sample name the text format can carry, the families' names) from the # TYPE lines."""
    names, families = set(), set()
    for line in text.splitlines():
        if line.startswith("# TYPE "):
            _, _, name, kind = line.split(" ")
            families.add(name)
            names.add(name)
            if kind == "histogram":
                names |= {f"{name}_bucket", f"{name}_sum", f"{name}_count"}
    return names, families


def panels(dashboard: dict[str, Any]) -> list[dict[str, Any]]:
    out = []
    for panel in dashboard["panels"]:
        out += [panel, *panel.get("panels", [])]
    return [p for p in out if p["type"] != "row"]


def test_the_dashboard_queries_only_metrics_the_portal_exports_and_covers_them_all(world: World, settings: Any) -> None:
    # given: what the portal exports
    settings.FATIA_METRICS_TOKEN = TOKEN
    text = Client().get("/metrics", HTTP_HOST=POD_IP, **AUTH).content.decode()
    names, families = exported_names(text)
    assert len(families) == 22
    # when
    dashboard = json.loads(DASHBOARD.read_text())
    # then: the data source is chosen on import
    assert [i["name"] for i in dashboard["__inputs"]] == ["DS_PROMETHEUS"]
    assert dashboard["__inputs"][0]["pluginId"] == "prometheus"
    used: set[str] = set()
    ids = []
    for panel in panels(dashboard):
        ids.append(panel["id"])
        assert panel["datasource"] == {"type": "prometheus", "uid": "${DS_PROMETHEUS}"}, panel["title"]
        assert panel["targets"], panel["title"]
        for target in panel["targets"]:
            assert target["datasource"] == panel["datasource"]
            found = set(METRIC.findall(target["expr"]))
            assert found, (panel["title"], target["expr"])
            assert found <= names, (panel["title"], found - names)
            used |= found
    assert len(ids) == len(set(ids))
    # every family has a panel (a histogram through any of its series)
    covered = {f for f in families if any(u == f or u.startswith(f"{f}_") and u in names for u in used)}
    assert covered == families
    for variable in dashboard["templating"]["list"]:
        assert set(METRIC.findall(variable["definition"])) <= names
