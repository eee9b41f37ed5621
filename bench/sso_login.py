"""Single sign-on round trip: from the click on "Sign in with single sign-on" to the signed-in page, in Chromium.

    python bench/sso_login.py                 # python: a venv with `pip install -e ".[dev]"`; writes docs/benchmarks.md
    python bench/sso_login.py --rounds 5 --no-write

What it does:

1. A private PostgreSQL (bench/harness.py, unless DATABASE_URL is set), migrated; one tenant and one group
   mapping (bench-managers -> manager).
2. A real OpenID Connect provider (oidc-provider-mock, a dev dependency) on a free loopback port, and the portal
   as in production (README): `gunicorn portal.wsgi`, 3 sync workers, DEBUG=False, SSO pointed at the provider.
3. Headless Chromium (Debian's, through Playwright), a fresh browser context per round (no cookies):
   - leg 1: click the SSO button on /login/ -> the provider's sign-in page has loaded (portal: discovery from the
     cache, state, nonce, PKCE; the redirect);
   - leg 2: click "Authorize" at the provider -> the portal's "My requests" page is shown (provider: code; portal:
     token exchange, the provider's keys, ID token checks, user info, user and memberships made to match the
     groups, session; the home page).
   The time a person spends at the provider's page is not counted. Rounds alternate between a user's first
   sign-in (user created) and a returning user; the first rounds also pay each worker's first discovery fetch.
4. A table on stdout, and the "sso-login" section of docs/benchmarks.md rewritten unless --no-write.

Everything shares the machine's cores: Chromium, gunicorn, the provider and PostgreSQL.
"""

from __future__ import annotations

import argparse
import os
import re
import secrets
import statistics
import subprocess
import sys
import time
from pathlib import Path

import requests

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench import api, harness  # noqa: E402
from bench.report import command_line, write_section  # noqa: E402

CLIENT_ID = "fatia-bench"
GROUP = "bench-managers"


def start_provider() -> str:
    port = harness.free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "oidc_provider_mock", "--host", "127.0.0.1", "--port", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    harness.stop_at_exit(proc)
    issuer = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            if requests.get(f"{issuer}/.well-known/openid-configuration", timeout=2).status_code == 200:
                return issuer
        except requests.RequestException:
            time.sleep(0.1)
    raise SystemExit("oidc-provider-mock did not start")


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=40, help="sign-ins, half first-time, half returning")
    parser.add_argument("--workers", type=int, default=3)
    parser.add_argument("--no-write", action="store_true", help="print only; leave docs/benchmarks.md alone")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    harness.install_cleanups()
    command = command_line(["bench/sso_login.py", *(argv if argv is not None else sys.argv[1:])])
    database_url = harness.open_database()
    issuer = start_provider()
    data_dir = harness.temporary_dir("fatia-bench-sso-")
    env = {
        **os.environ,
        **harness.portal_settings(database_url=database_url, data_dir=data_dir),
        "PYTHONPATH": str(ROOT),
        "SESSION_COOKIE_SECURE": "False",
        "CSRF_COOKIE_SECURE": "False",
        "FATIA_OIDC_ISSUER": issuer,
        "FATIA_OIDC_CLIENT_ID": CLIENT_ID,
        "FATIA_OIDC_CLIENT_SECRET": secrets.token_urlsafe(16),
    }
    os.environ.update(env)
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)
    call_command("collectstatic", "--noinput", verbosity=0)
    from django.db import connections

    from tenants.models import Membership, SsoGroupMapping, Tenant

    tenant = Tenant.objects.create(name="Bench", slug="bench")
    SsoGroupMapping.objects.create(group=GROUP, tenant=tenant, role=Membership.Role.MANAGER)
    connections.close_all()
    server = api.start_server("gunicorn", args.workers, env, data_dir / "server.log")
    base = f"http://127.0.0.1:{server.port}"
    harness.log(f"{server.command} on {base}; provider {issuer}")

    from playwright.sync_api import expect, sync_playwright

    legs: dict[str, list[float]] = {"to_provider": [], "first": [], "returning": []}
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path="/usr/bin/chromium", args=["--no-sandbox"])
        for n in range(args.rounds):
            returning = n % 2 == 1
            sub = f"bench-user-{n - 1 if returning else n}"
            requests.put(f"{issuer}/users/{sub}", json={"preferred_username": sub, "groups": [GROUP]}, timeout=10)
            context = browser.new_context(base_url=base)
            # The provider's page links a stylesheet from a CDN; nothing outside this machine is reachable (or
            # measured): refuse it at once rather than wait for it.
            context.route(re.compile(r"^https?://(?!127\.0\.0\.1[:/])"), lambda route: route.abort())
            page = context.new_page()
            page.goto("/login/")
            t0 = time.perf_counter()
            page.get_by_role("link", name="Sign in with single sign-on").click()
            page.get_by_placeholder("sub").wait_for()
            t1 = time.perf_counter()
            page.get_by_placeholder("sub").fill(sub)
            t2 = time.perf_counter()
            page.get_by_role("button", name="Authorize", exact=True).click()
            expect(page.get_by_role("heading", name="My requests")).to_be_visible(timeout=30_000)
            t3 = time.perf_counter()
            legs["to_provider"].append((t1 - t0) * 1000)
            legs["returning" if returning else "first"].append((t3 - t2) * 1000)
            context.close()
        browser.close()
    # The portal's own share, without a browser: the redirect to the provider, and the callback (code -> token,
    # keys, ID token checks, user info, user and memberships, session) up to its redirect home.
    portal: dict[str, list[float]] = {"authenticate": [], "provider": [], "callback": []}
    for n in range(args.rounds):
        sub = f"bench-http-{n}"
        requests.put(f"{issuer}/users/{sub}", json={"preferred_username": sub, "groups": [GROUP]}, timeout=10)
        session = requests.Session()
        t0 = time.perf_counter()
        start = session.get(f"{base}/oidc/authenticate/", allow_redirects=False, timeout=30)
        t1 = time.perf_counter()
        back = requests.post(start.headers["Location"], data={"sub": sub}, allow_redirects=False, timeout=30)
        t2 = time.perf_counter()
        done = session.get(back.headers["Location"], allow_redirects=False, timeout=30)
        t3 = time.perf_counter()
        if done.status_code != 302 or done.headers["Location"] != "/":
            raise SystemExit(f"the callback did not sign {sub} in: {done.status_code} {done.headers.get('Location')}")
        portal["authenticate"].append((t1 - t0) * 1000)
        portal["provider"].append((t2 - t1) * 1000)
        portal["callback"].append((t3 - t2) * 1000)

    def row(name: str, values: list[float]) -> str:
        return (
            f"| {name} | {len(values)} | {statistics.median(values):.0f} ms | {percentile(values, 0.95):.0f} ms "
            f"| {max(values):.0f} ms |"
        )

    first_total = [legs["to_provider"][i] + legs["first"][i // 2] for i in range(0, len(legs["to_provider"]), 2)]
    returning_total = [
        legs["to_provider"][i] + legs["returning"][i // 2] for i in range(1, len(legs["to_provider"]), 2)
    ]
    table = "\n".join(
        [
            "| leg | rounds | p50 | p95 | max |",
            "| --- | --- | --- | --- | --- |",
            row("click SSO button -> provider's page shown", legs["to_provider"]),
            row("click Authorize -> signed-in page, first sign-in (user created)", legs["first"]),
            row("click Authorize -> signed-in page, returning user", legs["returning"]),
            row("both clicks together, first sign-in", first_total),
            row("both clicks together, returning user", returning_total),
            row("portal alone: GET /oidc/authenticate/ (no browser)", portal["authenticate"]),
            row("provider alone: its sign-in form POST -> redirect back (no browser)", portal["provider"]),
            row("portal alone: GET /oidc/callback/ -> 302 home, first sign-in (no browser)", portal["callback"]),
        ]
    )
    body = (
        f"`{command}`: {args.rounds} sign-ins in headless Chromium against a real OpenID Connect provider "
        f"(oidc-provider-mock on loopback) and `gunicorn portal.wsgi` with {args.workers} sync workers, "
        "PostgreSQL, DEBUG=False; a fresh browser context per sign-in. The time at the provider's page (typing) "
        "is not counted; the first rounds include each worker's first discovery-document fetch (no CACHE_URL: "
        "each worker caches it for itself). The provider's page links a CDN stylesheet, refused at once (no "
        f"network here). Load average when it started: {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores "
        "(the machine is shared).\n\n" + table
    )
    print(table)
    if not args.no_write:
        write_section("sso-login", body, title="Single sign-on round trip")
        harness.log("docs/benchmarks.md updated (section sso-login)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
