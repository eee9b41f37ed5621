"""API views and tasks reach tenant-owned rows only through for_user() querysets or services.

This is the lint rule of STYLE.md section 4, as a test: it reads the source, so a new endpoint that
loads an Allocation by id without tenant scope fails here before it can leak another tenant's data.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TENANT_OWNED = {"Allocation", "Quota", "QuotaChangeRequest", "AuditEvent", "Membership", "Tenant"}
CHECKED = sorted([*ROOT.glob("*/api/*.py"), ROOT / "allocations" / "tasks.py"])


def unscoped_uses(path: Path) -> list[str]:
    return [f"{path.relative_to(ROOT)}:{use}" for use in unscoped_uses_in(path)]


def unscoped_uses_in(path: Path) -> list[str]:
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        # Model.objects.<method>(...) where <method> is not for_user
        if (
            isinstance(node, ast.Attribute)
            and isinstance(node.value, ast.Attribute)
            and node.value.attr == "objects"
            and isinstance(node.value.value, ast.Name)
            and node.value.value.id in TENANT_OWNED
            and node.attr != "for_user"
        ):
            found.append(f"{node.lineno} {node.value.value.id}.objects.{node.attr}")
    return found


def test_the_check_reads_the_views_and_the_tasks():
    names = {p.relative_to(ROOT).as_posix() for p in CHECKED}
    assert {"allocations/api/views.py", "tenants/api/views.py", "allocations/tasks.py"} <= names


def test_api_views_and_tasks_never_load_tenant_owned_rows_without_for_user():
    assert [use for path in CHECKED for use in unscoped_uses(path)] == []


def test_the_check_finds_an_unscoped_lookup(tmp_path):
    # given: the mistake the check exists for
    leaky = tmp_path / "views.py"
    leaky.write_text("def get(pk):\n    return Allocation.objects.get(pk=pk)\n")
    # when / then
    assert [u.split(" ", 1)[1] for u in unscoped_uses_in(leaky)] == ["Allocation.objects.get"]
