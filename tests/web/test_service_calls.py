"""How a page shows a service's refusal (tenants/service_calls.py), the one place every form view and button goes
through: bad input on the form's fields, NotAllowed a 403, a button's other refusal a message. The pages themselves
are checked in tests/web/test_form_status.py and tests/web/test_pages.py; here the rules alone, without a database."""

from __future__ import annotations

import pytest
from django import forms
from django.contrib.messages import get_messages
from django.contrib.messages.storage.cookie import CookieStorage
from django.core.exceptions import PermissionDenied
from django.test import RequestFactory

from tenants.errors import DomainError, InvalidInput, NotAllowed, QuotaExceeded
from tenants.service_calls import run_action, submit_form


class HoursForm(forms.Form):
    extend_hours = forms.IntegerField()


def bound_form() -> HoursForm:
    form = HoursForm({"extend_hours": "5"})
    assert form.is_valid()
    return form


def refuse(error: DomainError) -> object:
    raise error


def test_a_form_gets_what_the_service_returned_or_its_bad_input_next_to_the_fields():
    form = bound_form()
    assert submit_form(form, lambda: ("token", "secret")) == ("token", "secret")
    assert not form.errors
    # the service names its own argument; the alias puts it on the form's field, an unknown name goes on top
    bad = InvalidInput({"hours": ["At most 24."], "tenant": ["Unknown tenant 9."]})
    assert submit_form(form, lambda: refuse(bad), aliases={"hours": "extend_hours"}) is None
    assert form.errors == {"extend_hours": ["At most 24."], "__all__": ["Unknown tenant 9."]}


def test_a_form_the_user_may_not_send_is_a_403_and_other_refusals_are_not_swallowed():
    with pytest.raises(PermissionDenied, match="Only managers"):
        submit_form(bound_form(), lambda: refuse(NotAllowed("Only managers change this.")))
    with pytest.raises(QuotaExceeded):
        submit_form(bound_form(), lambda: refuse(QuotaExceeded("Over quota.")))


def test_a_button_says_a_refusal_in_a_message_and_a_forbidden_one_is_a_403():
    request = RequestFactory().post("/requests/7/release/")
    request._messages = CookieStorage(request)  # noqa: SLF001 (what MessageMiddleware sets)
    assert run_action(request, lambda: 7, about="Request #7: ") == 7
    assert run_action(request, lambda: refuse(QuotaExceeded("Over quota.")), about="Request #7: ") is None
    assert [str(m) for m in get_messages(request)] == ["Request #7: Over quota."]
    with pytest.raises(PermissionDenied, match="Not yours"):
        run_action(request, lambda: refuse(NotAllowed("Not yours.")))
