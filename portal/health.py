"""Liveness and readiness for probes: `/healthz` (the process answers) and `/readyz` (the database and the broker
answer too).

Answered by a middleware ahead of every other, so that a probe needs no session, no login and no allowed host:
the kubelet sends the pod's IP as the Host header, which ALLOWED_HOSTS rightly refuses everywhere else.
Neither answer says more than which dependency is down: no server names, versions or errors leak to whoever
can reach the port.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable

import redis
from django.conf import settings
from django.db import connection
from django.http import HttpRequest, HttpResponse

logger = logging.getLogger(__name__)

HEALTH_PATH = "/healthz"
READY_PATH = "/readyz"
#: A probe has a timeout of its own (1 s by default); answer before it rather than hang on a dead dependency.
CHECK_TIMEOUT_S = 2.0


def database_ready() -> bool:
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
            return bool(cursor.fetchone() == (1,))
    except Exception:  # any driver error means "not ready"; the log says which
        logger.warning("readiness: the database does not answer", exc_info=True)
        return False


def _redis_ready(url: str, what: str) -> bool:
    try:
        client = redis.Redis.from_url(url, socket_timeout=CHECK_TIMEOUT_S, socket_connect_timeout=CHECK_TIMEOUT_S)
        try:
            return bool(client.ping())
        finally:
            client.close()
    except (redis.RedisError, OSError, ValueError):
        logger.warning("readiness: the %s does not answer", what, exc_info=True)
        return False


def broker_ready() -> bool:
    """The Celery broker; the demo's in-process broker (memory://) is always there."""
    url = str(settings.CELERY_BROKER_URL)
    if url.startswith(("redis://", "rediss://", "unix://")):
        return _redis_ready(url, "broker")
    return url.startswith("memory://")


def cache_ready() -> bool:
    """The shared cache (throttles, sign-in lockouts), where one is configured."""
    url = settings.CACHE_URL
    return True if not url else _redis_ready(str(url), "cache")


def readiness() -> dict[str, bool]:
    return {"database": database_ready(), "broker": broker_ready(), "cache": cache_ready()}


def _plain(status: int, body: dict[str, str]) -> HttpResponse:
    response = HttpResponse(json.dumps(body), status=status, content_type="application/json")
    response["Cache-Control"] = "no-store"
    return response


class HealthCheckMiddleware:
    """Answer /healthz and /readyz before host validation, sessions and authentication."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        path = request.path_info.rstrip("/")
        if request.method not in ("GET", "HEAD") or path not in (HEALTH_PATH, READY_PATH):
            return self.get_response(request)
        if path == HEALTH_PATH:
            return _plain(200, {"status": "ok"})
        checks = readiness()
        ready = all(checks.values())
        return _plain(
            200 if ready else 503,
            {"status": "ok" if ready else "unavailable", **{k: "ok" if v else "down" for k, v in checks.items()}},
        )
