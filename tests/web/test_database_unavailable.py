"""A view that finds the database down answers 503 with Retry-After, in JSON on the API and in words in the browser
(portal/unavailable.py); any other error is left to Django."""

from __future__ import annotations

import json

from django.db import InterfaceError, OperationalError
from django.http import HttpResponse
from django.test import RequestFactory

from portal.unavailable import DatabaseUnavailableMiddleware


def middleware() -> DatabaseUnavailableMiddleware:
    return DatabaseUnavailableMiddleware(lambda request: HttpResponse("ok"))


def test_the_api_gets_a_503_with_a_message_in_json() -> None:
    request = RequestFactory().post("/api/v1/allocations/")
    response = middleware().process_exception(request, OperationalError("terminating connection"))
    assert response is not None
    assert (response.status_code, response["Retry-After"]) == (503, "5")
    assert json.loads(response.content)["detail"][0].startswith("The database is not answering")
    assert "terminating" not in response.content.decode()


def test_a_page_gets_a_503_in_words() -> None:
    request = RequestFactory().get("/requests/")
    response = middleware().process_exception(request, InterfaceError("connection already closed"))
    assert response is not None
    assert response.status_code == 503
    assert "Try again in a moment" in response.content.decode()


def test_other_errors_are_not_its_business() -> None:
    request = RequestFactory().get("/requests/")
    assert middleware().process_exception(request, ValueError("a bug")) is None
