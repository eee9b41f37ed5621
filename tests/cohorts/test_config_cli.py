"""`fatia cohort` (issue 15) against a live server: a platform admin creates, joins, lists, changes and deletes;
exit code 1 when the portal refuses, 2 for bad arguments."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from django.conf import settings

from allocations.cli import main
from allocations.models import Cohort, Quota
from tenants.services import create_api_token
from tests.conftest import World


@pytest.fixture(autouse=True)
def private_config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Its own config file and none of the caller's FATIA_* or proxy settings (as in tests/cli/)."""
    monkeypatch.setenv("FATIA_CONFIG", str(tmp_path / "fatia" / "config.json"))
    for name in ("FATIA_URL", "FATIA_TOKEN", "FATIA_TIMEOUT", "http_proxy", "HTTP_PROXY", "https_proxy", "HTTPS_PROXY"):
        monkeypatch.delenv(name, raising=False)


def test_a_platform_admin_runs_the_cohort_commands(
    transactional_db: None,
    live_server: Any,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    world: World,
) -> None:
    Path(settings.STATIC_ROOT).mkdir(parents=True, exist_ok=True)
    monkeypatch.setenv("FATIA_URL", live_server.url)
    _, root = create_api_token(user=world.root, name="admin", scope="write", expires_at=None, actor=world.root)
    _, alice = create_api_token(user=world.alice, name="alice", scope="write", expires_at=None, actor=world.alice)

    def fatia(token: str, *argv: str) -> tuple[int, str, str]:
        capsys.readouterr()
        code = main(["--token", token, *argv])
        out, err = capsys.readouterr()
        return code, out, "".join(line for line in err.splitlines(True) if line.startswith("fatia"))

    code, out, _ = fatia(root, "cohort", "create", "--pool", "h100", "--name", "research", "--grace", "10")
    cohort = Cohort.objects.get()
    assert (code, out.splitlines()[0]) == (
        0,
        f"Cohort #{cohort.pk} research in h100: grace 10 min, 0 member(s), lent in total 0/0",
    )
    code, out, _ = fatia(
        root, "cohort", "join", str(cohort.pk), "--tenant", "team-a", "--borrow-compute", "7",
        "--lend-memory", "none",
    )  # fmt: skip
    assert (code, out.strip()) == (
        0,
        "Team A is in cohort research in H100 pool: guarantee 14/16, may borrow 7/-, may lend -/- (-: no limit).",
    )
    code, out, _ = fatia(alice, "cohort", "list")
    assert code == 0
    assert out.splitlines()[1].split() == ["TENANT", "GUARANTEE", "USED", "BORROWED", "CAN", "LEND", "MAY", "BORROW",
                                           "MAY", "LEND"]  # fmt: skip
    assert out.splitlines()[2].split() == ["Team", "A", "14/16", "0/0", "0/0", "14/16", "7/-", "-/-"]
    code, out, _ = fatia(root, "--json", "cohort", "set", str(cohort.pk), "--grace", "0")
    assert (code, json.loads(out)["reclaim_grace_minutes"]) == (0, 0)
    # a member may not change anything (1); bad arguments are 2
    code, _, err = fatia(alice, "cohort", "set", str(cohort.pk), "--name", "mine")
    assert (code, err) == (1, "fatia: error: Only platform admins can change this. (HTTP 403)\n")
    assert fatia(root, "cohort", "join", str(cohort.pk), "--tenant", "1", "--lend-compute", "lots")[0] == 2
    assert fatia(root, "cohort", "set", str(cohort.pk))[0] == 2
    assert fatia(root, "cohort", "set", str(cohort.pk), "--grace", "\u00b2")[0] == 2
    # "²" is a digit to str.isdigit, not to int(): a pool slug that does not exist, not a traceback
    code, _, err = fatia(root, "cohort", "list", "--pool", "\u00b2")
    assert (code, err) == (1, "fatia: error: No pool with slug '\u00b2'; `fatia pools` lists them.\n")
    code, _, err = fatia(root, "cohort", "list", "--pool", "999999")  # an id: said too, not "No cohorts."
    assert (code, err) == (1, "fatia: error: pool: No pool 999999. (HTTP 400)\n")
    # a tenant without quota in the pool: where a quota is set (not `fatia quota`, which only reads them)
    code, _, err = fatia(root, "cohort", "join", str(cohort.pk), "--tenant", "999999")
    assert (code, "Admin > Set quotas" in err, "`fatia quota`" in err) == (1, True, False)
    # a tenant is named by slug (as above) or id (below); neither is said so
    code, _, err = fatia(root, "cohort", "join", str(cohort.pk), "--tenant", "no-such-team")
    assert (code, err) == (
        1,
        "fatia: error: No tenant with slug or id 'no-such-team' that you can see; `fatia whoami` lists your tenants.\n",
    )
    code, out, _ = fatia(root, "cohort", "leave", "--pool", "h100", "--tenant", str(world.tenant_a.pk))
    assert (code, out.strip()) == (0, "Team A is in no cohort in H100 pool.")
    code, out, _ = fatia(root, "cohort", "delete", str(cohort.pk))
    assert (code, Cohort.objects.count(), Quota.objects.filter(cohort__isnull=False).count()) == (0, 0, 0)
    code, _, err = fatia(root, "cohort", "delete", str(cohort.pk))
    assert (code, err) == (1, f"fatia: error: Cohort {cohort.pk} not found. (HTTP 404)\n")
