"""The `fatia` CLI with time-sliced and MPS pools: shares by memory, the pool's isolation in `fatia pools`, and a
MIG-only tenant's refusal as a message and a non-zero exit."""

from __future__ import annotations

from typing import Any

from allocations.models import Allocation
from tenants import services as tenant_services
from tenants.services import create_api_token
from tests.cli.test_cli import fatia, private_config, server  # noqa: F401 - fixtures
from tests.sharing.conftest import Shared


def token_of(user: Any) -> str:
    _, raw = create_api_token(user=user, name="cli", scope="write", expires_at=None, actor=user)
    return raw


def share_args(*extra: str) -> list[str]:
    return ["request", "--pool", "l4-shared", "--count", "2", "--lease-hours", "4", "--purpose", "serving", *extra]


def test_a_share_request_by_memory_from_the_cli(shared: Shared, fatia: Any) -> None:  # noqa: F811
    token = token_of(shared.world.alice)
    # when
    outcome = fatia(token, *share_args("--memory-mib", "4096"))
    # then
    assert outcome.code == 0, outcome.err
    assert "2x 4096 MiB share in L4 shared" in outcome.out
    allocation = Allocation.objects.get(pool=shared.l4)
    assert (allocation.memory_mib, allocation.count) == (4096, 2)
    shown = fatia(token, "show", str(allocation.pk))
    assert "% of a GPU" in shown.out and "No isolation" in shown.out


def test_fatia_pools_says_what_a_shared_pool_isolates(shared: Shared, fatia: Any) -> None:  # noqa: F811
    outcome = fatia(token_of(shared.world.alice), "pools")
    assert outcome.code == 0
    assert "time-sliced: shares of whole GPUs by memory (23034 MiB per GPU)" in outcome.out
    assert "a crash or a memory hog hurts every tenant on the GPU" in outcome.out


def test_a_mig_only_tenant_is_refused_with_a_message_and_a_non_zero_exit(shared: Shared, fatia: Any) -> None:  # noqa: F811
    world = shared.world
    tenant_services.update_tenant_policy(tenant_id=world.tenant_a.pk, actor=world.root, weakest_isolation="mig")
    outcome = fatia(token_of(world.alice), *share_args("--memory-mib", "4096"))
    assert outcome.code != 0
    assert "accepts no GPU sharing weaker than MIG" in outcome.err
    assert not Allocation.objects.filter(pool=shared.l4).exists()


def test_a_share_without_a_memory_size_is_a_cli_message(shared: Shared, fatia: Any) -> None:  # noqa: F811
    outcome = fatia(token_of(shared.world.alice), *share_args())
    assert outcome.code != 0
    assert "memory_mib" in outcome.err
