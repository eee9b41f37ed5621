"""`manage.py check_cluster [--json]`: is the cluster in FATIA_KUBECONFIG ready for the portal?

One line per check (OK / WARN / FAIL, what was found, what to do); `--json` prints the same report for
machines. Exit status 1 when a check FAILs (the portal cannot work as it is), 0 with warnings only.
"""

from __future__ import annotations

import json
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from allocations.cluster.checks import Level, check_cluster, format_report


class Command(BaseCommand):
    help = "Check that the Kubernetes cluster in FATIA_KUBECONFIG is ready for the portal (exit 1 on a FAIL)."
    # Nothing here needs the database or Django's own checks: a cluster can be checked before migrate.
    requires_system_checks: list[str] = []
    requires_migrations_checks = False

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--json", action="store_true", help="print the report as JSON")

    def handle(self, *args: Any, **options: Any) -> None:
        report = check_cluster()
        if options["json"]:
            self.stdout.write(json.dumps(report.as_dict(), indent=2))
        else:
            self.stdout.write(format_report(report))
        if report.exit_code:
            fails = [r.title for r in report.results if r.level == Level.FAIL]
            raise CommandError(f"the cluster is not ready for the portal: {', '.join(fails)} failed", returncode=1)
