"""`manage.py drain_telemetry`: apply the telemetry the web processes queued (FATIA_INGEST_QUEUE_URL), in batches,
for as long as it runs; `--once` drains what is queued now and exits. One process per portal (the image's `ingest`
role); see allocations/nodeagent/drain.py for what happens on a crash."""

from __future__ import annotations

import logging
import signal
import socket
import threading
import time
from typing import Any

import redis
from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import InterfaceError, OperationalError, close_old_connections, connections

from allocations.nodeagent import ingest_queue
from allocations.nodeagent.drain import drain_telemetry

log = logging.getLogger("allocations.nodeagent.drain")

# After a batch smaller than the most a transaction takes, wait this long before the next read: a transaction
# costs a few milliseconds whatever its size (locks, two reads, two UPDATEs, Redis), so batches of one or two
# reports at a few dozen a second cost about twice the CPU per report of batches of dozens. Applied figures are
# this much later; the agents' answers are not.
GATHER_S = 0.5


class Command(BaseCommand):
    help = "Apply queued node-agent telemetry to the database in batches (accept-then-apply ingest)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--once", action="store_true", help="Drain what is queued now, then exit.")
        parser.add_argument(
            "--consumer",
            default="drain",
            help="This worker's name in the queue's consumer group (default drain). A restarted worker under the same "
            "name takes its unfinished reports back at once; another name takes them after FATIA_INGEST_CLAIM_IDLE_S.",
        )
        parser.add_argument("--batch", type=int, default=0, help="Reports per transaction (FATIA_INGEST_BATCH).")

    def handle(self, *args: Any, **options: Any) -> None:
        if not ingest_queue.enabled():
            raise CommandError("There is no telemetry queue: set FATIA_INGEST_QUEUE_URL (a Redis URL).")
        batch = options["batch"] or settings.FATIA_INGEST_BATCH
        consumer = options["consumer"] or socket.gethostname()
        if options["once"]:
            total = 0
            while (done := drain_telemetry(consumer=consumer, count=batch)).reports or done.buried:
                total += done.reports
            self.stdout.write(f"{total} reports applied; {ingest_queue.backlog()} left in the queue.")
            return
        logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
        stop = threading.Event()
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, lambda *_: stop.set())
        self.stdout.write(f"Draining telemetry as {consumer!r}, {batch} reports per transaction; stop with Ctrl-C.")
        recover_at = 0.0  # at start: this worker's own unfinished reports first, then any silent worker's
        while not stop.is_set():
            close_old_connections()
            recover = time.monotonic() >= recover_at
            try:
                done = drain_telemetry(consumer=consumer, count=batch, block_ms=1000, recover=recover)
            except (OperationalError, InterfaceError, redis.RedisError, OSError) as exc:
                # Nothing was acknowledged: the same reports are read again once the database or Redis is back.
                log.warning("drain paused: %s", exc)
                connections.close_all()
                recover_at = 0.0
                time.sleep(1.0)
                continue
            if recover:
                recover_at = time.monotonic() + settings.FATIA_INGEST_CLAIM_IDLE_S
            if done.reports < batch:
                stop.wait(GATHER_S)
