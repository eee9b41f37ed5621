"""Settings for bench/provision.py --one-queue: the portal's, with claim polls routed to Celery's default queue.

Before session 13 a claim's poll queued behind every provisioning task of a burst; this puts it back there for the
bench's workers only, so the two orderings can be compared on the same code (docs/benchmarks.md, the burst).
"""

from portal.settings import *  # noqa: F403

CELERY_TASK_ROUTES = {}
