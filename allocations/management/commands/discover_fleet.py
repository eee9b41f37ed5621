"""Fleet discovery: `manage.py discover_fleet` follows the cluster for as long as it runs (one process per
portal, next to the Celery workers); `--once` lists it and writes what it found, then exits (the beat runs it
as a safety net; tests use it). Needs FATIA_CLUSTER_BACKEND=kubernetes. See allocations/cluster/watcher.py."""

from __future__ import annotations

import logging
import signal
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser

from allocations.cluster import kube
from allocations.cluster.watcher import FleetDiscovery


class Command(BaseCommand):
    help = "Discover the GPU fleet from Kubernetes: nodes, the NVIDIA driver's ResourceSlices, allocated claims."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--once", action="store_true", help="List the cluster once, write it, and exit.")

    def handle(self, *args: Any, **options: Any) -> None:
        if settings.FATIA_CLUSTER_BACKEND != "kubernetes":
            raise CommandError("Fleet discovery reads a Kubernetes cluster: set FATIA_CLUSTER_BACKEND=kubernetes.")
        discovery = FleetDiscovery()
        if options["once"]:
            try:
                report = discovery.sync_once()
            except kube.KubeError as exc:
                raise CommandError(f"Could not read the cluster: {exc.message}") from exc
            self.stdout.write(
                f"{len(report.updated)} nodes written: joined {len(report.joined)}, left {len(report.left)}, "
                f"unmatched {len(report.unmatched)}, gone {len(report.gone)}, back {len(report.back)}, "
                f"GPUs changed {len(report.gpus_changed)}; {report.claimed_devices} claimed devices written."
            )
            return
        logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")

        def stop(signum: int, frame: object) -> None:
            discovery.stop()

        signal.signal(signal.SIGTERM, stop)
        signal.signal(signal.SIGINT, stop)
        self.stdout.write(f"Following the cluster (full list every {discovery.resync_s:.0f} s); stop with Ctrl-C.")
        discovery.run_forever()
