"""Request checks that hold for every page and API route."""

from __future__ import annotations

from collections.abc import Callable, Iterable

from django.http import HttpRequest, HttpResponse

from tenants.error_views import bad_request


class RejectNulBytesMiddleware:
    """Answer 400 to a query string or form field that holds a NUL character.

    No field of the portal can hold one, and PostgreSQL refuses it in any text it is sent ("A string literal
    cannot contain NUL"), which used to surface as a 500 from whichever view passed the value on: the
    dashboard's search, a form's hidden idempotency key. JSON bodies are checked by DRF's fields.
    """

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        if _has_nul(request.GET.lists()) or (request.method == "POST" and _has_nul(request.POST.lists())):
            return bad_request(request)
        return self.get_response(request)


def _has_nul(items: Iterable[tuple[str, list[str]]]) -> bool:
    return any("\x00" in key or any("\x00" in value for value in values) for key, values in items)
