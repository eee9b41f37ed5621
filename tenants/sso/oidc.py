"""OpenID Connect sign-in, on mozilla-django-oidc: the authentication backend and the two views (to the provider,
and back from it).

What we add to the library:
- endpoints from the issuer's discovery document (discovery.py) instead of settings, read only when someone signs
  in with SSO: Django builds every backend for every password sign-in too, and those must work while the
  provider is down;
- a stricter ID token check: signature against the provider's published keys, expiry, issuer and audience (the
  library checks neither issuer nor audience, and lets an expired token's error escape as a 500);
- users found by (issuer, subject), never by e-mail (services.sign_in_sso_user);
- a provider that is down or a token that is refused gives the sign-in page with a message, never a 500.
"""

from __future__ import annotations

import logging
from typing import Any

import jwt
import requests
from django.conf import settings
from django.contrib import messages
from django.contrib.auth import get_user_model
from django.core.exceptions import SuspiciousOperation
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.views.generic import View
from mozilla_django_oidc.auth import OIDCAuthenticationBackend
from mozilla_django_oidc.utils import import_from_settings
from mozilla_django_oidc.views import OIDCAuthenticationCallbackView, OIDCAuthenticationRequestView

from tenants.sso.discovery import ProviderUnavailable, provider_endpoints, timeouts
from tenants.sso.services import sign_in_sso_user

logger = logging.getLogger(__name__)

# Asymmetric algorithms only: with HS256 the "key" would be our client secret, which anyone holding it could sign with.
ID_TOKEN_ALGORITHMS = ["RS256", "RS384", "RS512", "ES256", "ES384", "PS256"]
# Seconds of clock difference between us and the provider that a token's times may be off by.
CLOCK_LEEWAY_S = 60


def oidc_setting(attr: str, *default: Any) -> Any:
    """mozilla-django-oidc's settings, answered from ours (FATIA_OIDC_*) so that there is one place to set them."""
    ours: dict[str, Any] = {
        "OIDC_RP_CLIENT_ID": settings.FATIA_OIDC_CLIENT_ID,
        "OIDC_RP_CLIENT_SECRET": settings.FATIA_OIDC_CLIENT_SECRET,
        "OIDC_RP_SCOPES": settings.FATIA_OIDC_SCOPES,
        "OIDC_TIMEOUT": timeouts(),
        "OIDC_AUTHENTICATION_CALLBACK_URL": "oidc-callback",
    }
    if attr in ours:
        return ours[attr]
    return import_from_settings(attr, *default)


def groups_from_claims(claims: dict[str, Any]) -> list[str]:
    """The groups claim as a list of names: a list of strings, or one string (some providers send a lone group so)."""
    value = claims.get(settings.FATIA_OIDC_GROUPS_CLAIM)
    if isinstance(value, str):
        return [value]
    if isinstance(value, list):
        return [str(g) for g in value if isinstance(g, str | int)]
    return []


class OidcBackend(OIDCAuthenticationBackend):  # type: ignore[misc]
    """Signs in the user the provider's ID token names; does nothing for any other kind of sign-in."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        # Not the library's __init__: it reads the endpoints at once, and this backend is built for every
        # password sign-in as well.
        self.UserModel = get_user_model()
        self.OIDC_RP_SIGN_ALGO = "RS256"
        self.OIDC_RP_IDP_SIGN_KEY = None
        self.OIDC_RP_CLIENT_ID = settings.FATIA_OIDC_CLIENT_ID
        self.OIDC_RP_CLIENT_SECRET = settings.FATIA_OIDC_CLIENT_SECRET
        self.OIDC_OP_TOKEN_ENDPOINT = ""
        self.OIDC_OP_USER_ENDPOINT = ""
        self.OIDC_OP_JWKS_ENDPOINT = ""
        self.issuer = settings.FATIA_OIDC_ISSUER

    @staticmethod
    def get_settings(attr: str, *args: Any) -> Any:
        return oidc_setting(attr, *args)

    def use_endpoints(self) -> None:
        """Read the provider's endpoints (raises ProviderUnavailable)."""
        endpoints = provider_endpoints()
        self.OIDC_OP_TOKEN_ENDPOINT = endpoints.token_endpoint
        self.OIDC_OP_USER_ENDPOINT = endpoints.userinfo_endpoint
        self.OIDC_OP_JWKS_ENDPOINT = endpoints.jwks_uri

    def authenticate(self, request: HttpRequest | None, **kwargs: Any) -> Any:
        # Only the callback view passes a nonce; a password sign-in (or a forged ?code= on the login page) never
        # reaches the provider from here.
        if not settings.FATIA_OIDC_ISSUER or request is None or "nonce" not in kwargs or "username" in kwargs:
            return None
        self.use_endpoints()
        return super().authenticate(request, **kwargs)

    def verify_token(self, token: str, **kwargs: Any) -> dict[str, Any]:
        """The ID token's claims, once its signature (the provider's published key), expiry, issuer, audience and
        nonce are checked. Raises SuspiciousOperation for any token that fails one of them."""
        try:
            header = jwt.get_unverified_header(token)
        except jwt.InvalidTokenError as exc:
            raise SuspiciousOperation(f"ID token refused: not a signed token ({exc}).") from exc
        algorithm = header.get("alg")
        if algorithm not in ID_TOKEN_ALGORITHMS:
            raise SuspiciousOperation(f"ID token refused: signing algorithm {algorithm!r} is not accepted.")
        self.OIDC_RP_SIGN_ALGO = algorithm
        key = self.retrieve_matching_jwk(token)
        try:
            claims: dict[str, Any] = jwt.decode(
                token,
                key,
                algorithms=[algorithm],
                audience=settings.FATIA_OIDC_CLIENT_ID,
                issuer=self.issuer,
                leeway=CLOCK_LEEWAY_S,
                options={"require": ["exp", "iat", "iss", "aud", "sub"]},
            )
        except jwt.InvalidTokenError as exc:
            raise SuspiciousOperation(f"ID token refused: {exc}.") from exc
        # OpenID Connect Core 3.1.3.7: with several audiences, the token must be issued to us.
        audience = claims.get("aud")
        if isinstance(audience, list) and len(audience) > 1 and claims.get("azp") != settings.FATIA_OIDC_CLIENT_ID:
            raise SuspiciousOperation("ID token refused: issued to another client (azp).")
        if kwargs.get("nonce") != claims.get("nonce"):
            raise SuspiciousOperation("ID token refused: the nonce does not match this sign-in.")
        return claims

    def retrieve_matching_jwk(self, token: str) -> Any:
        """The provider's published key that signed `token`: the one with the token's key id, or the only signing
        key when the token names none (some providers publish one key without an id)."""
        header = jwt.get_unverified_header(token)
        response = requests.get(self.OIDC_OP_JWKS_ENDPOINT, timeout=timeouts())
        response.raise_for_status()
        document = response.json()
        published = document.get("keys") if isinstance(document, dict) else None
        if not isinstance(published, list):
            raise SuspiciousOperation("ID token refused: the provider's key set (JWKS) has no list of keys.")
        keys = [k for k in published if isinstance(k, dict) and k.get("use", "sig") == "sig"]
        keys = [k for k in keys if "alg" not in k or k["alg"] == header.get("alg")]
        kid = header.get("kid")
        matching = [k for k in keys if k.get("kid") == kid] if kid is not None else keys
        if len(matching) != 1:
            raise SuspiciousOperation(f"ID token refused: no single published key matches key id {kid!r}.")
        try:
            return jwt.PyJWK(matching[0])
        except jwt.PyJWKError as exc:
            raise SuspiciousOperation(f"ID token refused: the provider's key is unusable ({exc}).") from exc

    def get_userinfo(self, access_token: str, id_token: str, payload: dict[str, Any]) -> dict[str, Any]:
        """The verified ID token's claims, with the user-info endpoint's on top when the provider has one."""
        claims = dict(payload)
        if self.OIDC_OP_USER_ENDPOINT and access_token:
            response = requests.get(
                self.OIDC_OP_USER_ENDPOINT, headers={"Authorization": f"Bearer {access_token}"}, timeout=timeouts()
            )
            response.raise_for_status()
            info = response.json()
            # OpenID Connect Core 5.3.2: user info about anyone but the token's subject must not be used.
            if not isinstance(info, dict) or info.get("sub") != payload.get("sub"):
                raise SuspiciousOperation("The user-info response is about another subject.")
            claims.update(info)
        return claims

    def verify_claims(self, claims: dict[str, Any]) -> bool:
        return bool(claims.get("sub")) and bool(claims.get("preferred_username") or claims.get("email"))

    def get_or_create_user(self, access_token: str, id_token: str, payload: dict[str, Any]) -> Any:
        claims = self.get_userinfo(access_token, id_token, payload)
        if not self.verify_claims(claims):
            raise SuspiciousOperation("The provider sent neither preferred_username nor email.")
        user = sign_in_sso_user(
            issuer=self.issuer,
            subject=str(claims["sub"]),
            username=str(claims.get("preferred_username") or claims.get("email")),
            email=str(claims.get("email") or ""),
            groups=groups_from_claims(claims),
        )
        return user if self.user_can_authenticate(user) else None


def _unavailable(request: HttpRequest, exc: Exception) -> HttpResponse:
    logger.warning("single sign-on: provider unavailable: %s", exc)
    return render(request, "registration/sso_unavailable.html", status=503)


class OidcAuthenticateView(OIDCAuthenticationRequestView):  # type: ignore[misc]
    """GET /oidc/authenticate/: off to the provider's sign-in page, with state, nonce and a PKCE challenge (S256)."""

    def __init__(self, **kwargs: Any) -> None:
        View.__init__(self, **kwargs)  # the library's __init__ reads the endpoints from settings

    @staticmethod
    def get_settings(attr: str, *args: Any) -> Any:
        return oidc_setting(attr, *args)

    def get(self, request: HttpRequest) -> HttpResponse:
        if not settings.FATIA_OIDC_ISSUER:
            raise Http404("Single sign-on is not configured.")
        try:
            endpoints = provider_endpoints()
        except ProviderUnavailable as exc:
            return _unavailable(request, exc)
        self.OIDC_OP_AUTH_ENDPOINT = endpoints.authorization_endpoint
        self.OIDC_RP_CLIENT_ID = settings.FATIA_OIDC_CLIENT_ID
        response: HttpResponse = super().get(request)
        return response


class OidcCallbackView(OIDCAuthenticationCallbackView):  # type: ignore[misc]
    """GET /oidc/callback/: the provider sends the browser back here with a code, which becomes a signed-in user."""

    @staticmethod
    def get_settings(attr: str, *args: Any) -> Any:
        return oidc_setting(attr, *args)

    def get(self, request: HttpRequest) -> HttpResponse:
        if not settings.FATIA_OIDC_ISSUER:
            raise Http404("Single sign-on is not configured.")
        try:
            response: HttpResponse = super().get(request)
        except requests.HTTPError as exc:
            # 4xx: the provider refused this code (used twice, expired, wrong client); 5xx: it is in trouble.
            status = exc.response.status_code if exc.response is not None else 500
            if status < 500:
                logger.warning("single sign-on refused by the provider: %s", exc)
                return self.login_failure()
            return _unavailable(request, exc)
        except (ProviderUnavailable, requests.RequestException) as exc:
            return _unavailable(request, exc)
        except SuspiciousOperation as exc:
            logger.warning("single sign-on refused: %s", exc)
            return self.login_failure()
        return response

    def login_failure(self) -> HttpResponse:
        messages.error(
            self.request,
            "Single sign-on did not sign you in: the identity provider's answer was refused or the sign-in was "
            "cancelled. Try again; if it keeps failing, ask your platform admin.",
        )
        return redirect("login")
