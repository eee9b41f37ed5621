"""Page-number pagination for every list, and a one-query variant for the hottest list."""

from __future__ import annotations

from typing import Any

from django.db.models import Count, QuerySet, Window
from rest_framework.exceptions import NotFound, ValidationError
from rest_framework.pagination import PageNumberPagination
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.utils.urls import remove_query_param, replace_query_param

# The limits the server enforces (and the schema states): a page number past MAX_PAGE is refused before it reaches
# the database, whose OFFSET it would overflow.
MAX_PAGE = 1_000_000
DEFAULT_PAGE_SIZE = 50
MAX_PAGE_SIZE = 500


def _bounded_int(request: Request, name: str, default: int, low: int, high: int) -> int:
    """A query parameter that must be a whole number from low to high (ASCII digits only); 400 otherwise."""
    raw = request.query_params.get(name)
    if raw is None:
        return default
    if not (raw.isascii() and raw.isdigit()) or not low <= int(raw) <= high:
        raise ValidationError({name: [f"Give a whole number from {low} to {high}."]})
    return int(raw)


class StandardPagination(PageNumberPagination):
    """Page-number pagination that refuses a malformed `page` or `page_size` with a 400 (DRF ignores a bad
    `page_size` and overflows on a huge `page`); a page past the last is a 404, as in DRF."""

    page_size = DEFAULT_PAGE_SIZE
    page_size_query_param = "page_size"
    max_page_size = MAX_PAGE_SIZE
    last_page_strings = ()

    def get_page_size(self, request: Request) -> int:
        return _bounded_int(request, "page_size", DEFAULT_PAGE_SIZE, 1, MAX_PAGE_SIZE)

    def get_page_number(self, request: Request, paginator: Any) -> int:
        return _bounded_int(request, "page", 1, 1, MAX_PAGE)

    def get_schema_operation_parameters(self, view: Any) -> list[dict[str, Any]]:
        return [
            {
                "name": "page",
                "required": False,
                "in": "query",
                "description": "A page number; a page past the last answers 404.",
                "schema": {"type": "integer", "minimum": 1, "maximum": MAX_PAGE, "default": 1},
            },
            {
                "name": "page_size",
                "required": False,
                "in": "query",
                "description": "Results per page.",
                "schema": {"type": "integer", "minimum": 1, "maximum": MAX_PAGE_SIZE, "default": DEFAULT_PAGE_SIZE},
            },
        ]


class WindowCountPagination(StandardPagination):
    """The same pages and response as StandardPagination, but the total comes with the page rows
    (`COUNT(*) OVER ()`), so a page costs one query instead of a COUNT and a SELECT. Only for
    `.values()` querysets; the rows come back as dicts without the `_total` key."""

    def paginate_queryset(self, queryset: QuerySet[Any], request: Request, view: Any = None) -> list[Any]:
        self.request = request
        self.page_request = request
        self.page_size_now = self.get_page_size(request)
        self.number = self.get_page_number(request, None)
        offset = (self.number - 1) * self.page_size_now
        # COUNT(*) OVER () joins every matching row before the LIMIT; a scalar COUNT subquery reads only
        # the page but measured slower (192 against 266 list requests/s at 1,000 rows, docs/api-performance.md).
        rows = list(queryset.annotate(_total=Window(Count("pk")))[offset : offset + self.page_size_now])
        if rows:
            self.total = rows[0]["_total"]
            for row in rows:
                del row["_total"]
        else:
            # Past the end (or an empty list): only then is a separate count needed.
            self.total = queryset.count()
            if self.number > 1:
                raise NotFound("Invalid page.")
        return rows

    def get_paginated_response(self, data: Any) -> Response:
        return Response(
            {
                "count": self.total,
                "next": self._link(self.number + 1),
                "previous": self._link(self.number - 1),
                "results": data,
            }
        )

    def _link(self, number: int) -> str | None:
        if number < 1 or (number - 1) * self.page_size_now >= self.total:
            return None
        url = self.page_request.build_absolute_uri()
        if number == 1:
            return remove_query_param(url, self.page_query_param)
        return replace_query_param(url, self.page_query_param, number)
