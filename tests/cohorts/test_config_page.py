"""The cohort admin page of a pool (issue 15), server side: members with their figures, forms whose bad input is a
field message (400), never a 500; platform admins only; linked from the pools page."""

from __future__ import annotations

from django.test import Client

from allocations.cohorts.config import Limits, create_cohort, set_quota_cohort
from allocations.models import Cohort, Quota
from tests.conftest import World


def browser(user) -> Client:
    client = Client(raise_request_exception=False)
    client.force_login(user)
    return client


def test_the_page_lists_members_with_guarantee_use_and_limits_and_the_pools_page_links_it(world: World):
    # given
    cohort = create_cohort(pool_id=world.pool.pk, name="research", reclaim_grace_minutes=15, actor=world.root)
    quota = Quota.objects.get(tenant=world.tenant_a, pool=world.pool)
    set_quota_cohort(quota_id=quota.pk, cohort_id=cohort.pk, limits=Limits(borrowing_compute_limit=7), actor=world.root)
    root = browser(world.root)
    # when
    page = root.get(f"/manage/pools/{world.pool.pk}/cohorts/").content.decode()
    # then
    assert "Reclaim grace 15 min; 1 member; lent in total 0 / 0." in page
    assert '<th scope="row">Team A</th>' in page
    assert '<td data-label="Guarantee">14 / 16</td>' in page
    assert '<td data-label="May borrow">7 / no limit</td>' in page
    assert '<td data-label="May lend">all unused / all unused</td>' in page
    assert f'href="/manage/pools/{world.pool.pk}/cohorts/"' in root.get("/manage/pools/").content.decode()


def test_creating_joining_renaming_and_deleting_through_the_forms(world: World):
    root = browser(world.root)
    url = f"/manage/pools/{world.pool.pk}/cohorts/"
    created = root.post(url, {"form": "create", "create-name": "research", "create-reclaim_grace_minutes": "5"})
    cohort = Cohort.objects.get()
    quota = Quota.objects.get(tenant=world.tenant_b, pool=world.pool)
    joined = root.post(
        url, {"form": "member", "member-quota": quota.pk, "member-cohort": cohort.pk, "member-lending_compute_limit": 3}
    )
    renamed = root.post(
        f"/manage/cohorts/{cohort.pk}/",
        {f"cohort-{cohort.pk}-name": "science", f"cohort-{cohort.pk}-reclaim_grace_minutes": "0"},
    )
    assert [r.status_code for r in (created, joined, renamed)] == [302, 302, 302]
    quota.refresh_from_db()
    cohort.refresh_from_db()
    assert (quota.cohort_id, quota.lending_compute_limit, quota.borrowing_compute_limit) == (cohort.pk, 3, None)
    assert (cohort.name, cohort.reclaim_grace_minutes) == ("science", 0)
    deleted = root.post(f"/manage/cohorts/{cohort.pk}/delete/")
    assert deleted.status_code == 302
    assert (Cohort.objects.count(), Quota.objects.get(pk=quota.pk).cohort_id) == (0, None)


def test_bad_input_comes_back_next_to_its_field(world: World):
    # given
    create_cohort(pool_id=world.pool.pk, name="research", actor=world.root)
    root = browser(world.root)
    url = f"/manage/pools/{world.pool.pk}/cohorts/"
    # when
    taken = root.post(url, {"form": "create", "create-name": "research", "create-reclaim_grace_minutes": "5"})
    negative = root.post(
        url,
        {
            "form": "member",
            "member-quota": Quota.objects.filter(pool=world.pool).first().pk,
            "member-borrowing_compute_limit": "-2",
        },
    )
    limits_alone = root.post(
        url,
        {
            "form": "member",
            "member-quota": Quota.objects.filter(pool=world.pool).first().pk,
            "member-lending_memory_limit": "2",
        },
    )
    # then
    assert taken.status_code == 400
    assert "H100 pool already has a cohort named &#x27;research&#x27;." in taken.content.decode()
    assert negative.status_code == 400
    assert "Ensure this value is greater than or equal to 0." in negative.content.decode()
    assert limits_alone.status_code == 400
    assert "Only a cohort member borrows or lends" in limits_alone.content.decode()
    assert Cohort.objects.count() == 1


def test_members_and_managers_get_403(world: World):
    cohort = create_cohort(pool_id=world.pool.pk, name="research", actor=world.root)
    for user in (world.alice, world.mallory):
        client = browser(user)
        assert client.get(f"/manage/pools/{world.pool.pk}/cohorts/").status_code == 403
        assert client.post(f"/manage/cohorts/{cohort.pk}/delete/").status_code == 403
    assert Cohort.objects.count() == 1


def test_the_membership_form_chooses_no_tenant_at_first_and_names_each_tenants_cohort(world: World):
    # given: Team A in a cohort
    cohort = create_cohort(pool_id=world.pool.pk, name="research", actor=world.root)
    quota_a = Quota.objects.get(tenant=world.tenant_a, pool=world.pool)
    set_quota_cohort(quota_id=quota_a.pk, cohort_id=cohort.pk, limits=Limits(), actor=world.root)
    root = browser(world.root)
    url = f"/manage/pools/{world.pool.pk}/cohorts/"
    # when
    page = root.get(url).content.decode()
    # then: nothing chosen, and the tenant's present cohort is in its name
    assert '<option value="" selected>Choose a tenant</option>' in page
    assert f'<option value="{quota_a.pk}">Team A (now in research)</option>' in page
    # when: the form is sent as it came
    untouched = root.post(url, {"form": "member", "member-quota": "", "member-cohort": ""})
    # then: a field message, and Team A is still in its cohort
    assert untouched.status_code == 400
    assert "This field is required." in untouched.content.decode()
    assert Quota.objects.get(pk=quota_a.pk).cohort_id == cohort.pk


def test_a_member_sees_on_the_quotas_page_what_its_cohort_lets_it_borrow_and_lend(world: World):
    # given: team A in a cohort, borrowing at most 7 compute slices, lending at most 3 memory slots
    cohort = create_cohort(pool_id=world.pool.pk, name="research", actor=world.root)
    quota = Quota.objects.get(tenant=world.tenant_a, pool=world.pool)
    limits = Limits(borrowing_compute_limit=7, lending_memory_limit=3)
    set_quota_cohort(quota_id=quota.pk, cohort_id=cohort.pk, limits=limits, actor=world.root)
    # when
    alice = browser(world.alice).get("/quotas/").content.decode()
    charlie = browser(world.charlie).get("/quotas/").content.decode()
    # then: alice's balance card says so; charlie's tenant is in no cohort
    assert (
        "In <strong>research</strong>: may borrow up to 7 compute slices and any memory slots beyond this quota"
        in alice
    )
    assert "lends them all of its unused compute slices and up to 3 of its unused memory slots." in alice
    assert "balance__cohort" not in charlie
