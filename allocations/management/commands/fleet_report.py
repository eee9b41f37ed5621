"""`manage.py fleet_report`: what fleet discovery found (pools, their selectors and nodes, GPU nodes in no pool,
driver version and DynamicMIG per node, where a node's figures differ from the catalog), as text. The same as
the /manage/fleet/ page; it reads the database only (run `manage.py discover_fleet --once` first to refresh)."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand

from allocations.cluster.report import fleet_report, report_text


class Command(BaseCommand):
    help = "Show what fleet discovery found: pools, nodes, unmatched GPU nodes, drivers, DynamicMIG, disagreements."

    def handle(self, *args: Any, **options: Any) -> None:
        self.stdout.write(report_text(fleet_report()), ending="")
