"""Browser pages for slice requests, approvals, quotas and (for platform admins) pools and quota changes.

Each view reads through a selector, or parses a form and calls one service; a DomainError becomes a
field error or a message, NotAllowed a 403, and another tenant's (or a missing) object a 404.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.contrib.auth.models import User
from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.views.decorators.http import require_GET, require_http_methods, require_POST

from allocations import selectors, services
from allocations.forms import (
    DecisionForm,
    ExtendForm,
    NewRequestForm,
    PoolForm,
    QuotaChangeForm,
    RejectionForm,
    SetQuotaForm,
)
from allocations.models import Allocation, NodePool, QuotaChangeRequest
from tenants import selectors as tenant_selectors
from tenants.errors import DomainError, IdempotencyConflict, InvalidInput, NotAllowed
from tenants.forms import add_service_errors
from tenants.models import Tenant
from tenants.selectors import managed_tenant_ids
from tenants.views import redirect_back, signed_in_user, staff_required

Status = Allocation.Status


def _allocation_or_404(user: User, allocation_id: int) -> Allocation:
    try:
        return selectors.get_allocation_for_user(user, allocation_id)
    except Allocation.DoesNotExist as exc:
        raise Http404("No such request.") from exc


# --- Requests -----------------------------------------------------------------------------------------


@login_required
@require_GET
def home(request: HttpRequest) -> HttpResponse:
    """My tenants' requests, filterable by status, and our quota balances."""
    user = signed_in_user(request)
    status = request.GET.get("status", "")
    if status not in Status.values:
        status = ""
    return render(
        request,
        "allocations/home.html",
        {
            "allocations": selectors.requests_for_user(user, status=status or None),
            "status_filters": selectors.status_filters_for_user(user),
            "current_status": status,
            "balances": selectors.balances_for_user(user),
        },
    )


@login_required
@require_http_methods(["GET", "POST"])
def request_new(request: HttpRequest) -> HttpResponse:
    user = signed_in_user(request)
    tenants = selectors.request_form_tenants(user)
    pools = selectors.request_form_pools(user)
    form = NewRequestForm(request.POST or None, tenants=tenants, pools=pools)
    # A key per rendered form: a double-clicked submit creates one request, not two.
    key = request.POST.get("idempotency_key") or uuid.uuid4().hex
    if request.method == "POST" and form.is_valid():
        data = form.cleaned_data
        try:
            allocation, created = services.request_allocation(
                tenant_id=data["tenant"].pk,
                pool_id=data["pool"].pk,
                profile=data["profile"],
                count=data["count"],
                lease_hours=data["lease_hours"],
                purpose=data["purpose"],
                actor=user,
                idempotency_key=key[:128],
            )
        except InvalidInput as exc:
            add_service_errors(form, exc)
        except IdempotencyConflict:
            form.add_error(None, "This form was already submitted with other values. Reload the page to start anew.")
            key = uuid.uuid4().hex
        except NotAllowed as exc:
            raise PermissionDenied(exc.message) from exc
        else:
            if not created:
                messages.info(request, f"Request #{allocation.pk} was already submitted; here it is.")
            elif allocation.status == Status.APPROVED:
                messages.success(request, f"Request #{allocation.pk} is approved; the slices are being set up.")
            else:
                messages.info(
                    request, f"Request #{allocation.pk} is waiting for a manager. {allocation.status_message}"
                )
            return redirect("request-detail", allocation_id=allocation.pk)
    return render(
        request,
        "allocations/request_new.html",
        {
            "form": form,
            "form_data": selectors.request_form_data(user),
            "idempotency_key": key,
            "has_tenants": tenants.exists(),
            "has_pools": pools.exists(),
        },
    )


@login_required
@require_GET
def request_detail(request: HttpRequest, allocation_id: int) -> HttpResponse:
    user = signed_in_user(request)
    allocation = _allocation_or_404(user, allocation_id)
    return render(
        request,
        "allocations/request_detail.html",
        {
            "allocation": allocation,
            "gpu_equivalents": selectors.gpu_equivalents_of(allocation),
            "placements": selectors.placements_of(allocation),
            "timeline": selectors.allocation_timeline(allocation),
            "actions": selectors.allocation_actions(user, allocation),
            "extend_form": ExtendForm(),
        },
    )


def _after_transition(
    request: HttpRequest,
    allocation: Allocation,
    transition: Callable[[], Allocation],
    done: Callable[[Allocation], str],
) -> HttpResponse:
    """Run a button's service call; say how it went in a message, then go back where the button was."""
    try:
        allocation = transition()
    except NotAllowed as exc:
        raise PermissionDenied(exc.message) from exc
    except DomainError as exc:
        messages.error(request, f"Request #{allocation.pk}: {exc.message}")
    else:
        messages.success(request, done(allocation))
    return redirect_back(request, fallback=reverse("request-detail", args=[allocation.pk]))


@login_required
@require_POST
def request_release(request: HttpRequest, allocation_id: int) -> HttpResponse:
    user = signed_in_user(request)
    allocation = _allocation_or_404(user, allocation_id)
    return _after_transition(
        request,
        allocation,
        lambda: services.release_allocation(allocation_id=allocation.pk, actor=user),
        lambda a: f"Request #{a.pk} is {a.get_status_display().lower()}.",
    )


@login_required
@require_POST
def request_extend(request: HttpRequest, allocation_id: int) -> HttpResponse:
    user = signed_in_user(request)
    allocation = _allocation_or_404(user, allocation_id)
    form = ExtendForm(request.POST)
    hours = form.cleaned_data["hours"] if form.is_valid() else 0  # the service explains a bad value
    return _after_transition(
        request,
        allocation,
        lambda: services.extend_allocation_lease(allocation_id=allocation.pk, hours=hours, actor=user),
        lambda a: f"The lease of request #{a.pk} now runs {a.lease_hours} hours in all.",
    )


@login_required
@require_POST
def request_approve(request: HttpRequest, allocation_id: int) -> HttpResponse:
    user = signed_in_user(request)
    allocation = _allocation_or_404(user, allocation_id)
    form = DecisionForm(request.POST)
    reason = form.cleaned_data["reason"] if form.is_valid() else ""
    return _after_transition(
        request,
        allocation,
        lambda: services.approve_allocation(allocation_id=allocation.pk, actor=user, reason=reason),
        lambda a: f"Request #{a.pk} is approved; the slices are being set up.",
    )


@login_required
@require_POST
def request_reject(request: HttpRequest, allocation_id: int) -> HttpResponse:
    user = signed_in_user(request)
    allocation = _allocation_or_404(user, allocation_id)
    form = RejectionForm(request.POST)
    reason = form.cleaned_data["reason"] if form.is_valid() else ""  # the service asks for a reason
    return _after_transition(
        request,
        allocation,
        lambda: services.reject_allocation(allocation_id=allocation.pk, actor=user, reason=reason),
        lambda a: f"Request #{a.pk} is rejected.",
    )


@login_required
@require_GET
def approvals(request: HttpRequest) -> HttpResponse:
    """Pending requests of the tenants the user manages, each with its cost against remaining quota."""
    user = signed_in_user(request)
    if not managed_tenant_ids(user):
        raise PermissionDenied("Only tenant managers approve requests.")
    return render(request, "allocations/approvals.html", {"rows": selectors.pending_approvals_with_balances(user)})


# --- Quotas -------------------------------------------------------------------------------------------


@login_required
@require_http_methods(["GET", "POST"])
def quotas(request: HttpRequest) -> HttpResponse:
    """Balances per tenant and pool; managers ask for quota changes here."""
    user = signed_in_user(request)
    managed = tenant_selectors.managed_tenants(user)
    pools = NodePool.objects.order_by("name")
    if request.method == "POST":
        # Any visible tenant parses; the service says 403 when the user does not manage it.
        form = QuotaChangeForm(request.POST, tenants=selectors.request_form_tenants(user), pools=pools)
        if form.is_valid():
            data = form.cleaned_data
            try:
                change, _ = services.request_quota_change(
                    tenant_id=data["tenant"].pk,
                    pool_id=data["pool"].pk,
                    compute_slices_limit=data["compute_slices_limit"],
                    memory_slices_limit=data["memory_slices_limit"],
                    profile_caps=data["profile_caps"],
                    justification=data["justification"],
                    actor=user,
                )
            except InvalidInput as exc:
                add_service_errors(form, exc)
            except NotAllowed as exc:
                raise PermissionDenied(exc.message) from exc
            else:
                messages.success(
                    request, f"Quota change #{change.pk} for {change.tenant.name} is sent to the platform admins."
                )
                return redirect("quotas")
    else:
        form = QuotaChangeForm(tenants=managed, pools=pools)
    return render(
        request,
        "allocations/quotas.html",
        {
            "balances": selectors.balances_for_user(user),
            "changes": selectors.quota_changes_for_user(user),
            "form": form if managed.exists() else None,
        },
    )


# --- Admin: pools, quotas, quota changes --------------------------------------------------------------


@login_required
@staff_required
@require_http_methods(["GET", "POST"])
def manage_pools(request: HttpRequest) -> HttpResponse:
    user = signed_in_user(request)
    form = PoolForm(request.POST or None, models=selectors.gpu_model_choices())
    if request.method == "POST" and form.is_valid():
        data = form.cleaned_data
        try:
            pool = services.create_node_pool(
                name=data["name"],
                slug=data["slug"],
                gpu_model=data["gpu_model"],
                profiles=form.chosen_profiles(),
                description=data["description"],
                actor=user,
            )
        except InvalidInput as exc:
            add_service_errors(form, exc)
        except NotAllowed as exc:
            raise PermissionDenied(exc.message) from exc
        else:
            messages.success(request, f"Pool {pool.name} is created with {len(pool.profiles)} profiles.")
            return redirect("manage-pools")
    return render(request, "allocations/manage_pools.html", {"form": form, "pools": selectors.pools_overview()})


@login_required
@staff_required
@require_http_methods(["GET", "POST"])
def manage_quotas(request: HttpRequest) -> HttpResponse:
    """Every tenant's quota per pool; set limits (and per-profile caps) for a tenant in a pool."""
    user = signed_in_user(request)
    tenants = Tenant.objects.order_by("name")
    pools = NodePool.objects.order_by("name")
    balances = selectors.balances_for_user(user)
    if request.method == "POST":
        form = SetQuotaForm(request.POST, tenants=tenants, pools=pools)
        if form.is_valid():
            data = form.cleaned_data
            try:
                services.set_tenant_quota(
                    tenant_id=data["tenant"].pk,
                    pool_id=data["pool"].pk,
                    compute_slices_limit=data["compute_slices_limit"],
                    memory_slices_limit=data["memory_slices_limit"],
                    profile_caps=data["profile_caps"],
                    actor=user,
                )
            except InvalidInput as exc:
                add_service_errors(form, exc)
            except NotAllowed as exc:
                raise PermissionDenied(exc.message) from exc
            else:
                messages.success(request, f"The quota of {data['tenant'].name} in {data['pool'].name} is set.")
                return redirect("manage-quotas")
    else:
        # "Edit" links pre-fill the form from the balance they point at.
        chosen = next((b for b in balances if str(b.quota_id) == request.GET.get("quota")), None)
        initial = (
            {
                "tenant": chosen.tenant_id,
                "pool": chosen.pool_id,
                "compute_slices_limit": chosen.compute_limit,
                "memory_slices_limit": chosen.memory_limit,
                "profile_caps": chosen.profile_caps,
            }
            if chosen
            else {}
        )
        form = SetQuotaForm(initial=initial, tenants=tenants, pools=pools)
    return render(request, "allocations/manage_quotas.html", {"form": form, "balances": balances})


@login_required
@staff_required
@require_GET
def manage_quota_changes(request: HttpRequest) -> HttpResponse:
    user = signed_in_user(request)
    changes = selectors.quota_changes_for_user(user)
    return render(
        request,
        "allocations/manage_quota_changes.html",
        {
            "pending": [c for c in changes if c.status == QuotaChangeRequest.Status.PENDING],
            "decided": [c for c in changes if c.status != QuotaChangeRequest.Status.PENDING],
        },
    )


def _quota_change_or_404(user: User, change_id: int) -> QuotaChangeRequest:
    change = QuotaChangeRequest.objects.for_user(user).filter(pk=change_id).first()
    if change is None:
        raise Http404("No such quota change.")
    return change


def _after_decision(request: HttpRequest, change_id: int, decide: Callable[[], QuotaChangeRequest]) -> HttpResponse:
    try:
        change = decide()
    except NotAllowed as exc:
        raise PermissionDenied(exc.message) from exc
    except DomainError as exc:
        messages.error(request, f"Quota change #{change_id}: {exc.message}")
    else:
        messages.success(request, f"Quota change #{change.pk} is {change.get_status_display().lower()}.")
    return redirect("manage-quota-changes")


@login_required
@staff_required
@require_POST
def quota_change_approve(request: HttpRequest, change_id: int) -> HttpResponse:
    user = signed_in_user(request)
    change = _quota_change_or_404(user, change_id)
    form = DecisionForm(request.POST)
    reason = form.cleaned_data["reason"] if form.is_valid() else ""
    return _after_decision(
        request, change.pk, lambda: services.approve_quota_change(change_id=change.pk, actor=user, reason=reason)
    )


@login_required
@staff_required
@require_POST
def quota_change_reject(request: HttpRequest, change_id: int) -> HttpResponse:
    user = signed_in_user(request)
    change = _quota_change_or_404(user, change_id)
    form = RejectionForm(request.POST)
    reason = form.cleaned_data["reason"] if form.is_valid() else ""  # the service asks for a reason
    return _after_decision(
        request, change.pk, lambda: services.reject_quota_change(change_id=change.pk, actor=user, reason=reason)
    )
