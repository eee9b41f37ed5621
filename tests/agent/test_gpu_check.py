"""deploy/gpu-check runs against the fake NVML, prints what the agent would report, and changes nothing; the
agent's modules import without Django."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tests.agent.scenarios import H100, two_gpus, write

ROOT = Path(__file__).resolve().parents[2]


def _gpu_check(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(ROOT / "deploy" / "gpu-check"), *args],
        env={"PYTHON": sys.executable, "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_gpu_check_prints_the_agents_payloads_as_json(tmp_path):
    # when
    result = _gpu_check("--json", "--fake", str(write(tmp_path, two_gpus())), "--node", "gpu-node-1")

    # then
    assert result.returncode == 0, result.stderr
    out = json.loads(result.stdout)
    gpu = out["inventory"]["gpus"][0]
    assert (out["inventory"]["node"], gpu["product"], gpu["mig"]) == ("gpu-node-1", H100, {"current": 1, "pending": 1})
    assert [(i["profile"], i["start"], i["size"]) for i in gpu["instances"]] == [("1g.10gb", 0, 1), ("3g.40gb", 4, 4)]
    assert [(m["profile"], m["mem"], m["procs"], m["util"]) for m in out["telemetry"]["gpus"][0]["mig"]] == [
        ("1g.10gb", 0, 0, 0.0),
        ("3g.40gb", 8192, 1, 40.0),
    ]


def test_gpu_check_prints_a_readable_summary(tmp_path):
    result = _gpu_check("--fake", str(write(tmp_path, two_gpus())))
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0] == "driver 580.95.05, 2 GPU(s)"
    assert "  MIG on; utilisation source: gpm" in lines
    assert "  profile 3g.40gb        id  9  slices 3  max 2  40448 MiB  60 SMs  placements {0,4}:4" in lines


def test_gpu_check_says_what_is_wrong_and_exits_non_zero_on_a_bad_scenario(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text('{"gpus": [{"product": "NVIDIA Nonesuch"}]}', encoding="utf-8")
    result = _gpu_check("--fake", str(bad))
    assert result.returncode == 1
    assert result.stderr.startswith("gpu-check: cannot read NVML: no GPU model 'NVIDIA Nonesuch' in the MIG catalog")


def test_the_agent_imports_and_runs_without_django(tmp_path):
    # given: an interpreter where importing Django fails
    code = (
        "import sys; sys.modules['django'] = None\n"
        "from agent.__main__ import main\n"
        "from agent.nvml import Nvml\n"
        "from agent.runner import load_library\n"
        f"Nvml(load_library({str(write(tmp_path, two_gpus()))!r})).sample()\n"
        "print('ok')\n"
    )

    # when
    result = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120, check=False
    )

    # then
    assert (result.returncode, result.stdout, result.stderr) == (0, "ok\n", "")


def test_the_agent_refuses_to_start_without_its_settings_and_says_which():
    result = subprocess.run(
        [sys.executable, "-m", "agent"],
        cwd=ROOT,
        env={"PATH": "/usr/bin:/bin", "FATIA_AGENT_PORTAL_URL": "https://portal.example"},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 2
    assert result.stderr == (
        "fatia agent: FATIA_AGENT_TOKEN (or FATIA_AGENT_TOKEN_FILE) must hold this node's agent credential, or "
        "FATIA_AGENT_BOOTSTRAP_TOKEN_FILE name the pod's projected ServiceAccount token\n"
    )
