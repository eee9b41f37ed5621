"""The manifests panel of the request page, its download, and the advisor panel of the request form, through
Django's test client: GET forms that work without JavaScript, friendly errors, no 500."""

from __future__ import annotations

import yaml
from django.test import Client

from allocations import services
from tests.allocating import active_request, shared_l4_pool
from tests.conftest import World


def client_for(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


def test_the_request_page_shows_a_pod_by_default_and_the_kind_asked_for(world: World):
    allocation = active_request(world)
    client = client_for(world.alice)
    default = client.get(f"/requests/{allocation.pk}/").content.decode()
    vllm = client.get(f"/requests/{allocation.pk}/", {"kind": "vllm", "model": "org/m"}).content.decode()
    assert 'id="manifests"' in default and "kind: Pod" in default
    assert "kind: Deployment" in vllm and "- org/m" in vllm
    assert f"resourceClaimName: {allocation.claim_name}" in vllm


def test_bad_parameters_show_the_field_not_a_500(world: World):
    allocation = active_request(world)
    response = client_for(world.alice).get(f"/requests/{allocation.pk}/", {"kind": "helm", "image": "a b"})
    page = response.content.decode()
    assert response.status_code == 200
    assert 'id="manifest-errors"' in page and "<strong>kind</strong>" in page and "<strong>image</strong>" in page


def test_the_download_is_the_yaml_as_a_file(world: World):
    allocation = active_request(world)
    client = client_for(world.alice)
    response = client.get(f"/requests/{allocation.pk}/manifests.yaml", {"kind": "job"})
    assert response.status_code == 200
    assert response["Content-Disposition"] == f'attachment; filename="request-{allocation.pk}-job.yaml"'
    (job,) = yaml.safe_load_all(response.content)
    assert job["kind"] == "Job"
    assert client.get(f"/requests/{allocation.pk}/manifests.yaml", {"kind": "x"}).status_code == 400
    assert client_for(world.charlie).get(f"/requests/{allocation.pk}/manifests.yaml").status_code == 404


def test_a_request_that_is_not_active_has_no_manifests_panel_or_download(world: World):
    pending, _ = services.request_allocation(
        tenant_id=world.tenant_a.pk,
        pool_id=world.pool.pk,
        profile="7g.80gb",
        count=1,
        lease_hours=8,
        purpose="big",
        actor=world.alice,
    )
    client = client_for(world.alice)
    assert 'id="manifests"' not in client.get(f"/requests/{pending.pk}/").content.decode()
    assert client.get(f"/requests/{pending.pk}/manifests.yaml", {"kind": "pod"}).status_code == 400


def test_the_advisor_answers_a_get_form_on_the_request_page(world: World):
    client = client_for(world.alice)
    empty = client.get("/requests/new/").content.decode()
    answered = client.get(
        "/requests/new/", {"model": "llama-3.1-8b", "context_length": "8192", "sequences": "4", "mode": "serve"}
    ).content.decode()
    assert 'id="advisor-form"' in empty and 'id="advisor-result"' not in empty
    assert 'id="advisor-result"' in answered and "<strong>3g.40gb</strong>" in answered
    assert "3 compute slices, 4 memory slots, 0.50 GPU-equivalents" in answered
    assert 'data-profile="3g.40gb"' in answered


def test_the_advisor_shows_bad_input_by_field(world: World):
    response = client_for(world.alice).get("/requests/new/", {"params_b": "-3", "mode": "full", "precision": "int4"})
    page = response.content.decode()
    assert response.status_code == 200
    assert (
        'id="advisor-errors"' in page and "<strong>params_b</strong>" in page and "<strong>precision</strong>" in page
    )


def test_a_shared_request_page_offers_its_shares_and_one_workload_each(world: World):
    # given: two 4 GiB shares of an L4
    allocation = active_request(world, pool=shared_l4_pool(world), profile="", memory_mib=4096, count=2, lease_hours=3)
    client = client_for(world.alice)
    # when
    every = client.get(f"/requests/{allocation.pk}/", {"kind": "job"}).content.decode()
    second = client.get(f"/requests/{allocation.pk}/", {"kind": "job", "share": "1"}).content.decode()
    # then
    assert 'id="manifest-share"' in every and '<option value="1" selected>' in second
    assert "name: gpu-job-0" in every and "name: gpu-job-1" in every
    assert "name: gpu-job-0" not in second and f"resourceClaimName: {allocation.claim_names[1]}" in second
