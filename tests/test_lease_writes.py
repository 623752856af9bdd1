"""The scheduling lease beside the leader's own long writes: a write that takes longer than the lease does
not cost the leader its lease (its renewal goes on beside it), and a replica taking over a lease that ran out
waits for the writes still in flight under it, so none of them commits after another replica leads; and a leader
cut off from PostgreSQL still stops, its lease left to run out."""

import asyncio
import time

from sqlalchemy import text
from sqlalchemy.engine import URL

from federation.control.leader import Leadership
from federation.store.database import async_engine
from tests.netproxy import proxied

LEASE = 0.6


async def _leading(leadership: Leadership, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while not leadership.is_leader:
        assert time.monotonic() < deadline, "never led"
        await asyncio.sleep(0.05)


async def test_a_write_longer_than_the_lease_does_not_cost_the_leader_its_lease(db_url: URL) -> None:
    # A longer lease than the other test's: a renewal is given up after half of it, and on a loaded machine a round
    # trip can take a few tenths of a second, which is not what this test is about.
    lease = 5 * LEASE
    engine = async_engine(db_url)
    first = Leadership(db_url, lambda: None, lease=lease)
    second = Leadership(db_url, lambda: None, lease=lease)
    first.start()
    try:
        await _leading(first)
        second.start()
        epochs: list[tuple[int, int]] = []

        async def watch() -> None:
            while True:
                epochs.append((first.epoch, second.epoch))
                await asyncio.sleep(0.02)

        watcher = asyncio.create_task(watch())
        async with engine.begin() as conn:  # a fenced write that works (not idle) for two leases
            await first.fence.check(conn)
            await conn.execute(text("SELECT pg_sleep(:s)"), {"s": 2 * lease})
        # A renewal held up by the write would find the lease run out once the write commits (or the other replica
        # would take it): watched for a lease more.
        await asyncio.sleep(lease)
        watcher.cancel()
        assert len(epochs) > 20 and set(epochs) == {(1, 0)}  # led all along: renewed while its own write held the row
        await _leading(first)
    finally:
        await second.stop()
        await first.stop()
        await engine.dispose()


async def test_a_takeover_waits_for_the_writes_in_flight_under_the_lease_it_takes(db_url: URL) -> None:
    engine = async_engine(db_url)
    first = Leadership(db_url, lambda: None, lease=LEASE)
    second = Leadership(db_url, lambda: None, lease=LEASE)
    first.start()
    try:
        await _leading(first)
        async with engine.begin() as conn:
            await first.fence.check(conn)
            first._stopping.set()  # renews no more, without giving the lease back: it runs out under this write
            second.start()
            await conn.execute(text("SELECT pg_sleep(:s)"), {"s": 5 * LEASE})
            assert not second.is_leader  # the lease ran out long ago, but this write still holds it
        await _leading(second)
        assert second.epoch == first.epoch + 1
    finally:
        await second.stop()
        await first.stop()
        await engine.dispose()


async def test_a_leader_cut_off_from_postgresql_stops_and_its_lease_runs_out(db_url: URL) -> None:
    """Stopping gives the lease back at once when it can; when PostgreSQL does not answer (the proxy keeps the
    connection open and relays nothing), it gives up as a renewal does, and another replica leads once it expires."""
    proxy, through = proxied(db_url)
    first = Leadership(through, lambda: None, lease=LEASE)
    second = Leadership(db_url, lambda: None, lease=LEASE)
    first.start()
    try:
        await _leading(first)
        proxy.partition()
        async with asyncio.timeout(60):  # without a bound, the lease's release waited for an answer for ever
            await first.stop()
        second.start()
        await _leading(second)
    finally:
        proxy.close()
        await second.stop()
