"""tests/ci_split.py, which splits the whole suite between deploy/test.sh's two pytest processes: every test file
runs exactly once, the control-plane directories in the side process, and a new file where there is slack."""

from __future__ import annotations

from tests import ci_split


def test_every_test_file_runs_in_exactly_one_process_and_the_control_plane_tests_in_the_side_one() -> None:
    main, side = ci_split.paths_for("main"), ci_split.paths_for("side")
    # the side process gets tests/kube and tests/deploy as directories, nothing under them one by one
    assert set(ci_split.CONTROL_PLANE_DIRS) <= set(side)
    assert not [path for path in main + side if path.startswith(("tests/kube/", "tests/deploy/"))]
    assert not [path for path in main if ci_split.on_side(path)]
    # the files moved out of the side's directories for the balance run in the main process
    assert [path for path in ci_split.MAIN if (ci_split.ROOT / path).exists()] == [
        path for path in main if ci_split.under(path, ci_split.MAIN)
    ]
    # every test module is run once: named by itself, or inside one of the side's directories
    side_dirs = tuple(f"{entry}/" for entry in side if not entry.endswith(".py"))
    run = [path for path in ci_split.test_files() if path.startswith(side_dirs)] + [
        path for path in main + side if path.endswith(".py")
    ]
    assert sorted(run) == ci_split.test_files()
    assert main == sorted(main) and side == sorted(side)


def test_a_new_file_goes_to_the_process_with_more_slack_and_moves_no_other() -> None:
    costs = {"tests/kube/test_a.py": 100.0, "tests/test_b.py": 70.0, "tests/test_c.py": 50.0}
    files = sorted(costs)
    where, load = ci_split.plan(files, costs)
    assert where == {"tests/kube/test_a.py": "side", "tests/test_b.py": "main", "tests/test_c.py": "main"}
    assert load == {"main": 120.0, "side": 100.0 + ci_split.SIDE_START_S}

    # when: a file without a measured cost appears
    new_where, new_load = ci_split.plan([*files, "tests/test_new.py"], costs)
    # then: it goes to the process with more slack (the side one here), and nothing else moves
    assert new_where == {**where, "tests/test_new.py": "side"}
    assert new_load["side"] == load["side"] + ci_split.NEW_FILE_S
    # and: into the main process when that one has the slack
    light = {**costs, "tests/test_b.py": 1.0}
    assert ci_split.plan([*files, "tests/test_new.py"], light)[0]["tests/test_new.py"] == "main"
    # and: a new file under a side directory stays with it, whatever the slack
    assert ci_split.plan([*files, "tests/kube/test_new.py"], light)[0]["tests/kube/test_new.py"] == "side"


def test_costs_are_read_back_per_file_from_junit_classnames() -> None:
    assert ci_split.file_of("tests.kube.test_faults") == "tests/kube/test_faults.py"
    assert ci_split.file_of("tests.test_asgi.TestStreams") == "tests/test_asgi.py"
    assert ci_split.file_of("") == ""
