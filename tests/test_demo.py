"""`make demo` as a first user meets it (issue 9): a port of one's choice, friendly 403/404 pages, no fonts
from the internet, a site icon, the logins once, how to run the CLI, and a quiet log.

The last test runs deploy/demo.sh for real (SQLite, embedded worker) on a free port and talks to it over
HTTP; the others check the pieces without starting a server.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests
from django.contrib.staticfiles import finders
from django.core.management.base import CommandError
from django.test import Client

from allocations.management.commands.run_demo import demo_url
from allocations.management.demo import require_demo_settings
from tests.conftest import World

ROOT = Path(__file__).resolve().parents[1]
# Any absolute http(s) URL in a page; the test server's own host is allowed.
URL = re.compile(r"https?://[^\s\"'<>)]+")


@pytest.mark.parametrize(
    ("args", "command"),
    [
        ([], "bash deploy/demo.sh 127.0.0.1:8000"),
        (["PORT=8001"], "bash deploy/demo.sh 127.0.0.1:8001"),
        (["ADDR=0.0.0.0", "PORT=9000"], "bash deploy/demo.sh 0.0.0.0:9000"),
    ],
)
def test_make_demo_passes_the_port_to_the_demo_script(args: list[str], command: str):
    # when
    make = shutil.which("make")
    assert make is not None
    # Under `make test` this is a sub-make: without its parent's variables it prints only the command.
    env = {k: v for k, v in os.environ.items() if k not in ("MAKEFLAGS", "MAKELEVEL", "MFLAGS")}
    result = subprocess.run(
        [make, "--no-print-directory", "-n", "demo", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    # then
    assert result.stdout.strip() == command


@pytest.mark.parametrize(
    ("addrport", "url"),
    [
        ("127.0.0.1:8001", "http://127.0.0.1:8001"),
        ("8001", "http://127.0.0.1:8001"),
        ("0.0.0.0:8000", "http://127.0.0.1:8000"),
        ("localhost:8080", "http://localhost:8080"),
        ("[::]:8000", "http://[::1]:8000"),
    ],
)
def test_run_demo_tells_the_url_to_open_for_its_address(addrport: str, url: str):
    assert demo_url(addrport) == url


@pytest.mark.parametrize("addrport", ["", "host:", "127.0.0.1:99999", "127.0.0.1:80:80", "port"])
def test_run_demo_refuses_an_address_it_cannot_serve(addrport: str):
    with pytest.raises(CommandError):
        demo_url(addrport)


def test_the_demo_commands_refuse_a_database_that_is_not_the_demos():
    # given: the test suite runs on PostgreSQL, like production
    # when / then
    with pytest.raises(CommandError) as refused:
        require_demo_settings("seed_demo")
    assert str(refused.value) == (
        "seed_demo runs only on the demo's SQLite database with FATIA_EMBEDDED_WORKER=True (see deploy/demo.sh)."
    )


# --- The pages the demo relies on, through the test client (DEBUG is off in the tests, as in the demo) ----


def test_the_site_icon_is_served_at_favicon_ico(db: None):
    # when
    response = Client().get("/favicon.ico")
    # then
    assert response.status_code == 200
    assert response["Content-Type"] == "image/x-icon"
    assert response.content[:4] == b"\x00\x00\x01\x00"  # an ICO header
    assert response.content == (ROOT / "static" / "img" / "favicon.ico").read_bytes()


def test_redoc_references_nothing_outside_the_site(world: World):
    # given
    client = Client()
    client.force_login(world.alice)
    # when
    html = client.get("/api/v1/redoc/").content.decode()
    # then
    assert URL.findall(html) == []
    assert '<redoc spec-url="/api/v1/schema/"' in html
    assert '<script src="/api/v1/redoc/redoc.standalone.js"></script>' in html
    assert "<script>" not in html  # nothing inline: the Content-Security-Policy allows only the site's scripts


def test_the_redoc_bundle_is_the_installed_one_without_the_logo_from_the_cdn(db: None):
    # when
    response = Client().get("/api/v1/redoc/redoc.standalone.js")
    # then
    installed = finders.find("drf_spectacular_sidecar/redoc/bundles/redoc.standalone.js")
    assert isinstance(installed, str)
    original = Path(installed).read_bytes()
    assert response.status_code == 200
    assert response["Content-Type"] == "text/javascript; charset=utf-8"
    assert original.count(b"https://cdn.redoc.ly") == 1  # the logo; anything new from their CDN shows here
    assert response.content == original.replace(b"https://cdn.redoc.ly/redoc/logo-mini.svg", b"data:,")


def test_a_missing_page_is_the_portals_own_404_page(world: World):
    # given
    client = Client()
    client.force_login(world.alice)
    # when
    response = client.get("/no/such/page/")
    # then
    html = response.content.decode()
    assert response.status_code == 404
    assert "There is nothing here, or it belongs to a tenant you are not a member of." in html
    assert "URLconf" not in html


# --- The demo itself ---------------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def demo(tmp_path: Path) -> Iterator[tuple[str, subprocess.Popen[str], Path]]:
    """deploy/demo.sh on a free port with its own data directory, using this test run's virtualenv."""
    port = free_port()
    log = tmp_path / "demo.log"
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("DATABASE_", "CELERY_", "SECRET_KEY", "DEBUG", "ALLOWED_HOSTS", "FATIA_"))
    }
    env.update(FATIA_CACHE=str(Path(sys.executable).parents[2]), FATIA_DATA_DIR=str(tmp_path / "data"))
    with log.open("w") as out:
        process = subprocess.Popen(
            [shutil.which("bash") or "/bin/bash", "deploy/demo.sh", f"127.0.0.1:{port}"],
            cwd=ROOT,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,  # its own process group, so the server it execs ends with it
        )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 300
        while True:
            try:
                requests.get(f"{url}/login/", timeout=5)
                break
            except requests.ConnectionError:
                if process.poll() is not None or time.monotonic() > deadline:
                    raise AssertionError(f"the demo did not start:\n{log.read_text()}") from None
                time.sleep(0.5)
        yield url, process, log
    finally:
        os.killpg(process.pid, signal.SIGTERM)
        process.wait(timeout=30)


def sign_in(url: str, username: str, password: str) -> requests.Session:
    session = requests.Session()
    form = session.get(f"{url}/login/", timeout=10).text
    token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', form)
    assert token is not None
    landed = session.post(
        f"{url}/login/",
        data={"username": username, "password": password, "csrfmiddlewaretoken": token[1]},
        headers={"Referer": f"{url}/login/"},
        timeout=10,
    )
    assert landed.url == f"{url}/"
    return session


def log_showing(log: Path, *lines: str, timeout: float = 30.0) -> str:
    """The server's log once it holds each of `lines` (or at the timeout, for the assertions to tell what is
    missing): runserver writes a request's line after its answer; a fixed pause could end first on a busy machine."""
    deadline = time.monotonic() + timeout
    while True:
        output = log.read_text()
        if all(line in output for line in lines) or time.monotonic() > deadline:
            return output
        time.sleep(0.05)


def test_the_demo_is_friendly_and_quiet(demo: tuple[str, subprocess.Popen[str], Path], tmp_path: Path):
    # given
    url, _, log = demo
    logins = dict(line.split()[:2] for line in (tmp_path / "data" / "demo-logins.txt").read_text().splitlines())
    alice = sign_in(url, "alice", logins["alice"])
    # when
    forbidden = alice.get(f"{url}/manage/tenants/", timeout=10)
    missing = alice.get(f"{url}/no/such/page/", timeout=10)
    icon = alice.get(f"{url}/favicon.ico", timeout=10)
    redoc = alice.get(f"{url}/api/v1/redoc/", timeout=10)
    css = alice.get(f"{url}/static/css/fatia.css", timeout=10)
    # then: the portal's own pages, not Django's debug pages
    assert (forbidden.status_code, missing.status_code, icon.status_code, css.status_code) == (403, 404, 200, 200)
    assert "You may not do this" in forbidden.text
    assert "There is nothing here" in missing.text
    assert "URLconf" not in missing.text
    assert URL.findall(redoc.text) == []
    # when: the demo's held request (issue 14) and its holding pool's admission page, on the demo's SQLite
    charlie, admin = sign_in(url, "charlie", logins["charlie"]), sign_in(url, "admin", logins["admin"])
    mine = charlie.get(f"{url}/api/v1/allocations/", timeout=10).json()
    (held,) = [a for a in (mine["results"] if isinstance(mine, dict) else mine) if a["hold_outcome"]]
    request_page = charlie.get(f"{url}/requests/{held['id']}/", timeout=10)
    pools = admin.get(f"{url}/api/v1/pools/", timeout=10).json()
    (holding,) = [p for p in (pools["results"] if isinstance(pools, dict) else pools) if p["admission"] == "hold"]
    admission = admin.get(f"{url}/manage/pools/{holding['id']}/admission/", timeout=10)
    # then: its page says how its hold ended, and the admission page answers (both read PostgreSQL-only SQL before)
    assert request_page.status_code == 200
    assert "Held for 15 min, placed at the deadline." in request_page.text
    assert admission.status_code == 200
    # then: the logins once, how to run the CLI, and no traceback for the 403
    output = log_showing(log, "Forbidden (Permission denied): /manage/tenants/", "GET /static/css/fatia.css")
    assert output.count(f"alice    {logins['alice']}") == 1
    assert f"Fatia demo: {url}/" in output
    assert f"The CLI: {Path(sys.executable).with_name('fatia')} login --url {url}" in output
    assert "Forbidden (Permission denied): /manage/tenants/" in output
    assert "Traceback" not in output
    assert "No hostname was supplied" not in output
