"""The request page's manifest download (issue 17): the YAML the manifests panel shows, as a file."""

from __future__ import annotations

from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import render
from django.views.decorators.http import require_GET

from allocations import selectors
from allocations.models import Allocation
from allocations.templatetags.workloads import MANIFEST_FIELDS
from allocations.workloads.documents import dump_documents
from allocations.workloads.from_allocation import NoClaimYet, claim_target
from allocations.workloads.manifests import WorkloadInputError, build_manifests, parse_options
from tenants.views import signed_in_user


@login_required
@require_GET
def request_manifests_download(request: HttpRequest, allocation_id: int) -> HttpResponse:
    user = signed_in_user(request)
    try:
        allocation = selectors.get_allocation_for_user(user, allocation_id)
    except Allocation.DoesNotExist as exc:
        raise Http404("No such request.") from exc
    raw = {key: request.GET[key] for key in MANIFEST_FIELDS if request.GET.get(key)}
    try:
        target = claim_target(allocation)
        options = parse_options(raw, target)
    except (NoClaimYet, WorkloadInputError):
        return render(request, "400.html", status=400)
    response = HttpResponse(dump_documents(build_manifests(target, options)), content_type="application/yaml")
    response["Content-Disposition"] = f'attachment; filename="request-{allocation.pk}-{options.kind}.yaml"'
    return response
