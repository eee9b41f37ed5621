"""The queue on the request page (issue 15): position, estimated start and, for managers, the priority form."""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404
from django.urls import reverse
from django.views.decorators.http import require_POST

from allocations.admission.hold import is_held
from allocations.models import Allocation
from allocations.queue_state import queue_entry_of
from allocations.services.queue_priority import PRIORITY_MAX, PRIORITY_MIN, PRIORITY_STATES, set_allocation_priority
from tenants.selectors import can_manage_tenant
from tenants.service_calls import run_action
from tenants.views import redirect_back, signed_in_user


class PriorityForm(forms.Form):
    priority = forms.IntegerField(min_value=PRIORITY_MIN, max_value=PRIORITY_MAX, label="Priority in the tenant")


def queue_context(user: Any, allocation: Allocation) -> dict[str, Any]:
    """What the request page's queue card shows: nothing for a request that is neither queued nor reorderable."""
    found = queue_entry_of(allocation)
    can_set = allocation.status in PRIORITY_STATES and can_manage_tenant(user, allocation.tenant_id)
    return {
        "entry": found[0] if found else None,
        "length": found[1] if found else 0,
        "priority_form": PriorityForm(initial={"priority": allocation.priority}) if can_set else None,
        # Held by the pool's admission (issue 14): placed at the latest then.
        "held_until": allocation.held_until if is_held(allocation) else None,
    }


@login_required
@require_POST
def request_priority(request: HttpRequest, allocation_id: int) -> HttpResponse:
    """The priority form: a bad number is said in a message, never a 500; members get 403, strangers 404."""
    user = signed_in_user(request)
    allocation = get_object_or_404(Allocation.objects.for_user(user), pk=allocation_id)
    form = PriorityForm(request.POST)
    if not form.is_valid():
        errors = [str(e) for e in form.errors.get("priority", ["Bad value."])]
        messages.error(request, f"Request #{allocation.pk}: {' '.join(errors)}")
    else:
        priority = form.cleaned_data["priority"]
        done = run_action(
            request,
            lambda: set_allocation_priority(allocation_id=allocation.pk, priority=priority, actor=user),
            about=f"Request #{allocation.pk}: ",
        )
        if done is not None:
            messages.success(request, f"Request #{allocation.pk} now has priority {form.cleaned_data['priority']}.")
    return redirect_back(request, fallback=reverse("request-detail", args=[allocation.pk]))
