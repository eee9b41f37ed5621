"""Two bookings for the last room at once (issue 15): the pool's row lock decides them one after the other."""

from __future__ import annotations

import threading

import pytest
from django.db import connection

from allocations.models import Booking
from tenants.errors import InvalidInput
from tests.bookings.helpers import book, small_pool
from tests.conftest import World

pytestmark = pytest.mark.django_db(transaction=True)


def test_two_concurrent_bookings_for_the_last_room_exactly_one_wins(world: World):
    assert connection.vendor == "postgresql"
    small = small_pool(world, gpus=1)
    barrier = threading.Barrier(2)
    outcomes: dict[str, str] = {}

    def worker(who: str) -> None:
        user = world.alice if who == "a" else world.charlie
        try:
            barrier.wait()
            outcomes[who] = book(world, small.pool, profile="7g.80gb", start=10, end=12, actor=user).status
        except InvalidInput as exc:
            outcomes[who] = exc.errors["starts_at"][0]
        finally:
            connection.close()

    threads = [threading.Thread(target=worker, args=(who,)) for who in ("a", "b")]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    winners = [who for who, outcome in outcomes.items() if outcome == Booking.Status.PENDING]
    assert len(winners) == 1, outcomes
    loser = ({"a", "b"} - set(winners)).pop()
    winner_booking = Booking.objects.get()
    assert f"booking #{winner_booking.pk}" in outcomes[loser]
