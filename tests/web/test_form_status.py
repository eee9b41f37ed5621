"""Every page with a form answers a refused one the same way: HTTP 400 with the same page and the errors next to
the fields (as the API answers bad input), and nothing changes. Pages checked
elsewhere: cohorts (tests/cohorts/test_config_page.py), namespaces (tests/web/test_tenant_namespaces_page.py),
what-if (tests/planning/test_api.py), SSO (tests/sso/)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from django.test import Client

from allocations.models import Allocation, Booking, NodePool, Quota, QuotaChangeRequest
from tenants.models import ApiToken, AuditEvent, Membership, Tenant
from tests.conftest import World

pytestmark = pytest.mark.django_db

# What each page is sent: (who, url, the refused form's data), and the template of the page that answers.
Post = Callable[[World], tuple[str, str, dict[str, Any]]]
CASES: dict[str, tuple[Post, str]] = {
    "new request": (lambda w: ("alice", "/requests/new/", {"count": "0"}), "allocations/request_new.html"),
    "quota change": (lambda w: ("mallory", "/quotas/", {"compute_slices_limit": "x"}), "allocations/quotas.html"),
    "new booking": (lambda w: ("alice", "/bookings/new/", {"count": "1"}), "allocations/booking_new.html"),
    "new token": (lambda w: ("alice", "/tokens/", {"name": "", "scope": "write"}), "tenants/tokens.html"),
    "idle reclaim": (
        lambda w: (
            "mallory",
            f"/tenants/{w.tenant_a.pk}/idle-reclaim/",
            {"enabled": "on", "idle_after_minutes": "1", "idle_grace_minutes": "5"},
        ),
        "tenants/idle_reclaim.html",
    ),
    "new pool": (
        lambda w: ("root", "/manage/pools/", {"name": "L40S", "slug": "Not A Slug"}),
        "allocations/manage_pools.html",
    ),
    "pool tolerations": (
        lambda w: ("root", "/manage/pools/", {"action": "tolerations", "pool": str(w.pool.pk), "tolerations": "{"}),
        "allocations/manage_pools.html",
    ),
    "pool selector": (
        lambda w: ("root", f"/manage/pools/{w.pool.pk}/selector/", {f"pool-{w.pool.pk}-mig_mode": "sideways"}),
        "allocations/manage_pools.html",
    ),
    "set quota": (
        lambda w: ("root", "/manage/quotas/", {"compute_slices_limit": "-1"}),
        "allocations/manage_quotas.html",
    ),
    "new tenant": (
        lambda w: ("root", "/manage/tenants/", {"name": "Team C", "slug": "-"}),
        "tenants/manage_tenants.html",
    ),
    "tenant policy": (
        lambda w: ("root", f"/manage/tenants/{w.tenant_a.pk}/", {"name": ""}),
        "tenants/manage_tenant.html",
    ),
    "add member": (
        lambda w: ("root", f"/manage/tenants/{w.tenant_a.pk}/members/", {"username": "nobody", "role": "member"}),
        "tenants/manage_tenant.html",
    ),
}


def state() -> tuple[Any, ...]:
    models = (Allocation, Booking, NodePool, Quota, QuotaChangeRequest, ApiToken, AuditEvent, Membership, Tenant)
    return tuple(m.objects.count() for m in models), list(Quota.objects.values_list("compute_slices_limit", flat=True))


@pytest.mark.parametrize("case", list(CASES))
def test_a_refused_form_is_a_400_with_the_same_page_and_its_errors(world: World, case: str):
    post, template = CASES[case]
    who, url, data = post(world)
    browser = Client()
    browser.force_login(getattr(world, who))
    before = state()
    # when
    response = browser.post(url, data)
    # then
    assert response.status_code == 400, response.content.decode()[:2000]
    assert template in [t.name for t in response.templates]
    assert 'class="form-errors"' in response.content.decode() or "errorlist" in response.content.decode()
    assert state() == before


def test_a_wrong_password_is_a_400_with_the_sign_in_page(world: World):
    response = Client().post("/login/", {"username": "alice", "password": "not her password"})
    assert response.status_code == 400
    assert "registration/login.html" in [t.name for t in response.templates]
