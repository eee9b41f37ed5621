"""`fatia attach`'s core (allocations/workloads/attach.py): every pod-carrying kind, multi-document YAML, the
containers chosen, idempotence, and the refusals."""

from __future__ import annotations

import textwrap

import pytest

from allocations.workloads.attach import POD_SPEC_PATHS, AttachError, attach_claims
from allocations.workloads.documents import DocumentError, dump_documents, load_documents
from allocations.workloads.target import ClaimTarget

TOLERATION = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
TARGET = ClaimTarget(request_id=1, namespace="fatia-team-a", claim_names=("mig-alloc-1",), tolerations=(TOLERATION,))
SHARES = ClaimTarget(request_id=2, namespace="fatia-team-a", claim_names=("s-0", "s-1"), shared=True)

POD_SPEC = {
    "containers": [
        {"name": "app", "image": "busybox", "resources": {"limits": {"cpu": "1"}}},
        {"name": "sidecar", "image": "busybox"},
    ],
    "tolerations": [{"key": "other", "operator": "Exists"}],
}


def wrap(kind: str) -> dict:
    """An object of `kind` with POD_SPEC where that kind keeps its pod spec."""
    obj: dict = {"apiVersion": "v1", "kind": kind, "metadata": {"name": f"my-{kind.lower()}", "labels": {"a": "b"}}}
    node = obj
    path = POD_SPEC_PATHS[kind]
    for key in path[:-1]:
        node = node.setdefault(key, {})
    node[path[-1]] = {**POD_SPEC, "containers": [dict(c) for c in POD_SPEC["containers"]]}
    return obj


def spec_of(obj: dict) -> dict:
    node = obj
    for key in POD_SPEC_PATHS[obj["kind"]]:
        node = node[key]
    return node


@pytest.mark.parametrize("kind", sorted(POD_SPEC_PATHS))
def test_every_kind_gets_the_claim_on_every_container_and_keeps_the_rest(kind):
    # given
    original = wrap(kind)
    # when
    (result,), (attached,) = attach_claims([original], TARGET)
    # then
    spec = spec_of(result)
    assert spec["resourceClaims"] == [{"name": "fatia-gpu", "resourceClaimName": "mig-alloc-1"}]
    assert [c["resources"].get("claims") for c in spec["containers"]] == [[{"name": "fatia-gpu"}]] * 2
    assert spec["containers"][0]["resources"]["limits"] == {"cpu": "1"}
    assert spec["tolerations"] == [{"key": "other", "operator": "Exists"}, TOLERATION]
    assert result["metadata"] == {"name": f"my-{kind.lower()}", "labels": {"a": "b"}, "namespace": "fatia-team-a"}
    assert attached.as_dict() == {"kind": kind, "name": f"my-{kind.lower()}", "containers": ["app", "sidecar"]}
    # and the input is left as it was
    assert "resourceClaims" not in spec_of(original)


def test_only_the_named_container_gets_it_across_a_multi_document_file():
    # given
    text = dump_documents([wrap("Deployment"), {"apiVersion": "v1", "kind": "List", "items": [wrap("Pod")]}])
    # when
    result, attached = attach_claims(load_documents(text), TARGET, containers=("sidecar",))
    # then
    assert [a.containers for a in attached] == [("sidecar",), ("sidecar",)]
    pod = result[1]["items"][0]
    assert [c["resources"].get("claims") for c in spec_of(pod)["containers"]] == [None, [{"name": "fatia-gpu"}]]


def test_attaching_twice_gives_the_same_manifest():
    once, _ = attach_claims([wrap("Job")], TARGET)
    twice, _ = attach_claims(once, TARGET)
    assert twice == once


def test_a_share_goes_to_the_pod_that_asks_for_it():
    (result,), _ = attach_claims([wrap("Pod")], SHARES, share=1)
    assert spec_of(result)["resourceClaims"] == [{"name": "fatia-gpu", "resourceClaimName": "s-1"}]


@pytest.mark.parametrize(
    ("documents", "kwargs", "field", "words"),
    [
        ([{"apiVersion": "v1", "kind": "Service", "metadata": {"name": "s"}}], {}, "manifest", "cannot attach"),
        ([wrap("Pod") | {"kind": "DaemonSet"}], {}, "manifest", "every matching node"),
        ([{**wrap("Pod"), "metadata": {"name": "p", "namespace": "elsewhere"}}], {}, "namespace", "own namespace"),
        ([wrap("Pod")], {"containers": ("nope",)}, "containers", "nope"),
        ([{"kind": "Pod", "metadata": {"name": "p"}, "spec": {"containers": []}}], {}, "manifest", "no containers"),
        ([{"kind": "Deployment", "metadata": {"name": "d"}, "spec": {}}], {}, "manifest", "pod spec"),
        ([wrap("Pod")], {"share": 0}, "share", "shares"),
    ],
)
def test_refusals_say_why(documents, kwargs, field, words):
    with pytest.raises(AttachError) as caught:
        attach_claims(documents, TARGET, **kwargs)
    assert caught.value.field == field
    assert words in caught.value.message


def test_several_shares_need_one_chosen():
    with pytest.raises(AttachError, match="say which one"):
        attach_claims([wrap("Pod")], SHARES)


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("kind: Pod\n  bad: [", "line"),
        ("", "no Kubernetes object"),
        ("- just\n- a list\n", "not a Kubernetes object"),
        ("kind: Pod\n---\n42\n", "Document 2"),
    ],
)
def test_bad_yaml_is_told_with_where(text, words):
    with pytest.raises(DocumentError, match=words):
        load_documents(text)


def test_comments_go_but_key_order_stays():
    text = textwrap.dedent(
        """\
        # mine
        kind: Pod
        apiVersion: v1
        metadata: {name: p}
        spec:
          containers: [{name: c, image: busybox}]
        """
    )
    (result,), _ = attach_claims(load_documents(text), TARGET)
    assert list(result) == ["kind", "apiVersion", "metadata", "spec"]


def test_yaml_nested_past_the_parsers_depth_is_bad_yaml_not_a_crash():
    with pytest.raises(DocumentError, match="nested too deeply"):
        load_documents("kind: " + "[" * 100_000)
