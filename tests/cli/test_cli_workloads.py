"""`fatia manifest`, `fatia attach` (with --apply through a kubectl stand-in) and `fatia advise` against a real
server, and their errors: a message on stderr and a non-zero exit."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import yaml

from tests.allocating import active_request
from tests.cli.test_cli import fatia, private_config, server, tokens  # noqa: F401  # fixtures

POD = "apiVersion: v1\nkind: Pod\nmetadata: {name: mine}\nspec:\n  containers: [{name: c, image: busybox}]\n"


def test_manifest_prints_yaml_for_the_kind_asked(world, fatia, tokens):  # noqa: F811
    # given
    allocation = active_request(world)
    # when
    outcome = fatia(
        tokens.alice,
        "manifest",
        str(allocation.pk),
        "--kind",
        "vllm",
        "--model",
        "org/m",
        "--arg=--max-model-len",
        "--arg",
        "4096",
    )
    # then
    assert outcome.code == 0, outcome.err
    service, deployment = yaml.safe_load_all(outcome.out)
    args = deployment["spec"]["template"]["spec"]["containers"][0]["args"]
    assert args[:2] == ["--model", "org/m"] and args[-2:] == ["--max-model-len", "4096"]
    assert deployment["spec"]["template"]["spec"]["resourceClaims"][0]["resourceClaimName"] == allocation.claim_name


def test_manifest_writes_a_file_and_refuses_bad_input(world, fatia, tokens, tmp_path):  # noqa: F811
    allocation = active_request(world)
    target = tmp_path / "job.yaml"
    written = fatia(tokens.alice, "manifest", str(allocation.pk), "--kind", "job", "-o", str(target))
    bad = fatia(tokens.alice, "manifest", str(allocation.pk), "--kind", "pod", "--image", "two words")
    missing = fatia(tokens.charlie, "manifest", str(allocation.pk), "--kind", "pod")
    unknown_kind = fatia(tokens.alice, "manifest", str(allocation.pk), "--kind", "helm")
    assert written.code == 0 and yaml.safe_load(target.read_text())["kind"] == "Job"
    assert bad.code == 1 and "image:" in bad.err and "HTTP 400" in bad.err
    assert missing.code == 1 and f"Allocation {allocation.pk} not found" in missing.err
    assert unknown_kind.code == 2


def test_attach_prints_the_users_manifest_with_the_claim(world, fatia, tokens, tmp_path):  # noqa: F811
    allocation = active_request(world)
    path = tmp_path / "mine.yaml"
    path.write_text(POD)
    outcome = fatia(tokens.alice, "attach", str(allocation.pk), "-f", str(path))
    assert outcome.code == 0, outcome.err
    (pod,) = yaml.safe_load_all(outcome.out)
    assert pod["spec"]["resourceClaims"] == [{"name": "fatia-gpu", "resourceClaimName": allocation.claim_name}]
    assert pod["metadata"]["namespace"] == "fatia-team-a"


def test_attach_errors_exit_non_zero_with_a_message(world, fatia, tokens, tmp_path):  # noqa: F811
    allocation = active_request(world)
    bad_yaml = tmp_path / "bad.yaml"
    bad_yaml.write_text("kind: [unclosed\n")
    service = tmp_path / "svc.yaml"
    service.write_text("apiVersion: v1\nkind: Service\nmetadata: {name: s}\n")
    elsewhere = tmp_path / "elsewhere.yaml"
    elsewhere.write_text(POD.replace("{name: mine}", "{name: mine, namespace: prod}"))
    cases = {
        "bad yaml": (fatia(tokens.alice, "attach", str(allocation.pk), "-f", str(bad_yaml)), 1, "Not valid YAML"),
        "kind": (fatia(tokens.alice, "attach", str(allocation.pk), "-f", str(service)), 1, "cannot attach"),
        "namespace": (fatia(tokens.alice, "attach", str(allocation.pk), "-f", str(elsewhere)), 1, "'prod'"),
        "no file": (fatia(tokens.alice, "attach", str(allocation.pk), "-f", str(tmp_path / "none")), 2, "No such"),
    }
    for name, (outcome, code, words) in cases.items():
        assert outcome.code == code, name
        assert words in outcome.err, (name, outcome.err)
        assert outcome.out == "", name


def test_attach_apply_pipes_the_result_to_the_users_kubectl(world, fatia, tokens, tmp_path, monkeypatch):  # noqa: F811
    # given: a kubectl stand-in that records its arguments and input, as the user's own kubectl would get them
    allocation = active_request(world)
    path = tmp_path / "mine.yaml"
    path.write_text(POD)
    seen = tmp_path / "seen"
    kubectl = tmp_path / "kubectl"
    kubectl.write_text(f'#!/bin/sh\necho "$@" > {seen}.args\ncat > {seen}.yaml\necho "pod/mine configured"\n')
    kubectl.chmod(kubectl.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setenv("KUBECTL", str(kubectl))
    # when
    outcome = fatia(tokens.alice, "attach", str(allocation.pk), "-f", str(path), "--apply", "--context", "dev")
    # then
    assert outcome.code == 0, outcome.err
    assert outcome.out.strip() == "pod/mine configured"
    assert Path(f"{seen}.args").read_text().split() == ["apply", "-f", "-", "--context", "dev"]
    (pod,) = yaml.safe_load_all(Path(f"{seen}.yaml").read_text())
    assert pod["spec"]["resourceClaims"][0]["resourceClaimName"] == allocation.claim_name


def test_attach_apply_reports_kubectls_failure_and_a_missing_kubectl(world, fatia, tokens, tmp_path, monkeypatch):  # noqa: F811
    allocation = active_request(world)
    path = tmp_path / "mine.yaml"
    path.write_text(POD)
    failing = tmp_path / "kubectl"
    failing.write_text('#!/bin/sh\ncat >/dev/null\necho "error: forbidden" >&2\nexit 1\n')
    failing.chmod(0o755)
    monkeypatch.setenv("KUBECTL", str(failing))
    refused = fatia(tokens.alice, "attach", str(allocation.pk), "-f", str(path), "--apply")
    monkeypatch.delenv("KUBECTL")
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    absent = fatia(tokens.alice, "attach", str(allocation.pk), "-f", str(path), "--apply")
    assert refused.code == 1 and "kubectl apply failed: error: forbidden" in refused.err
    assert absent.code == 2 and "kubectl" in absent.err
    assert os.environ["PATH"] == str(tmp_path / "empty")


def test_advise_prints_the_estimate_and_the_smallest_fit_per_pool(world, fatia, tokens):  # noqa: F811
    outcome = fatia(
        tokens.alice, "advise", "--model", "llama-3.1-8b", "--context", "8192", "--sequences", "4", "--pool", "h100"
    )
    assert outcome.code == 0, outcome.err
    assert "llama-3.1-8b: about" in outcome.out
    assert "3g.40gb" in outcome.out and "3 compute slices, 4 memory slots, 0.50 GPU-eq." in outcome.out


def test_advise_errors_name_the_field(world, fatia, tokens):  # noqa: F811
    unknown = fatia(tokens.alice, "advise", "--model", "mystery-9b")
    full_int4 = fatia(tokens.alice, "advise", "--params-b", "7", "--mode", "full", "--precision", "int4")
    assert unknown.code == 1 and "model:" in unknown.err
    assert full_int4.code == 1 and "precision:" in full_int4.err
