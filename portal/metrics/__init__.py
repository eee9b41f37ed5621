"""Prometheus metrics for GET /metrics (docs/operations.md, "Metrics").

`store`: counters every process adds to (Redis); `events`: what the web, the workers and discovery record there;
`http`: the /metrics endpoint and the request-latency middleware; `celery_signals`: task retries and failures;
`collector`: turns the database's aggregates (allocations/metrics.py) and the store into metric families at
scrape time.
"""
