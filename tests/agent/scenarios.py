"""Fake NVML scenarios shared by the agent's tests (and a place to build the benchmark's)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from agent.fake_nvml import FakeNvml

H100 = "NVIDIA H100 80GB HBM3"
A100 = "NVIDIA A100-SXM4-40GB"


def two_gpus() -> dict[str, Any]:
    """An H100 (GPM) with a 3g.40gb running one process and an idle 1g.10gb; an A100 with MIG on (no GPM)
    holding one 2g.10gb."""
    return {
        "driver_version": "580.95.05",
        "gpus": [
            {
                "product": H100,
                "instances": [
                    {"profile": "3g.40gb", "start": 4, "sm_util": 40.0, "processes": [{"pid": 4242, "used_mib": 8192}]},
                    {"profile": "1g.10gb", "start": 0},
                ],
            },
            {"product": A100, "ecc": None, "instances": [{"profile": "2g.10gb", "start": 2}]},
        ],
    }


def full_node(gpus: int = 8) -> dict[str, Any]:
    """``gpus`` H100s, each with seven 1g.10gb instances, each running one process."""
    return {
        "gpus": [
            {
                "product": H100,
                "instances": [
                    {
                        "profile": "1g.10gb",
                        "start": s,
                        "sm_util": 10.0 * s,
                        "processes": [{"pid": 1000 + 10 * g + s, "used_mib": 512 * (s + 1)}],
                    }
                    for s in range(7)
                ],
            }
            for g in range(gpus)
        ]
    }


def fake(scenario: dict[str, Any]) -> FakeNvml:
    return FakeNvml(scenario)


def write(tmp_path: Path, scenario: dict[str, Any]) -> Path:
    path = tmp_path / "scenario.json"
    path.write_text(json.dumps(scenario), encoding="utf-8")
    return path
