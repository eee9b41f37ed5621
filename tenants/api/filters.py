"""django-filter, minus its cost on requests that filter nothing."""

from __future__ import annotations

from typing import Any

from django.db.models import QuerySet
from django_filters.rest_framework import DjangoFilterBackend
from rest_framework.request import Request


class FilterBackend(DjangoFilterBackend):  # type: ignore[misc]
    """Builds the view's FilterSet only when the query string names one of its filters: building it
    deep-copies every filter, about a millisecond, which is a tenth of a plain list request."""

    def filter_queryset(self, request: Request, queryset: QuerySet[Any], view: Any) -> QuerySet[Any]:
        filterset_class = self.get_filterset_class(view, queryset)
        if filterset_class is None:
            return queryset
        names = set(filterset_class.base_filters)
        if not any(key in names for key in request.query_params):
            return queryset
        result: QuerySet[Any] = super().filter_queryset(request, queryset, view)
        return result
