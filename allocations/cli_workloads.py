"""`fatia manifest`, `fatia attach` and `fatia advise` (issue 17). Standard library only, like allocations/cli.py.

    fatia manifest 12 --kind vllm --model meta-llama/Llama-3.1-8B-Instruct --arg=--max-model-len --arg=8192
    fatia attach 12 -f my-workload.yaml --container trainer            # prints the manifest with the claim
    fatia attach 12 -f my-workload.yaml --apply                         # kubectl apply with your kubeconfig
    fatia advise --model llama-3.1-8b --precision bf16 --context 8192 --sequences 4

The portal computes manifests and attachments; `--apply` runs your own kubectl, with your own kubeconfig and
context, so the portal never holds a credential of yours for the cluster.
"""

from __future__ import annotations

import argparse
import os
import shlex
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from allocations import cli

Command = Callable[[str, cli.Handler, str], argparse.ArgumentParser]
KINDS = ("pod", "job", "deployment", "notebook", "vllm")
KUBECTL_TIMEOUT_S = 120


class UsageError(cli.CliError):
    exit_code = cli.EXIT_USAGE


def cmd_manifest(args: argparse.Namespace, out: cli.Output) -> int:
    api = cli.client(args)
    params = [("kind", args.kind)]
    for key in ("name", "image", "command", "model", "share"):
        value = getattr(args, key)
        if value is not None:
            params.append((key, str(value)))
    if args.arg:
        params.append(("args", " ".join(shlex.quote(a) for a in args.arg)))
    answer = cli._not_found_is_named(args.id, lambda: api.get(cli._allocation_path(args.id, "manifests"), params))
    if args.output:
        Path(args.output).write_text(answer["yaml"], encoding="utf-8")
        cli.emit(out, answer, lambda: f"Wrote {args.kind} manifests for request #{args.id} to {args.output}.")
        return cli.EXIT_OK
    cli.emit(out, answer, lambda: str(answer["yaml"]).rstrip("\n"))
    return cli.EXIT_OK


def _read_manifest(path: str) -> str:
    if path == "-":
        return sys.stdin.read()
    try:
        return Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise UsageError(f"No such file: {path}.") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise UsageError(f"Cannot read {path}: {exc}.") from None


def cmd_attach(args: argparse.Namespace, out: cli.Output) -> int:
    manifest = _read_manifest(args.file)
    kubectl = _kubectl() if args.apply else ""
    api = cli.client(args)
    body: dict[str, Any] = {"manifest": manifest}
    if args.container:
        body["containers"] = args.container
    if args.share is not None:
        body["share"] = args.share
    answer = cli._not_found_is_named(args.id, lambda: api.post(cli._allocation_path(args.id, "attach"), body))
    if not args.apply:
        cli.emit(out, answer, lambda: str(answer["yaml"]).rstrip("\n"))
        return cli.EXIT_OK
    return _apply(kubectl, str(answer["yaml"]), args)


def _kubectl() -> str:
    found = os.environ.get("KUBECTL") or shutil.which("kubectl")
    if not found:
        raise UsageError("--apply runs kubectl, which is not on PATH: install it or set KUBECTL to its path.")
    return found


def _apply(kubectl: str, manifest: str, args: argparse.Namespace) -> int:
    """kubectl apply -f - with the user's kubeconfig (KUBECONFIG, ~/.kube/config or --kubeconfig)."""
    command = [kubectl, "apply", "-f", "-"]
    if args.kubeconfig:
        command += ["--kubeconfig", args.kubeconfig]
    if args.context:
        command += ["--context", args.context]
    try:
        done = subprocess.run(  # noqa: S603  # the user's own kubectl, arguments as a list
            command, input=manifest, text=True, capture_output=True, timeout=KUBECTL_TIMEOUT_S, check=False
        )
    except subprocess.TimeoutExpired:
        raise cli.CliError(f"kubectl did not finish in {KUBECTL_TIMEOUT_S} s.") from None
    except OSError as exc:
        raise UsageError(f"Cannot run {kubectl}: {exc}.") from None
    sys.stdout.write(done.stdout)
    if done.returncode != 0:
        message = done.stderr.strip().splitlines()[-1] if done.stderr.strip() else f"exit status {done.returncode}"
        raise cli.CliError(f"kubectl apply failed: {message}")
    return cli.EXIT_OK


def cmd_advise(args: argparse.Namespace, out: cli.Output) -> int:
    api = cli.client(args)
    params = [
        (key, str(value))
        for key, value in (
            ("model", args.model),
            ("params_b", args.params_b),
            ("precision", args.precision),
            ("context_length", args.context),
            ("sequences", args.sequences),
            ("mode", args.mode),
        )
        if value is not None
    ]
    if args.pool is not None:
        params.append(("pool", str(cli.resolve_pool(api, args.pool))))
    answer = api.get("/advice/", params)
    cli.emit(out, answer, lambda: describe_advice(answer))
    return cli.EXIT_OK


def describe_advice(answer: dict[str, Any]) -> str:
    e = answer["estimate_gib"]
    lines = [
        f"{answer['model']}: about {e['total']} GiB (weights {e['weights']}, KV cache {e['kv_cache']}, "
        f"activations {e['activations']}, training state {e['training_state']}, overhead {e['overhead']})."
    ]
    lines += [f"Note: {n}" for n in answer.get("notes") or []]
    rows = []
    for p in answer["pools"]:
        cost = p.get("cost")
        if cost:
            choice = p["profile"] or f"{p['share_memory_mib'] // 1024} GiB share"
            units = p["units"]
            price = (
                f"{cost['compute_slices']} {units['compute']}, {cost['memory_slices']} {units['memory']}, "
                f"{cost['gpu_equivalents']:.2f} GPU-eq."
            )
            rows.append((p["pool_name"], p["gpu_model"], choice, price, p["fits_now"]))
        else:
            why = p["refused"][-1]["reason"] if p["refused"] else "no profile offered"
            rows.append((p["pool_name"], p["gpu_model"], "does not fit", why, 0))
    lines.append(cli.table(["POOL", "GPU", "SMALLEST FIT", "COST", "FREE NOW"], rows))
    return "\n".join(lines)


def add_commands(command: Command) -> None:
    """Register the three commands on the `fatia` parser (cli.build_parser passes its `command` helper)."""
    sub = command("manifest", cmd_manifest, "ready-to-apply manifests that use an active request's slices")
    sub.add_argument("id", type=cli._positive_int)
    sub.add_argument("--kind", required=True, choices=KINDS)
    sub.add_argument("--name", help="object name (default per kind)")
    sub.add_argument("--image", help="container image (default per kind)")
    sub.add_argument("--command", help="pod, job, deployment: the command, shell-quoted")
    sub.add_argument("--model", help="vllm: the model to serve")
    sub.add_argument("--arg", action="append", metavar="ARG", help="vllm: one more server argument (repeat)")
    sub.add_argument("--share", type=int, help="shared pools: only this share's workload")
    sub.add_argument("-o", "--output", metavar="FILE", help="write the YAML to FILE")

    sub = command("attach", cmd_attach, "add an active request's claims to your own manifest")
    sub.add_argument("id", type=cli._positive_int)
    sub.add_argument("-f", "--file", required=True, metavar="FILE", help="your manifest (YAML; - for stdin)")
    sub.add_argument("--container", action="append", metavar="NAME", help="only this container (repeat; default all)")
    sub.add_argument("--share", type=int, help="shared pools: which share this workload takes")
    sub.add_argument("--apply", action="store_true", help="run `kubectl apply -f -` with your kubeconfig")
    sub.add_argument("--kubeconfig", help="with --apply: kubectl's --kubeconfig")
    sub.add_argument("--context", help="with --apply: kubectl's --context")

    sub = command("advise", cmd_advise, "which slice a model needs, in every pool")
    sub.add_argument("--model", help="a known model, e.g. llama-3.1-8b")
    sub.add_argument("--params-b", type=float, help="parameters in billions (for a model the portal does not know)")
    sub.add_argument("--precision", choices=["fp32", "bf16", "fp8", "int8", "int4"])
    sub.add_argument("--context", type=int, help="tokens per sequence (default 4096)")
    sub.add_argument("--sequences", type=int, help="concurrent sequences, or the batch size (default 1)")
    sub.add_argument("--mode", choices=["serve", "full", "lora"], help="serve (default) or fine-tune")
    sub.add_argument("--pool", help="only this pool (slug or id)")
