"""The platform admin's admission page, /manage/pools/<id>/admission/ (issue 14): whether the pool holds requests
that would strand room, the longest hold, the requests it holds now, and how its recent holds ended (what the hold
policy prices the next hold of a profile by, admission/outcomes.py). Bad input is answered 400 with the
errors next to the fields; static and shared pools show why the setting does not apply."""

from __future__ import annotations

from django import forms
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.template.defaultfilters import floatformat
from django.views.decorators.http import require_http_methods

from allocations.admission.outcomes import Outcomes, recent_hold_outcomes
from allocations.admission.setting import MAX_HOLD_MINUTES_LIMIT
from allocations.mig.policies import HoldingFragmentationAware
from allocations.models import Allocation, NodePool
from allocations.services.pools import update_node_pool
from tenants.service_calls import submit_form
from tenants.views import signed_in_user, staff_required


class AdmissionForm(forms.Form):
    admission = forms.ChoiceField(
        choices=NodePool.Admission.choices,
        label="Admission",
        help_text="Hold: a request whose every placement would strand compute slices the pool's demand would use "
        "waits in the queue until a release makes a better place, at most the time below; then it is placed "
        "wherever it fits. Dynamic MIG pools only.",
    )
    max_hold_minutes = forms.IntegerField(
        min_value=1,
        max_value=MAX_HOLD_MINUTES_LIMIT,
        label="Longest hold (minutes)",
        help_text=f"1 to {MAX_HOLD_MINUTES_LIMIT}. Applies to requests held from now on.",
    )


@login_required
@staff_required
@require_http_methods(["GET", "POST"])
def pool_admission(request: HttpRequest, pool_id: int) -> HttpResponse:
    user = signed_in_user(request)
    pool = NodePool.objects.filter(pk=pool_id).first()
    if pool is None:
        raise Http404("No such pool.")
    initial = {"admission": pool.admission, "max_hold_minutes": pool.max_hold_minutes}
    form = AdmissionForm(request.POST if request.method == "POST" else None, initial=initial)
    if request.method == "POST" and form.is_valid():
        updated = submit_form(
            form,
            lambda: update_node_pool(
                pool_id=pool.pk,
                admission=form.cleaned_data["admission"],
                max_hold_minutes=form.cleaned_data["max_hold_minutes"],
                actor=user,
            ),
        )
        if updated is not None:
            if updated.holds_requests:
                said = f"holds requests that would strand room, at most {updated.max_hold_minutes} min"
            else:
                said = "places whatever fits"
            messages.success(request, f"{updated.name} now {said}.")
            return redirect("manage-pool-admission", pool_id=updated.pk)
    held = Allocation.objects.filter(pool=pool, held=True).select_related("tenant").order_by("held_until", "pk")
    return render(
        request,
        "allocations/manage_admission.html",
        {
            "pool": pool,
            "form": form,
            "held": held,
            "outcomes": outcome_rows(recent_hold_outcomes(pool)),
            "outcome_columns": OUTCOME_COLUMNS,
        },
        status=400 if request.method == "POST" else 200,
    )


#: The columns of the page's "How holds ended lately" table.
OUTCOME_COLUMNS = ("Profile", "Ended", "Placed after a release", "Placed at the deadline", "Lost", "Counted as lost")


def outcome_rows(outcomes: Outcomes) -> list[list[tuple[str, str]]]:
    """Per profile, how the pool's recent holds ended, as the hold policy weighs them (recent ones weigh more), and
    the share of them it counts as lost when it prices the next hold (`HoldingFragmentationAware.priced`: lost over
    ended plus its placed pseudo-outcome): the table's cells, as (column, text)."""
    prior = HoldingFragmentationAware.OUTCOME_PRIOR
    rows: list[list[tuple[str, str]]] = []
    for profile, (ended, lost, forced) in sorted(outcomes.items()):
        weights = (ended, max(0.0, ended - lost - forced), forced, lost)
        # Worded as the page always said them: Django's floatformat:1, and a whole percent rounded as widthratio.
        texts = (profile, *(floatformat(w, 1) for w in weights), f"{round(lost / (ended + prior) * 100)} %")
        rows.append(list(zip(OUTCOME_COLUMNS, texts, strict=True)))
    return rows
