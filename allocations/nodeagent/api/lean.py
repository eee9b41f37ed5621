"""A WSGI dispatcher in front of Django for the one hot endpoint: queued ``POST /api/v1/agent/telemetry/``.

Every node reports every 5 s, so at 1,000 nodes this one request is nearly all the web processes do. Through
Django's handler it paid the URL resolver and the middleware chain (sessions, CSRF, authentication, messages...)
that an agent's report never uses. Here it goes straight to the same view (``telemetry.py``, queued: the
credential checked in the shared Redis Lua script, the same validator, the same answers), and only the parts of
the stack that change what the agent sees are kept: the host check (a refused host falls through to Django, which
answers it as always), the response headers the security, clickjacking and CSP middleware add, Content-Length,
the request-latency metric, the request_started/finished signals (database connections are closed or kept as
after any request), the 503 for a database that does not answer, and Django's handling of any other exception in
the view (its 500). Also skipped: the authenticating proxy's sign-in (an agent is no person, and must get no
session cookie). Anything else (another path or method, a query string, a body that is not JSON, inline ingest
without the queue) is Django's, unchanged.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable
from typing import Any

from csp.middleware import CSPMiddleware
from django.conf import settings
from django.core import signals
from django.core.exceptions import DisallowedHost
from django.core.handlers.exception import convert_exception_to_response
from django.core.handlers.wsgi import WSGIRequest, get_script_name
from django.http import HttpRequest, HttpResponse
from django.middleware.clickjacking import XFrameOptionsMiddleware
from django.middleware.security import SecurityMiddleware
from django.urls import resolve, set_script_prefix, set_urlconf
from django.utils.log import log_response

from allocations.nodeagent import ingest_queue
from allocations.nodeagent.api.telemetry import telemetry
from portal.metrics import events
from portal.unavailable import DatabaseUnavailableMiddleware

log = logging.getLogger(__name__)

PATH = "/api/v1/agent/telemetry/"

WSGIApp = Callable[[dict[str, Any], Callable[..., Any]], Iterable[bytes]]


def _unused(request: HttpRequest) -> HttpResponse:  # the middleware below are asked for their response phase only
    raise AssertionError("not called")


class LeanTelemetry:
    """``application = LeanTelemetry(get_wsgi_application())`` (portal/wsgi.py)."""

    def __init__(self, django: WSGIApp) -> None:
        self.django = django
        unavailable = DatabaseUnavailableMiddleware(_unused)

        def view(request: HttpRequest) -> HttpResponse:
            try:
                return telemetry(request)
            except Exception as exc:  # as the stack: no database is a 503 (the one process_exception it has)
                answer = unavailable.process_exception(request, exc)
                if answer is None:
                    raise
                return answer

        self.view = convert_exception_to_response(view)  # any other exception: Django's 500, as through the stack
        # Response phases in the order Django runs them (MIDDLEWARE from the last): CSP, X-Frame-Options, security.
        self.on_response: list[Callable[[HttpRequest, Any], Any]] = [
            CSPMiddleware(_unused).process_response,
            XFrameOptionsMiddleware(_unused).process_response,
            SecurityMiddleware(_unused).process_response,
        ]
        self.view_name = resolve(PATH).view_name  # the metric's label, as RequestLatencyMiddleware names it

    def takes(self, environ: dict[str, Any]) -> bool:
        return (
            environ.get("PATH_INFO") == PATH
            and environ.get("REQUEST_METHOD") == "POST"
            and not environ.get("QUERY_STRING")  # a query string is checked for NUL bytes by a middleware
            and environ.get("CONTENT_TYPE", "").partition(";")[0].strip() == "application/json"
            and ingest_queue.enabled()
        )

    def __call__(self, environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        if not self.takes(environ):
            return self.django(environ, start_response)
        request = WSGIRequest(environ)
        try:
            request.get_host()  # ALLOWED_HOSTS (CommonMiddleware asks the same)
        except DisallowedHost:
            return self.django(environ, start_response)  # Django answers it (400) and logs it, as for any path
        set_script_prefix(get_script_name(environ))
        signals.request_started.send(sender=self.__class__, environ=environ)
        started = time.perf_counter()
        set_urlconf(settings.ROOT_URLCONF)  # as BaseHandler.get_response (the 500 handler is looked up there)
        response: Any = self.view(request)  # an HttpResponse: the view is synchronous
        response._resource_closers.append(request.close)
        for process_response in self.on_response:
            response = process_response(request, response)
        if not response.has_header("Content-Length"):  # as CommonMiddleware
            response.headers["Content-Length"] = str(len(response.content))
        if response.status_code >= 400:  # django.request's warning, as BaseHandler.get_response logs it
            log_response("%s: %s", response.reason_phrase, request.path, response=response, request=request)
        try:
            events.observe_request(
                view=self.view_name, method="POST", status=response.status_code, seconds=time.perf_counter() - started
            )
        except Exception:  # a metric must never cost the agent its answer
            log.exception("metrics: could not record a request")
        response._handler_class = self.__class__  # as WSGIHandler
        headers = [*response.items(), *(("Set-Cookie", c.output(header="")) for c in response.cookies.values())]
        start_response(f"{response.status_code} {response.reason_phrase}", headers)
        return response  # type: ignore[no-any-return]  # its close() sends request_finished, as Django's
