"""A database that does not answer is a 503 with Retry-After, never a 500 (issue 16).

While PostgreSQL restarts (seconds), a request that reaches a view finds no connection. That is no bug to page
anyone about: the client should try again, and says so in JSON for the API, in words for the browser. Connections
broken by the restart are replaced on the next request (DATABASE_CONN_HEALTH_CHECKS), so only requests that
arrive while the server is really down see this.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable

from django.db import InterfaceError, OperationalError
from django.http import HttpRequest, HttpResponse

logger = logging.getLogger(__name__)

RETRY_AFTER_S = 5
MESSAGE = "The database is not answering right now; nothing was changed. Try again in a few seconds."


class DatabaseUnavailableMiddleware:
    """Turn a view's OperationalError or InterfaceError (no connection, a restart) into a 503."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        return self.get_response(request)

    def process_exception(self, request: HttpRequest, exception: Exception) -> HttpResponse | None:
        if not isinstance(exception, OperationalError | InterfaceError):
            return None
        logger.warning("database unavailable for %s %s: %s", request.method, request.path, exception)
        if request.path.startswith("/api/"):
            response = HttpResponse(json.dumps({"detail": [MESSAGE]}), status=503, content_type="application/json")
        else:
            response = HttpResponse(
                f"<!doctype html><title>Try again</title><h1>Try again in a moment</h1><p>{MESSAGE}</p>",
                status=503,
                content_type="text/html; charset=utf-8",
            )
        response["Retry-After"] = str(RETRY_AFTER_S)
        return response
