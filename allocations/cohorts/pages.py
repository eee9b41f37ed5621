"""The platform admin's cohort page of a pool, /manage/pools/<id>/cohorts/ (issue 15): the pool's cohorts with each
member's guarantee, use, borrowed part and what it could lend now; forms to create, rename and delete cohorts and
to put a tenant's quota into one with its limits. Every change goes through allocations/cohorts/config.py."""

from __future__ import annotations

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_http_methods, require_POST

from allocations.cohorts.config import create_cohort, delete_cohort, set_quota_cohort, update_cohort
from allocations.cohorts.forms import CohortForm, MembershipForm
from allocations.cohorts.overview import cohort_views
from allocations.models import Cohort, NodePool, Quota
from tenants.errors import DomainError, InvalidInput, NotAllowed
from tenants.forms import add_service_errors
from tenants.views import signed_in_user, staff_required


def _pool_or_404(pool_id: int) -> NodePool:
    pool = NodePool.objects.filter(pk=pool_id).first()
    if pool is None:
        raise Http404("No such pool.")
    return pool


def _cohort_or_404(cohort_id: int) -> Cohort:
    cohort = Cohort.objects.filter(pk=cohort_id).select_related("pool").first()
    if cohort is None:
        raise Http404("No such cohort.")
    return cohort


@login_required
@staff_required
@require_http_methods(["GET", "POST"])
def pool_cohorts(request: HttpRequest, pool_id: int) -> HttpResponse:
    """GET: the page. POST with `form=create`: a new cohort; with `form=member`: a tenant joins, changes or leaves."""
    user = signed_in_user(request)
    pool = _pool_or_404(pool_id)
    cohorts = Cohort.objects.filter(pool=pool).select_related("pool")
    # Platform admins only (staff_required): every tenant's quota of the pool is theirs to place.
    quotas = Quota.objects.filter(pool=pool).select_related("tenant", "cohort").order_by("tenant__name")
    create_form = CohortForm(prefix="create")
    member_form = MembershipForm(prefix="member", quotas=quotas, cohorts=cohorts)
    if request.method == "POST":
        which = request.POST.get("form")
        try:
            if which == "create":
                create_form = CohortForm(request.POST, prefix="create")
                if create_form.is_valid():
                    cohort = create_cohort(pool_id=pool.pk, actor=user, **create_form.cleaned_data)
                    messages.success(request, f"Cohort {cohort.name} is created in {pool.name}.")
                    return redirect("manage-pool-cohorts", pool_id=pool.pk)
            elif which == "member":
                member_form = MembershipForm(request.POST, prefix="member", quotas=quotas, cohorts=cohorts)
                if member_form.is_valid():
                    chosen = member_form.cleaned_data["cohort"]
                    quota = set_quota_cohort(
                        quota_id=member_form.cleaned_data["quota"].pk,
                        cohort_id=chosen.pk if chosen is not None else None,
                        limits=member_form.limits(),
                        actor=user,
                    )
                    where = f"joined cohort {chosen.name}" if chosen is not None else "is in no cohort"
                    messages.success(request, f"{quota.tenant.name} {where} in {pool.name}.")
                    return redirect("manage-pool-cohorts", pool_id=pool.pk)
            else:
                messages.error(request, "Unknown form; reload the page and try again.")
                return redirect("manage-pool-cohorts", pool_id=pool.pk)
        except InvalidInput as exc:
            add_service_errors(create_form if which == "create" else member_form, exc)
        except NotAllowed as exc:
            raise PermissionDenied(exc.message) from exc
        except DomainError as exc:  # e.g. a member holding borrowed slices cannot change cohort (409)
            messages.error(request, exc.message)
            return redirect("manage-pool-cohorts", pool_id=pool.pk)
    status = 400 if request.method == "POST" else 200
    return render(
        request,
        "allocations/manage_cohorts.html",
        {
            "pool": pool,
            "views": cohort_views(cohorts, user),
            "create_form": create_form,
            "member_form": member_form,
        },
        status=status,
    )


@login_required
@staff_required
@require_POST
def cohort_edit(request: HttpRequest, cohort_id: int) -> HttpResponse:
    """Rename a cohort or change its grace (POST from the cohort's row); errors come back as messages."""
    user = signed_in_user(request)
    cohort = _cohort_or_404(cohort_id)
    form = CohortForm(request.POST, prefix=f"cohort-{cohort.pk}")
    if not form.is_valid():
        errors = "; ".join(
            f"{form.fields[name].label or name}: {' '.join(str(m) for m in messages_)}"
            for name, messages_ in form.errors.items()
        )
        messages.error(request, f"Cohort {cohort.name} is unchanged. {errors}")
        return redirect("manage-pool-cohorts", pool_id=cohort.pool_id)
    try:
        cohort = update_cohort(cohort_id=cohort.pk, actor=user, **form.cleaned_data)
    except DomainError as exc:
        messages.error(request, f"Cohort {cohort.name} is unchanged: {exc.message}")
    else:
        messages.success(request, f"Cohort {cohort.name} is saved.")
    return redirect("manage-pool-cohorts", pool_id=cohort.pool_id)


@login_required
@staff_required
@require_POST
def cohort_delete(request: HttpRequest, cohort_id: int) -> HttpResponse:
    user = signed_in_user(request)
    cohort = _cohort_or_404(cohort_id)
    try:
        delete_cohort(cohort_id=cohort.pk, actor=user)
    except DomainError as exc:
        messages.error(request, exc.message)
    else:
        messages.success(request, f"Cohort {cohort.name} is deleted; its members lend and borrow no more.")
    return redirect("manage-pool-cohorts", pool_id=cohort.pool_id)
