"""Sign-in with lockouts: the login page's form and view, the authentication backend, and the signal receivers
that count failures. The counters live in tenants/throttling.py.

Every username-and-password sign-in goes through Django's `authenticate()`: the backend refuses an account or
address that is locked (so the admin's login page is covered too), and `user_login_failed` counts each failure.
The portal's own login page also says that, and for how long, it is locked, and answers 429 with Retry-After.
"""

from __future__ import annotations

import math
from typing import Any

from django import forms
from django.conf import settings
from django.contrib.auth import views as auth_views
from django.contrib.auth.backends import ModelBackend
from django.contrib.auth.forms import AuthenticationForm
from django.contrib.auth.signals import user_logged_in, user_login_failed
from django.dispatch import receiver
from django.http import HttpRequest, HttpResponse

from tenants import throttling
from tenants.services import record_login_lockout


def _address(request: HttpRequest | None) -> str:
    return throttling.client_address(request) if request is not None else ""


class LockoutModelBackend(ModelBackend):
    """Django's ModelBackend, refusing while the account or the caller's address is locked out."""

    def authenticate(
        self, request: HttpRequest | None, username: str | None = None, password: str | None = None, **kwargs: Any
    ) -> Any:
        # FATIA_LOCAL_LOGIN=False: no password sign-in anywhere, the admin site's included (single sign-on only).
        if not settings.FATIA_LOCAL_LOGIN:
            return None
        if username is not None and throttling.login_lock(username=username, address=_address(request)):
            return None
        return super().authenticate(request, username=username, password=password, **kwargs)


@receiver(user_login_failed)
def count_login_failure(sender: Any, credentials: dict[str, Any], request: HttpRequest | None = None, **_: Any) -> None:
    username = str(credentials.get("username") or "")
    address = _address(request)
    for kind in throttling.note_login_failure(username=username, address=address):
        record_login_lockout(kind=kind, username=username, address=address, seconds=settings.FATIA_LOGIN_LOCKOUT_S)


@receiver(user_logged_in)
def forget_login_failures(sender: Any, request: HttpRequest | None, user: Any, **_: Any) -> None:
    throttling.clear_login_failures(username=user.get_username())


class SignInForm(AuthenticationForm):
    """The login page's form: a locked account or address gets its own message instead of "did not match"."""

    locked: throttling.LoginLock | None = None
    # The error names its own cause (locked out, or password sign-in off) instead of "did not match".
    explained = False

    def clean(self) -> dict[str, Any]:
        if not settings.FATIA_LOCAL_LOGIN:
            self.explained = True
            raise forms.ValidationError(
                "Password sign-in is turned off here: use single sign-on.", code="local_login_off"
            )
        username = self.data.get("username", "")
        self.locked = throttling.login_lock(username=str(username), address=_address(self.request))
        if self.locked is not None:
            self.explained = True
            minutes = math.ceil(self.locked.seconds_left / 60)
            whom = "this account" if self.locked.reason == "account" else "your network address"
            raise forms.ValidationError(
                f"Too many failed sign-ins for {whom}. Try again in {minutes} minute{'s' if minutes != 1 else ''}.",
                code="locked",
            )
        return super().clean()


class SignInView(auth_views.LoginView):
    form_class = SignInForm
    template_name = "registration/login.html"

    def get_context_data(self, **kwargs: Any) -> dict[str, Any]:
        context = super().get_context_data(**kwargs)
        context["local_login"] = settings.FATIA_LOCAL_LOGIN
        context["sso_enabled"] = bool(settings.FATIA_OIDC_ISSUER)
        context["sso_label"] = settings.FATIA_OIDC_BUTTON_LABEL
        return context

    def form_invalid(self, form: AuthenticationForm) -> HttpResponse:
        response = super().form_invalid(form)
        # A refused sign-in is bad input like any other refused form of the portal (tenants.forms.form_status).
        response.status_code = 400
        lock = getattr(form, "locked", None)
        if lock is not None:
            response.status_code = 429
            response["Retry-After"] = str(lock.seconds_left)
        return response
