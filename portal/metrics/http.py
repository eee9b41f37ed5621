"""GET /metrics for Prometheus, and the request-latency histogram behind `fatia_http_request_duration_seconds`.

/metrics is answered ahead of host validation, sessions and authentication (like the probes, portal/health.py):
Prometheus scrapes the pod's IP, which ALLOWED_HOSTS rightly refuses everywhere else. It asks for
`Authorization: Bearer <FATIA_METRICS_TOKEN>`, compared in constant time; without the setting there is no
/metrics at all (the portal's ordinary 404).
"""

from __future__ import annotations

import hmac
import json
import logging
import time
from collections.abc import Callable

from django.conf import settings
from django.http import HttpRequest, HttpResponse
from prometheus_client.exposition import CONTENT_TYPE_PLAIN_0_0_4

from portal.metrics import events
from portal.metrics.collector import render

logger = logging.getLogger(__name__)

METRICS_PATH = "/metrics"
#: The classic text format (0.0.4) that every Prometheus version reads; our names need none of 1.0.0's UTF-8.
CONTENT_TYPE = CONTENT_TYPE_PLAIN_0_0_4


def _json(status: int, detail: str) -> HttpResponse:
    response = HttpResponse(json.dumps({"detail": detail}), status=status, content_type="application/json")
    response["Cache-Control"] = "no-store"
    return response


def bearer_token_matches(header: str, token: str) -> bool:
    """`Bearer <token>` (scheme in any case), compared in constant time."""
    scheme, _, given = header.partition(" ")
    if scheme.lower() != "bearer":
        return False
    return hmac.compare_digest(given.strip().encode(), token.encode())


class MetricsEndpointMiddleware:
    """Answer GET /metrics before host validation; pass everything else on."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        token = settings.FATIA_METRICS_TOKEN
        if not token or request.path_info.rstrip("/") != METRICS_PATH:
            return self.get_response(request)
        if request.method not in ("GET", "HEAD"):
            response = _json(405, "Only GET is allowed here.")
            response["Allow"] = "GET, HEAD"
            return response
        if not bearer_token_matches(request.headers.get("Authorization", ""), str(token)):
            response = _json(401, "Send the metrics token as 'Authorization: Bearer <token>'.")
            response["WWW-Authenticate"] = 'Bearer realm="metrics"'
            return response
        response = HttpResponse(render(), content_type=CONTENT_TYPE)
        response["Cache-Control"] = "no-store"
        return response


class RequestLatencyMiddleware:
    """Time every request the portal answers (not the probes or /metrics, answered before it), labelled by the
    URL pattern's name, the method and the status class; never by path, user or id."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        started = time.perf_counter()
        response = self.get_response(request)
        seconds = time.perf_counter() - started
        match = getattr(request, "resolver_match", None)
        # No match: a 404 for an unknown path, or a request refused before URL resolution (a bad Host header).
        view = (match.view_name if match is not None else "") or "unmatched"
        try:
            events.observe_request(view=view, method=request.method or "", status=response.status_code, seconds=seconds)
        except Exception:  # a metric must never cost the user their answer
            logger.exception("metrics: could not record a request")
        return response
