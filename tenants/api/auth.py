from __future__ import annotations

from django.contrib.auth.models import User
from rest_framework.exceptions import NotAuthenticated
from rest_framework.request import Request


def acting_user(request: Request) -> User:
    """The signed-in user behind a request (views only run after IsAuthenticated)."""
    if not request.user.is_authenticated:
        raise NotAuthenticated()
    user = request.user
    assert isinstance(user, User)  # noqa: S101 (narrows the type; authenticated means a User)
    return user
