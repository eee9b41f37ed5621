"""Generated manifests (allocations/workloads/manifests.py): claims, tolerations, node selection, namespace."""

from __future__ import annotations

import pytest

from allocations.workloads.documents import dump_documents, load_documents
from allocations.workloads.manifests import KINDS, WorkloadInputError, build_manifests, parse_options
from allocations.workloads.target import ClaimTarget

TOLERATION = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
MIG = ClaimTarget(
    request_id=7,
    namespace="fatia-team-a",
    claim_names=("mig-alloc-1",),
    tolerations=(TOLERATION,),
    node_selector="nvidia.com/gpu.product=NVIDIA-H100-80GB-HBM3,!cordoned",
)
MANY = ClaimTarget(request_id=8, namespace="fatia-team-a", claim_names=("mig-alloc-2-0", "mig-alloc-2-1"))
SHARES = ClaimTarget(
    request_id=9,
    namespace="fatia-team-b",
    claim_names=("mig-alloc-3-share-0", "mig-alloc-3-share-1", "mig-alloc-3-share-2"),
    shared=True,
    memory_fraction=0.25,
)


def pod_specs(objects):
    for obj in objects:
        if obj["kind"] == "Pod":
            yield obj["spec"]
        elif obj["kind"] in ("Job", "Deployment", "StatefulSet"):
            yield obj["spec"]["template"]["spec"]


@pytest.mark.parametrize("kind", KINDS)
def test_every_kind_references_the_claim_in_its_namespace_with_the_pools_tolerations_and_nodes(kind):
    # when
    objects = build_manifests(MIG, parse_options({"kind": kind}, MIG))
    # then
    assert {o["metadata"]["namespace"] for o in objects} == {"fatia-team-a"}
    (spec,) = pod_specs(objects)
    assert spec["resourceClaims"] == [{"name": "fatia-gpu", "resourceClaimName": "mig-alloc-1"}]
    assert all(c["resources"]["claims"] == [{"name": "fatia-gpu"}] for c in spec["containers"])
    assert spec["tolerations"] == [TOLERATION]
    terms = spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    assert terms == [
        {
            "matchExpressions": [
                {"key": "nvidia.com/gpu.product", "operator": "In", "values": ["NVIDIA-H100-80GB-HBM3"]},
                {"key": "cordoned", "operator": "DoesNotExist"},
            ]
        }
    ]
    # and the restricted Pod Security Standard's demands
    assert spec["securityContext"]["runAsNonRoot"] is True
    assert spec["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    for c in spec["containers"]:
        assert c["securityContext"] == {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}}


def test_a_request_in_several_claims_gives_one_pod_every_claim():
    (spec,) = pod_specs(build_manifests(MANY, parse_options({"kind": "pod"}, MANY)))
    assert spec["resourceClaims"] == [
        {"name": "fatia-gpu-0", "resourceClaimName": "mig-alloc-2-0"},
        {"name": "fatia-gpu-1", "resourceClaimName": "mig-alloc-2-1"},
    ]
    assert spec["containers"][0]["resources"]["claims"] == [{"name": "fatia-gpu-0"}, {"name": "fatia-gpu-1"}]
    assert "tolerations" not in spec and "affinity" not in spec


def test_shares_get_a_workload_each_or_only_the_one_asked_for():
    # when
    every = build_manifests(SHARES, parse_options({"kind": "job"}, SHARES))
    one = build_manifests(SHARES, parse_options({"kind": "job", "share": "1"}, SHARES))
    # then
    assert [o["metadata"]["name"] for o in every] == ["gpu-job-0", "gpu-job-1", "gpu-job-2"]
    assert [s["resourceClaims"][0]["resourceClaimName"] for s in pod_specs(every)] == list(SHARES.claim_names)
    assert [o["metadata"]["name"] for o in one] == ["gpu-job-1"]


def test_vllm_serves_the_model_given_with_extra_args_and_a_share_tells_it_its_memory():
    # when
    options = parse_options(
        {"kind": "vllm", "model": "meta-llama/Llama-3.1-8B-Instruct", "args": "--max-model-len 8192", "share": 0},
        SHARES,
    )
    service, deployment = build_manifests(SHARES, options)
    # then
    assert service["kind"] == "Service" and service["spec"]["ports"][0]["port"] == 8000
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    assert container["image"].startswith("vllm/vllm-openai:")
    assert container["args"] == [
        "--model",
        "meta-llama/Llama-3.1-8B-Instruct",
        "--port",
        "8000",
        "--gpu-memory-utilization",
        "0.225",
        "--max-model-len",
        "8192",
    ]
    assert deployment["spec"]["strategy"] == {"type": "Recreate"}


def test_vllm_on_a_mig_slice_keeps_its_own_memory_default_and_an_image_can_be_chosen():
    options = parse_options({"kind": "vllm", "image": "example.org/vllm:v1"}, MIG)
    _, deployment = build_manifests(MIG, options)
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    assert "--gpu-memory-utilization" not in container["args"]
    assert container["image"] == "example.org/vllm:v1"


def test_a_notebook_is_a_statefulset_behind_a_service():
    service, statefulset = build_manifests(MIG, parse_options({"kind": "notebook", "name": "nb"}, MIG))
    assert statefulset["kind"] == "StatefulSet" and statefulset["spec"]["serviceName"] == "nb"
    assert service["spec"]["ports"][0]["port"] == 8888


def test_the_yaml_reads_back_as_the_same_objects():
    objects = build_manifests(MIG, parse_options({"kind": "vllm"}, MIG))
    assert load_documents(dump_documents(objects)) == objects


@pytest.mark.parametrize(
    ("raw", "target", "field"),
    [
        ({"kind": "helm"}, MIG, "kind"),
        ({}, MIG, "kind"),
        ({"kind": "pod", "name": "Bad_Name"}, MIG, "name"),
        ({"kind": "pod", "name": "x" * 51}, MIG, "name"),
        ({"kind": "pod", "image": "has space"}, MIG, "image"),
        ({"kind": "pod", "model": "m"}, MIG, "model"),
        ({"kind": "vllm", "model": "a b"}, MIG, "model"),
        ({"kind": "vllm", "command": "python"}, MIG, "command"),
        ({"kind": "pod", "args": "--x"}, MIG, "args"),
        ({"kind": "pod", "command": "'unclosed"}, MIG, "command"),
        ({"kind": "pod", "command": ["ok", 3]}, MIG, "command"),
        ({"kind": "pod", "share": "0"}, MIG, "share"),
        ({"kind": "pod", "share": "3"}, SHARES, "share"),
        ({"kind": "pod", "share": "one"}, SHARES, "share"),
    ],
)
def test_bad_options_name_their_field(raw, target, field):
    with pytest.raises(WorkloadInputError) as caught:
        parse_options(raw, target)
    assert field in caught.value.errors
