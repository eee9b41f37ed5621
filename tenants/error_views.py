"""The portal's error pages: friendly HTML in the browser, the API's JSON error body under /api/.

Django calls these for errors no view handled (portal/urls.py: handler400/403/404/500), e.g. a URL that
matches no route, a request refused before a view ran, or an unexpected exception. Under /api/ a client
always gets `{"code": ..., "detail": ...}`, never an HTML page.
"""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import render
from django.template import loader

API_PREFIX = "/api/"


def _is_api(request: HttpRequest) -> bool:
    return request.path.startswith(API_PREFIX)


def bad_request(request: HttpRequest, exception: Exception | None = None) -> HttpResponse:
    if _is_api(request):
        return JsonResponse({"code": "bad_request", "detail": "The request could not be read."}, status=400)
    return render(request, "400.html", status=400)


def permission_denied(request: HttpRequest, exception: Exception | None = None) -> HttpResponse:
    if _is_api(request):
        return JsonResponse(
            {"code": "permission_denied", "detail": "You do not have permission to do this."}, status=403
        )
    return render(request, "403.html", {"exception": str(exception or "")}, status=403)


def page_not_found(request: HttpRequest, exception: Exception | None = None) -> HttpResponse:
    if _is_api(request):
        return JsonResponse({"code": "not_found", "detail": "Not found."}, status=404)
    return render(request, "404.html", status=404)


def server_error(request: HttpRequest) -> HttpResponse:
    if _is_api(request):
        return JsonResponse(
            {"code": "server_error", "detail": "The portal could not finish this request; try again later."},
            status=500,
        )
    # Rendered without the request: context processors read the database, which may be what broke.
    return HttpResponse(loader.get_template("500.html").render(), status=500)
