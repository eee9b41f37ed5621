"""The run starts one control plane, whichever directories ask for it.

tests/deploy takes `control_plane` through a conftest of its own, which defines the fixture a second time; each
definition used to start a plane (20 to 60 s, half a gigabyte). This module runs after tests/deploy in a whole
run (and in any run that selects both), so a second plane of this run would still be up here.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.kube.conftest import ControlPlane


def apiservers_under(folder: Path) -> list[int]:
    """The pids of the kube-apiserver processes whose command line names a path under `folder`."""
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            argv = [arg.decode(errors="replace") for arg in (proc / "cmdline").read_bytes().split(b"\0") if arg]
        except OSError:  # gone meanwhile
            continue
        if argv and Path(argv[0]).name == "kube-apiserver" and any(str(folder) in arg for arg in argv[1:]):
            found.append(int(proc.name))
    return sorted(found)


def test_one_control_plane_serves_the_whole_run(
    control_plane: ControlPlane, tmp_path_factory: pytest.TempPathFactory
) -> None:
    # given: the session's plane, and every other directory's tests that ran before this one
    # when: this run's API servers are counted
    ours = apiservers_under(tmp_path_factory.getbasetemp())
    # then: one, the shared plane's
    assert len(ours) == 1, ours
    assert apiservers_under(control_plane.dir) == ours
