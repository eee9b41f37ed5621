"""Booking pages (issue 15): the form, "my bookings" (with the manager's pending ones), and the admin's week
calendar per pool. Thin: read through booking_selectors, change through services/bookings.py."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import date
from typing import Generic, TypeVar

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.utils import timezone
from django.views.decorators.http import require_GET, require_http_methods, require_POST

from allocations import booking_selectors, selectors
from allocations.booking_forms import BookingForm
from allocations.models import Booking, ExtensionConsent
from allocations.services import bookings, extension_consents
from tenants.forms import form_status
from tenants.service_calls import run_action, submit_form
from tenants.views import signed_in_user, staff_required

T = TypeVar("T")


@login_required
@require_GET
def booking_list(request: HttpRequest) -> HttpResponse:
    user = signed_in_user(request)
    return render(
        request,
        "allocations/bookings.html",
        {
            "bookings": booking_selectors.bookings_for_user(user)[:200],
            "to_decide": booking_selectors.bookings_to_decide(user),
            "consents": booking_selectors.consents_to_decide(user),
        },
    )


@login_required
@require_http_methods(["GET", "POST"])
def booking_new(request: HttpRequest) -> HttpResponse:
    user = signed_in_user(request)
    tenants = selectors.request_form_tenants(user)
    pools = booking_selectors.booking_form_pools()
    form = BookingForm(request.POST or None, tenants=tenants, pools=pools)
    if request.method == "POST" and form.is_valid():
        data = form.cleaned_data
        booking = submit_form(
            form,
            lambda: bookings.request_booking(
                tenant_id=data["tenant"].pk,
                pool_id=data["pool"].pk,
                profile=data["profile"],
                count=data["count"],
                starts_at=data["starts_at"],
                ends_at=data["ends_at"],
                purpose=data["purpose"],
                actor=user,
            ),
        )
        if booking is not None:
            messages.success(request, f"Booking #{booking.pk}: {booking.status_message}")
            return redirect("bookings")
    return render(
        request,
        "allocations/booking_new.html",
        {"form": form, "has_tenants": tenants.exists(), "has_pools": pools.exists()},
        status=form_status(form),
    )


@dataclass(frozen=True)
class _Answer(Generic[T]):
    """A button on the bookings page that answers for one object: the service is called for an object of `model`
    the user sees (else a 404 saying `missing`) with the form's reason; a refusal becomes a message that starts
    with `about` (its {} the object's id), a success the message `said` makes of what the service returned."""

    model: type[Booking] | type[ExtensionConsent]
    id_name: str
    missing: str
    about: str
    said: Callable[[T], str]

    def press(self, request: HttpRequest, object_id: int, service: Callable[..., T]) -> HttpResponse:
        user = signed_in_user(request)
        if not self.model.objects.for_user(user).filter(pk=object_id).exists():
            raise Http404(self.missing)
        reason = request.POST.get("reason", "")
        done = run_action(
            request,
            lambda: service(**{self.id_name: object_id}, actor=user, reason=reason),
            about=self.about.format(object_id),
        )
        if done is not None:
            messages.success(request, self.said(done))
        return redirect("bookings")


_BOOKING = _Answer[Booking](
    Booking,
    "booking_id",
    missing="No such booking.",
    about="Booking #{}: ",
    said=lambda booking: f"Booking #{booking.pk} is {booking.get_status_display().lower()}.",
)


@login_required
@require_POST
def booking_approve(request: HttpRequest, booking_id: int) -> HttpResponse:
    return _BOOKING.press(request, booking_id, bookings.approve_booking)


@login_required
@require_POST
def booking_reject(request: HttpRequest, booking_id: int) -> HttpResponse:
    return _BOOKING.press(request, booking_id, bookings.reject_booking)


@login_required
@require_POST
def booking_cancel(request: HttpRequest, booking_id: int) -> HttpResponse:
    return _BOOKING.press(request, booking_id, bookings.cancel_booking)


@login_required
@staff_required
@require_GET
def booking_calendar(request: HttpRequest) -> HttpResponse:
    """A week of one pool's bookings (?pool=<id>&week=YYYY-MM-DD, any day of the week). Platform admins."""
    pools = list(booking_selectors.booking_form_pools())
    wanted = request.GET.get("pool", "")
    pool = next((p for p in pools if str(p.pk) == wanted), pools[0] if pools else None)
    try:
        day = date.fromisoformat(request.GET["week"]) if request.GET.get("week") else timezone.now().date()
    except ValueError:
        messages.error(request, "The week must be a date like 2026-12-07; showing this week.")
        day = timezone.now().date()
    week = booking_selectors.pool_week(pool, booking_selectors.monday_of(day)) if pool is not None else None
    return render(
        request,
        "allocations/booking_calendar.html",
        {"pools": pools, "pool": pool, "week": week},
    )


def _consent_said(consent: ExtensionConsent) -> str:
    verdict = "agreed to" if consent.status == ExtensionConsent.Status.AGREED else "refused"
    return f"You {verdict} the extension that would use booking #{consent.booking_id}'s room."


# A booking owner's answer to a lease extension that would take the booking's room.
_CONSENT = _Answer[ExtensionConsent](
    ExtensionConsent,
    "consent_id",
    missing="No such question.",
    about="Question #{} about a booking's room: ",
    said=_consent_said,
)


@login_required
@require_POST
def consent_agree(request: HttpRequest, consent_id: int) -> HttpResponse:
    return _CONSENT.press(request, consent_id, extension_consents.agree_to_extension)


@login_required
@require_POST
def consent_refuse(request: HttpRequest, consent_id: int) -> HttpResponse:
    return _CONSENT.press(request, consent_id, extension_consents.refuse_extension)
