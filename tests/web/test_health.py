"""/healthz and /readyz: what the kubelet's probes see (portal/health.py)."""

from __future__ import annotations

import json
import socket

import pytest
from django.test import Client
from django.test.utils import override_settings

pytestmark = pytest.mark.django_db


def closed_port() -> int:
    # A port that was free a moment ago: nothing listens there, so a connection is refused at once.
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_healthz_answers_a_probe_with_the_pods_ip_as_host() -> None:
    # given: the kubelet's probe, whose Host header is the pod's IP (not an allowed host)
    response = Client().get("/healthz", HTTP_HOST="10.244.3.17:8000")
    # then
    assert response.status_code == 200
    assert json.loads(response.content) == {"status": "ok"}
    assert response["Cache-Control"] == "no-store"


def test_readyz_is_ready_when_the_database_broker_and_cache_answer() -> None:
    response = Client().get("/readyz/", HTTP_HOST="10.244.3.17:8000")
    assert response.status_code == 200
    assert json.loads(response.content) == {"status": "ok", "database": "ok", "broker": "ok", "cache": "ok"}


def test_readyz_is_unavailable_when_the_broker_is_down_and_says_only_which() -> None:
    # given: a broker URL where nothing listens
    url = f"redis://127.0.0.1:{closed_port()}/0"
    with override_settings(CELERY_BROKER_URL=url):
        response = Client().get("/readyz", HTTP_HOST="10.244.3.17:8000")
    # then: 503, the broker named as down, and nothing of the URL or the error in the body
    assert response.status_code == 503
    body = json.loads(response.content)
    assert body == {"status": "unavailable", "database": "ok", "broker": "down", "cache": "ok"}
    assert "127.0.0.1" not in response.content.decode()


def test_readyz_is_unavailable_when_the_cache_is_down() -> None:
    with override_settings(CACHE_URL=f"redis://127.0.0.1:{closed_port()}/1"):
        response = Client().get("/readyz", HTTP_HOST="10.244.3.17:8000")
    assert response.status_code == 503
    assert json.loads(response.content)["cache"] == "down"


def test_other_methods_and_paths_go_through_the_portal_as_usual() -> None:
    # a POST to /healthz is not a probe: the portal answers it (no such page), with host validation as ever;
    # the 400 page for a Host outside ALLOWED_HOSTS was a 500 before (its context processor wanted a user)
    client = Client(raise_request_exception=False)
    assert client.post("/healthz").status_code == 404
    assert client.get("/healthz-not", HTTP_HOST="10.244.3.17:8000").status_code == 400
