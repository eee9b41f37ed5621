from __future__ import annotations

from django.contrib import admin
from django.urls import include, path
from drf_spectacular.views import SpectacularAPIView, SpectacularRedocView, SpectacularSwaggerSplitView

urlpatterns = [
    path("api/v1/", include("tenants.api.urls")),
    path("api/v1/", include("allocations.api.urls")),
    path("api/v1/", include("allocations.nodeagent.api.urls")),
    path("api/v1/schema/", SpectacularAPIView.as_view(), name="schema"),
    # The split view serves Swagger UI's start-up script as a file: the CSP allows no inline script.
    path("api/v1/docs/", SpectacularSwaggerSplitView.as_view(url_name="schema"), name="api-docs"),
    path("api/v1/redoc/", SpectacularRedocView.as_view(url_name="schema"), name="api-redoc"),
    path("admin/", admin.site.urls),
    path("", include("tenants.urls")),
    path("", include("allocations.urls")),
]

# Friendly pages in the browser, the API's JSON error body under /api/ (tenants/error_views.py).
handler400 = "tenants.error_views.bad_request"
handler403 = "tenants.error_views.permission_denied"
handler404 = "tenants.error_views.page_not_found"
handler500 = "tenants.error_views.server_error"
