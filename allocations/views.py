"""Browser pages for slice requests, approvals, quotas and (for platform admins) pools and quota changes.

Each view reads through a selector, or parses a form and calls one service (through tenants/service_calls.py); a
DomainError becomes a field error or a message, NotAllowed a 403, and another tenant's (or a missing) object a 404.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.contrib.auth.models import User
from django.core.exceptions import PermissionDenied
from django.core.paginator import Paginator
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.views.decorators.http import require_GET, require_http_methods, require_POST

from allocations import selectors, services
from allocations.admission.outcome_text import hold_began, hold_ended_text
from allocations.cluster.report import fleet_report
from allocations.forms import (
    DecisionForm,
    ExtendForm,
    NewRequestForm,
    PoolForm,
    PoolSelectorForm,
    PoolTolerationsForm,
    QuotaChangeForm,
    RejectionForm,
    SetQuotaForm,
)
from allocations.models import Allocation, ExtensionConsent, LeaseExtension, NodePool, Notification, QuotaChangeRequest
from allocations.overshare import over_share_of
from allocations.planning.answers import plannable_pools
from allocations.queue_page import queue_context
from allocations.services import reclaim
from allocations.services.booking_guard import ASK_HINT
from allocations.share_text import share_summary
from allocations.sharing.isolation import weaker_warning
from tenants import selectors as tenant_selectors
from tenants.errors import DomainError, IdempotencyConflict, NotAllowed
from tenants.forms import form_status
from tenants.models import Tenant
from tenants.selectors import managed_tenant_ids
from tenants.service_calls import run_action, submit_form
from tenants.views import redirect_back, signed_in_user, staff_required

Status = Allocation.Status
INBOX_PAGE_SIZE = 50
WAITING_PREFIX = "Waiting for a manager: "


def outcome_message(allocation: Allocation) -> str:
    """What a button or form did, said from the state the request is in now (read after the commit: the
    demo's embedded worker may already have moved it on), so the message never contradicts the badge."""
    n = f"Request #{allocation.pk}"
    reason = allocation.status_message.removeprefix(WAITING_PREFIX)
    texts: dict[str, str] = {
        Status.PENDING: f"{n} is waiting for a manager: {reason[:1].lower()}{reason[1:]}",
        Status.APPROVED: f"{n} is approved; the slices are being set up.",
        Status.PROVISIONING: f"{n} is approved; the cluster is setting up the slices.",
        Status.ACTIVE: f"{n} is active: its slices are ready to use.",
        Status.RELEASING: f"{n} is releasing its slices.",
        Status.RELEASED: f"{n} is released: its slices are gone.",
        Status.WITHDRAWN: f"{n} is withdrawn.",
        Status.REJECTED: f"{n} is rejected.",
        Status.EXPIRED: f"{n} has expired: its lease ended.",
        Status.FAILED: f"{n} failed: {allocation.status_message}",
        Status.QUEUED: f"{n} is approved and waits in the pool's queue for room.",
    }
    return texts.get(allocation.status, f"{n} is {allocation.get_status_display().lower()}.")


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
            done = submit_form(
                form,
                lambda: services.request_allocation(
                    tenant_id=data["tenant"].pk,
                    pool_id=data["pool"].pk,
                    profile=data["profile"] or "",
                    count=data["count"],
                    lease_hours=data["lease_hours"],
                    purpose=data["purpose"],
                    memory_mib=form.memory_mib(),
                    thread_percentage=data.get("thread_percentage"),
                    movable=data.get("movable"),
                    namespace=data.get("namespace") or None,
                    actor=user,
                    idempotency_key=key[:128],
                ),
            )
        except IdempotencyConflict:
            form.add_error(None, "This form was already submitted with other values. Reload the page to start anew.")
            key = uuid.uuid4().hex
            done = None
        if done is not None:
            allocation, created = done
            allocation.refresh_from_db()
            if not created:
                messages.info(request, f"Request #{allocation.pk} was already submitted; here it is.")
            elif allocation.status == Status.PENDING:
                messages.info(request, outcome_message(allocation))
            else:
                messages.success(request, outcome_message(allocation))
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
            # Without script every weaker pool's warning shows; the script keeps the chosen pool's.
            "shared_pools": [{"name": p.name, "warning": weaker_warning(p.kind)} for p in pools if p.is_shared],
        },
        status=form_status(form),
    )


@login_required
@require_GET
def request_detail(request: HttpRequest, allocation_id: int) -> HttpResponse:
    user = signed_in_user(request)
    allocation = _allocation_or_404(user, allocation_id)
    timeline = selectors.allocation_timeline(allocation)
    return render(
        request,
        "allocations/request_detail.html",
        {
            "allocation": allocation,
            "hold_ended": hold_ended_text(allocation, began=hold_began(timeline)),  # issue 14
            "namespace": allocation.namespace,
            "gpu_equivalents": selectors.gpu_equivalents_of(allocation),
            "placements": selectors.placements_of(allocation),
            "share": share_summary(allocation),
            "over_share": over_share_of(allocation),
            "timeline": timeline,
            "actions": selectors.allocation_actions(user, allocation),
            "used": selectors.allocation_used(allocation),
            "extend_form": ExtendForm(),
            "queue": queue_context(user, allocation),
        },
    )


def _after_transition(
    request: HttpRequest,
    allocation: Allocation,
    transition: Callable[[], Allocation],
    done: Callable[[Allocation], str] = outcome_message,
) -> HttpResponse:
    """Run a button's service call; say how it went in a message (from the request as it is after the
    commit), then go back where the button was."""
    if run_action(request, transition, about=f"Request #{allocation.pk}: ") is not None:
        allocation.refresh_from_db()
        messages.success(request, done(allocation))
    return redirect_back(request, fallback=reverse("request-detail", args=[allocation.pk]))


@login_required
@require_POST
def request_release(request: HttpRequest, allocation_id: int) -> HttpResponse:
    user = signed_in_user(request)
    allocation = _allocation_or_404(user, allocation_id)
    return _after_transition(
        request, allocation, lambda: services.release_allocation(allocation_id=allocation.pk, actor=user)
    )


@login_required
@require_POST
def request_retry(request: HttpRequest, allocation_id: int) -> HttpResponse:
    """Platform admins: "Retry its work" on a request whose task is overdue (allocations/services/retry.py)."""
    user = signed_in_user(request)
    allocation = _allocation_or_404(user, allocation_id)
    return _after_transition(
        request,
        allocation,
        lambda: services.retry_allocation_work(allocation_id=allocation.pk, actor=user),
        lambda retried: f"Request #{retried.pk}: its work was sent to a worker again.",
    )


@login_required
@require_POST
def request_keep(request: HttpRequest, allocation_id: int) -> HttpResponse:
    """ "Keep it" on an idle request's banner (allocations/services/reclaim.py)."""
    user = signed_in_user(request)
    allocation = _allocation_or_404(user, allocation_id)
    return _after_transition(
        request,
        allocation,
        lambda: reclaim.keep_idle_allocation(allocation_id=allocation.pk, actor=user),
        lambda kept: (
            f"Request #{kept.pk} is kept: it is not flagged idle again before "
            f"{kept.idle_snoozed_until:%Y-%m-%d %H:%M} UTC."
        ),
    )


@login_required
@require_POST
def request_extend(request: HttpRequest, allocation_id: int) -> HttpResponse:
    user = signed_in_user(request)
    allocation = _allocation_or_404(user, allocation_id)
    form = ExtendForm(request.POST)
    hours = form.cleaned_data["hours"] if form.is_valid() else 0  # the service explains a bad value
    ask = bool(form.cleaned_data.get("ask_booking_owner")) if form.is_valid() else False
    try:
        extension = services.request_lease_extension(
            allocation_id=allocation.pk, hours=hours, actor=user, ask_booking_owner=ask
        )
    except NotAllowed as exc:
        raise PermissionDenied(exc.message) from exc
    except DomainError as exc:
        # The service names the API's field; here the way to ask is the form's box.
        said = exc.message.replace(ASK_HINT, "(tick “ask its owner to agree” and extend again)")
        messages.error(request, f"Request #{allocation.pk}: {said}")
    else:
        allocation.refresh_from_db()
        messages.success(request, extension_message(extension, allocation))
    return redirect_back(request, fallback=reverse("request-detail", args=[allocation.pk]))


def extension_message(extension: LeaseExtension, allocation: Allocation) -> str:
    n = f"request #{allocation.pk}"
    asked = [c.booking_id for c in extension.consents.all() if c.status == ExtensionConsent.Status.PENDING]
    if extension.status == LeaseExtension.Status.PENDING and asked:
        names = ", ".join(f"#{pk}" for pk in asked)
        return (
            f"Extending the lease of {n} by {extension.hours} h would use room booking {names} holds: its owner is "
            "asked to agree. You will be told of the answer."
        )
    if extension.status == LeaseExtension.Status.PENDING:
        return (
            f"Extending the lease of {n} by {extension.hours} h to {extension.lease_hours_after} h needs a "
            f"manager: past the {allocation.tenant.auto_approve_max_lease_hours} h that apply at once. "
            "The tenant's managers are notified."
        )
    until = f", until {allocation.lease_expires_at:%Y-%m-%d %H:%M} UTC" if allocation.lease_expires_at else ""
    return f"The lease of {n} is extended by {extension.hours} h to {allocation.lease_hours} h{until}."


@login_required
@require_POST
def request_approve(request: HttpRequest, allocation_id: int) -> HttpResponse:
    user = signed_in_user(request)
    allocation = _allocation_or_404(user, allocation_id)
    form = DecisionForm(request.POST)
    reason = form.cleaned_data["reason"] if form.is_valid() else ""
    return _after_transition(
        request, allocation, lambda: services.approve_allocation(allocation_id=allocation.pk, actor=user, reason=reason)
    )


@login_required
@require_POST
def request_reject(request: HttpRequest, allocation_id: int) -> HttpResponse:
    user = signed_in_user(request)
    allocation = _allocation_or_404(user, allocation_id)
    form = RejectionForm(request.POST)
    reason = form.cleaned_data["reason"] if form.is_valid() else ""  # the service asks for a reason
    return _after_transition(
        request, allocation, lambda: services.reject_allocation(allocation_id=allocation.pk, actor=user, reason=reason)
    )


def _extension_or_404(user: User, extension_id: int) -> LeaseExtension:
    try:
        return selectors.get_lease_extension_for_user(user, extension_id)
    except LeaseExtension.DoesNotExist as exc:
        raise Http404("No such lease extension.") from exc


def _after_extension_decision(
    request: HttpRequest, extension: LeaseExtension, decide: Callable[[], LeaseExtension]
) -> HttpResponse:
    allocation = extension.allocation
    decided = run_action(request, decide, about=f"Extending request #{allocation.pk}: ")
    if decided is not None:
        extension = decided
        allocation.refresh_from_db()
        if extension.status == LeaseExtension.Status.APPROVED:
            messages.success(request, extension_message(extension, allocation))
        else:
            messages.success(
                request, f"Extending the lease of request #{allocation.pk} by {extension.hours} h is rejected."
            )
    return redirect_back(request, fallback=reverse("request-detail", args=[allocation.pk]))


@login_required
@require_POST
def extension_approve(request: HttpRequest, extension_id: int) -> HttpResponse:
    user = signed_in_user(request)
    extension = _extension_or_404(user, extension_id)
    form = DecisionForm(request.POST)
    reason = form.cleaned_data["reason"] if form.is_valid() else ""
    return _after_extension_decision(
        request,
        extension,
        lambda: services.approve_lease_extension(extension_id=extension.pk, actor=user, reason=reason),
    )


@login_required
@require_POST
def extension_reject(request: HttpRequest, extension_id: int) -> HttpResponse:
    user = signed_in_user(request)
    extension = _extension_or_404(user, extension_id)
    form = RejectionForm(request.POST)
    reason = form.cleaned_data["reason"] if form.is_valid() else ""  # the service asks for a reason
    return _after_extension_decision(
        request,
        extension,
        lambda: services.reject_lease_extension(extension_id=extension.pk, actor=user, reason=reason),
    )


@login_required
@require_GET
def approvals(request: HttpRequest) -> HttpResponse:
    """Pending requests and lease extensions of the tenants the user manages; each request with its cost
    against the remaining quota."""
    user = signed_in_user(request)
    if not managed_tenant_ids(user):
        raise PermissionDenied("Only tenant managers approve requests.")
    return render(
        request,
        "allocations/approvals.html",
        {
            "rows": selectors.pending_approvals_with_balances(user),
            "extensions": selectors.pending_extensions_for_manager(user),
        },
    )


# --- Inbox --------------------------------------------------------------------------------------------


@login_required
@require_GET
def inbox(request: HttpRequest) -> HttpResponse:
    """The user's own notifications, newest first, fifty to a page."""
    user = signed_in_user(request)
    page = Paginator(selectors.notifications_for_user(user), INBOX_PAGE_SIZE).get_page(request.GET.get("page"))
    return render(request, "allocations/inbox.html", {"page": page})


@login_required
@require_POST
def inbox_read(request: HttpRequest, notification_id: int) -> HttpResponse:
    """Mark one notification read (again is fine); someone else's is a 404."""
    user = signed_in_user(request)
    try:
        services.mark_notification_read(notification_id=notification_id, actor=user)
    except Notification.DoesNotExist as exc:
        raise Http404("No such notification.") from exc
    return redirect_back(request, fallback=reverse("inbox"))


@login_required
@require_POST
def inbox_read_all(request: HttpRequest) -> HttpResponse:
    user = signed_in_user(request)
    marked = services.mark_all_notifications_read(actor=user)
    messages.success(
        request,
        f"{marked} notification{'s' if marked != 1 else ''} marked as read." if marked else "Nothing was unread.",
    )
    return redirect_back(request, fallback=reverse("inbox"))


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
            sent = submit_form(
                form,
                lambda: services.request_quota_change(
                    tenant_id=data["tenant"].pk,
                    pool_id=data["pool"].pk,
                    compute_slices_limit=data["compute_slices_limit"],
                    memory_slices_limit=data["memory_slices_limit"],
                    profile_caps=data["profile_caps"],
                    justification=data["justification"],
                    actor=user,
                ),
            )
            if sent is not None:
                change, _ = sent
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
            "idle_tenants": tenant_selectors.tenants_for_user(user),
            "what_if_pools": plannable_pools(user),
        },
        status=form_status(form),
    )


# --- Admin: pools, quotas, quota changes --------------------------------------------------------------


@login_required
@staff_required
@require_http_methods(["GET", "POST"])
def manage_pools(request: HttpRequest) -> HttpResponse:
    """Every pool; create one, or (?pool=<id>) edit what a pool's holder pods tolerate."""
    user = signed_in_user(request)
    editing = request.method == "POST" and request.POST.get("action") == "tolerations"
    form = PoolForm(
        request.POST if request.method == "POST" and not editing else None, models=selectors.gpu_model_choices()
    )
    tolerations_form, tolerations_pool = _pool_tolerations_form(request, editing)
    if editing and tolerations_form is not None and tolerations_form.is_valid():
        pool = tolerations_form.cleaned_data["pool"]
        updated = submit_form(
            tolerations_form,
            lambda: services.update_node_pool(
                pool_id=pool.pk, tolerations=tolerations_form.cleaned_data["tolerations"], actor=user
            ),
        )
        if updated is not None:
            messages.success(request, f"The holder pods of {pool.name} now tolerate what is listed for it.")
            return redirect("manage-pools")
    if request.method == "POST" and not editing and form.is_valid():
        data = form.cleaned_data
        new_pool = submit_form(
            form,
            lambda: services.create_node_pool(
                name=data["name"],
                slug=data["slug"],
                gpu_model=data["gpu_model"],
                profiles=form.chosen_profiles(),
                description=data["description"],
                # A post without the field (an older form) keeps the default rather than tolerating nothing.
                tolerations=data["tolerations"] if "tolerations" in request.POST else None,
                node_selector=data["node_selector"],
                mig_mode=data["mig_mode"] or NodePool.MigMode.DYNAMIC,
                kind=data["kind"] or NodePool.Kind.MIG,
                sharing_interval=data["sharing_interval"] or NodePool.SharingInterval.DEFAULT,
                actor=user,
            ),
        )
        if new_pool is not None:
            created = (
                f"{new_pool.get_kind_display().lower()} shares of whole {new_pool.gpu_model} GPUs"
                if new_pool.is_shared
                else f"{len(new_pool.profiles)} profiles"
            )
            messages.success(request, f"Pool {new_pool.name} is created with {created}.")
            return redirect("manage-pools")
    return _pools_page(request, form, tolerations=(tolerations_form, tolerations_pool))


def _pools_page(
    request: HttpRequest,
    form: PoolForm,
    selector_form: tuple[int, PoolSelectorForm] | None = None,
    tolerations: tuple[PoolTolerationsForm | None, NodePool | None] = (None, None),
) -> HttpResponse:
    pools = list(selectors.pools_overview())
    forms = {
        pool.pk: PoolSelectorForm(
            initial={"node_selector": pool.node_selector, "mig_mode": pool.mig_mode}, prefix=f"pool-{pool.pk}"
        )
        for pool in pools
    }
    if selector_form is not None:
        forms[selector_form[0]] = selector_form[1]
    return render(
        request,
        "allocations/manage_pools.html",
        {
            "form": form,
            "tolerations_form": tolerations[0],
            "tolerations_pool": tolerations[1],
            "pools": [(pool, forms[pool.pk]) for pool in pools],
        },
        status=form_status(form, tolerations[0], selector_form[1] if selector_form else None),
    )


def _pool_tolerations_form(request: HttpRequest, editing: bool) -> tuple[PoolTolerationsForm | None, NodePool | None]:
    """The bound edit form of a POST, or the form pre-filled for ?pool=<id>; and the pool it edits."""
    pool_id = (request.POST if editing else request.GET).get("pool", "")
    # isascii: str.isdigit also takes "²", which int() refuses (a 500 from a hand-edited link).
    pool = NodePool.objects.filter(pk=int(pool_id)).first() if pool_id.isascii() and pool_id.isdigit() else None
    if editing:
        return PoolTolerationsForm(request.POST), pool
    if pool is None:
        return None, None
    return PoolTolerationsForm(initial={"pool": pool.pk, "tolerations": pool.tolerations}), pool


@login_required
@staff_required
@require_GET
def manage_fleet(request: HttpRequest) -> HttpResponse:
    """What fleet discovery found (allocations/cluster/report.py)."""
    return render(request, "allocations/manage_fleet.html", {"report": fleet_report()})


@login_required
@staff_required
@require_POST
def manage_pool_selector(request: HttpRequest, pool_id: int) -> HttpResponse:
    """Change a pool's node selector; matching discovered nodes join (and others leave) at once."""
    user = signed_in_user(request)
    pool = NodePool.objects.filter(pk=pool_id).first()
    if pool is None:
        raise Http404("No such pool.")
    form = PoolSelectorForm(request.POST, prefix=f"pool-{pool.pk}")
    mode_before = pool.mig_mode
    if form.is_valid():
        updated = submit_form(
            form,
            lambda: services.update_node_pool(
                pool_id=pool.pk,
                node_selector=form.cleaned_data["node_selector"],
                # An older form without the field leaves the mode as it is.
                mig_mode=form.cleaned_data["mig_mode"] or None,
                actor=user,
            ),
        )
        if updated is not None:
            joined = updated.nodes.count()
            what = f"“{updated.node_selector}”" if updated.node_selector else "none (nodes registered by hand only)"
            nodes = "1 node is" if joined == 1 else f"{joined} nodes are"
            mode = f" MIG mode: {updated.get_mig_mode_display()}." if updated.mig_mode != mode_before else ""
            messages.success(request, f"The node selector of {updated.name} is {what}; {nodes} in the pool.{mode}")
            return redirect("manage-pools")
    return _pools_page(request, PoolForm(models=selectors.gpu_model_choices()), (pool.pk, form))


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
            quota = submit_form(
                form,
                lambda: services.set_tenant_quota(
                    tenant_id=data["tenant"].pk,
                    pool_id=data["pool"].pk,
                    compute_slices_limit=data["compute_slices_limit"],
                    memory_slices_limit=data["memory_slices_limit"],
                    profile_caps=data["profile_caps"],
                    actor=user,
                ),
            )
            if quota is not None:
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
    return render(
        request, "allocations/manage_quotas.html", {"form": form, "balances": balances}, status=form_status(form)
    )


@login_required
@staff_required
@require_GET
def manage_quota_changes(request: HttpRequest) -> HttpResponse:
    """Pending changes next to the current limits and usage (with a warning for a cut below usage), then
    the decided ones."""
    user = signed_in_user(request)
    changes = selectors.quota_changes_for_user(user)
    return render(
        request,
        "allocations/manage_quota_changes.html",
        {
            "reviews": selectors.quota_change_reviews(user),
            "decided": [c for c in changes if c.status != QuotaChangeRequest.Status.PENDING],
        },
    )


def _quota_change_or_404(user: User, change_id: int) -> QuotaChangeRequest:
    change = QuotaChangeRequest.objects.for_user(user).filter(pk=change_id).first()
    if change is None:
        raise Http404("No such quota change.")
    return change


def _after_decision(request: HttpRequest, change_id: int, decide: Callable[[], QuotaChangeRequest]) -> HttpResponse:
    change = run_action(request, decide, about=f"Quota change #{change_id}: ")
    if change is not None:
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
