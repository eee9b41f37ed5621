"""Throttling: API requests per user, per token and per anonymous address, and sign-in failures.

Counters are fixed windows in Django's cache (Redis in production, CACHE_URL), one atomic increment per request
and scope: DRF's own throttles keep every request's timestamp in one cache value, which grows with the rate and is
rewritten on every request. Rates and limits come from settings (FATIA_THROTTLE_RATES, FATIA_LOGIN_*), read on
each use so that an operator's change (or a test's override) needs no restart of the class machinery.
"""

from __future__ import annotations

import hashlib
import math
import time
from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.core.cache import caches
from django.core.cache.backends.redis import RedisCache
from django.http import HttpRequest
from rest_framework.request import Request
from rest_framework.throttling import BaseThrottle

from tenants.models import ApiToken

PERIODS = {"s": 1, "sec": 1, "second": 1, "m": 60, "min": 60, "minute": 60, "h": 3600, "hour": 3600, "d": 86400}


@dataclass(frozen=True, slots=True)
class Rate:
    limit: int
    period_s: int


def parse_rate(text: str) -> Rate:
    """ "1200/min" -> Rate(1200, 60). Raises ValueError on anything else."""
    count, _, period = text.partition("/")
    if not count.isascii() or not count.isdigit() or period not in PERIODS:
        raise ValueError(f"A rate looks like '600/min' (per s, min, h or d), not {text!r}")
    return Rate(int(count), PERIODS[period])


def count_in_window(key: str, *, period_s: int, now: float | None = None) -> tuple[int, float]:
    """Add one to `key`'s counter for the current window of `period_s` seconds; returns (count including this one,
    seconds until the window ends)."""
    now = time.time() if now is None else now
    window = int(now // period_s)
    full_key = f"{key}:{window}"
    ends_in = (window + 1) * period_s - now
    cache = caches["default"]
    if isinstance(cache, RedisCache):
        # One round trip: INCR creates the key at 1 (Django's incr() would first ask whether it exists). The key
        # names its window, so pushing its expiry on each hit never keeps an old window alive.
        backend: Any = cache  # its client is private API: one pipeline beats Django's two-trip incr()
        client = backend._cache.get_client(full_key, write=True)
        redis_key = cache.make_and_validate_key(full_key)
        pipe = client.pipeline()
        pipe.incr(redis_key)
        pipe.expire(redis_key, period_s + 1)
        count = int(pipe.execute()[0])
    else:
        cache.add(full_key, 0, timeout=period_s + 1)
        count = cache.incr(full_key)
    return count, ends_in


def peek_window(key: str, *, period_s: int, now: float | None = None) -> tuple[int, float]:
    """The current window's count without adding to it, and the seconds until the window ends."""
    now = time.time() if now is None else now
    window = int(now // period_s)
    return int(caches["default"].get(f"{key}:{window}", 0)), (window + 1) * period_s - now


def client_address(request: HttpRequest) -> str:
    """The caller's address: the connection's, or the one FATIA_NUM_PROXIES proxies in front of us reported."""
    remote = str(request.META.get("REMOTE_ADDR", ""))
    proxies = settings.FATIA_NUM_PROXIES
    forwarded = request.headers.get("X-Forwarded-For")
    if proxies <= 0 or not forwarded:
        return remote
    hops = [hop.strip() for hop in forwarded.split(",") if hop.strip()]
    return hops[-min(proxies, len(hops))] if hops else remote


class _WindowThrottle(BaseThrottle):
    """DRF throttle over count_in_window; subclasses say whom a request is counted against."""

    scope = ""

    def ident(self, request: Request) -> str | None:
        raise NotImplementedError

    def allow_request(self, request: Request, view: Any) -> bool:
        text = settings.FATIA_THROTTLE_RATES.get(self.scope)
        ident = self.ident(request)
        if not text or ident is None:
            return True
        rate = parse_rate(text)
        count, ends_in = count_in_window(f"throttle:{self.scope}:{ident}", period_s=rate.period_s)
        self._wait = math.ceil(ends_in)
        return count <= rate.limit

    def wait(self) -> float | None:
        return float(getattr(self, "_wait", 1))


class UserRateThrottle(_WindowThrottle):
    """Every request of a signed-in user, whichever token or session it comes with."""

    scope = "user"

    def ident(self, request: Request) -> str | None:
        return str(request.user.pk) if request.user and request.user.is_authenticated else None


class TokenRateThrottle(_WindowThrottle):
    """Requests made with one API token (a runaway script is stopped before it uses up its owner's budget)."""

    scope = "token"

    def ident(self, request: Request) -> str | None:
        return request.auth.prefix if isinstance(request.auth, ApiToken) else None


class AnonRateThrottle(_WindowThrottle):
    """Unauthenticated calls to public endpoints (the schema), per client address. Calls refused for want of
    credentials never reach the throttles (DRF checks permissions first): `anonymous_call_wait` counts those."""

    scope = "anon"

    def ident(self, request: Request) -> str | None:
        if request.user and request.user.is_authenticated:
            return None
        return client_address(request)


def anonymous_call_wait(request: HttpRequest) -> int | None:
    """Count a call that failed authentication against its address (the "anon" rate); past the rate, the seconds
    until it may try again. Stops a client guessing tokens from one address."""
    text = settings.FATIA_THROTTLE_RATES.get("anon")
    if not text or not settings.FATIA_THROTTLE_ENABLED:
        return None
    rate = parse_rate(text)
    count, ends_in = count_in_window(f"throttle:anon:{client_address(request)}", period_s=rate.period_s)
    return math.ceil(ends_in) if count > rate.limit else None


# --- Sign-in failures ------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class LoginLock:
    """Why sign-in is refused now, and for how many more seconds."""

    reason: str  # "account" or "address"
    seconds_left: int


def _login_key(kind: str, value: str) -> str:
    # Hashed: a username may hold characters a cache key should not, and the cache need not learn usernames.
    digest = hashlib.sha256(value.strip().lower().encode()).hexdigest()[:32]
    return f"login:{kind}:{digest}"


def login_lock(*, username: str, address: str) -> LoginLock | None:
    """The lock that refuses this sign-in, if any: the account's first, then the address's."""
    cache = caches["default"]
    for kind, value in (("account", username), ("address", address)):
        until = cache.get(_login_key(f"locked-{kind}", value))
        if until is not None:
            left = math.ceil(float(until) - time.time())
            if left > 0:
                return LoginLock(kind, left)
    return None


def note_login_failure(*, username: str, address: str) -> list[str]:
    """Count a failed sign-in against the account and the address; returns what became locked just now
    ("account", "address"), so the caller can audit each lockout once."""
    cache = caches["default"]
    window = settings.FATIA_LOGIN_LOCKOUT_S
    limits = (
        ("account", username, settings.FATIA_LOGIN_FAILURES_PER_ACCOUNT),
        ("address", address, settings.FATIA_LOGIN_FAILURES_PER_ADDRESS),
    )
    locked: list[str] = []
    for kind, value, limit in limits:
        if not value or limit <= 0:
            continue
        key = _login_key(f"failures-{kind}", value)
        cache.add(key, 0, timeout=window)
        try:
            failures = cache.incr(key)
        except ValueError:  # expired between add and incr
            cache.add(key, 1, timeout=window)
            failures = 1
        if failures >= limit:
            # The lock runs a whole window from now; the failure count starts again after it.
            cache.set(_login_key(f"locked-{kind}", value), time.time() + window, timeout=window)
            cache.delete(key)
            locked.append(kind)
    return locked


def clear_login_failures(*, username: str) -> None:
    """A successful sign-in forgets the account's earlier failures (not the address's)."""
    caches["default"].delete(_login_key("failures-account", username))
