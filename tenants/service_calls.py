"""A browser page's call of one service, and what the page shows when the service refuses.

Every page answers a refusal the same way, so the views say it once here: bad input (InvalidInput) goes next to
the form's fields and the page is drawn again (a 400 through `form_status`), NotAllowed is a 403 (the user sees the
object but may not do this to it), and a button's other refusals (a DomainError: a state that forbids it, a quota)
become a message on the page the button was on.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

from django import forms
from django.contrib import messages
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest

from tenants.errors import DomainError, InvalidInput, NotAllowed
from tenants.forms import add_service_errors

T = TypeVar("T")


def submit_form(form: forms.BaseForm, call: Callable[[], T], *, aliases: dict[str, str] | None = None) -> T | None:
    """What `call` (a service that returns an object, never None) returned; None when it refused the input, whose
    errors are then on `form` (`aliases` as in `add_service_errors`). NotAllowed raises PermissionDenied (a 403)."""
    try:
        return call()
    except InvalidInput as exc:
        add_service_errors(form, exc, aliases)
        return None
    except NotAllowed as exc:
        raise PermissionDenied(exc.message) from exc


def run_action(request: HttpRequest, call: Callable[[], T], *, about: str = "") -> T | None:
    """What a button's `call` (a service that returns an object, never None) returned; None when it refused, said
    in an error message that starts with `about` (e.g. "Request #7: "). NotAllowed raises PermissionDenied (a 403)."""
    try:
        return call()
    except NotAllowed as exc:
        raise PermissionDenied(exc.message) from exc
    except DomainError as exc:
        messages.error(request, f"{about}{exc.message}")
        return None
