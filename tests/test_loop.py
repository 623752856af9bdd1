"""The background loop leaves the event loop to the API between long passes, however often woken."""

import asyncio
from itertools import pairwise

from federation.control.loop import WakeLoop


async def test_a_pass_woken_at_once_waits_rest_times_as_long_as_the_last_took() -> None:
    loop = asyncio.get_running_loop()
    passes: list[tuple[float, float]] = []  # (start, end) of each pass

    async def step() -> None:
        start = loop.time()
        await asyncio.sleep(0.05 * (1 + len(passes) % 2))  # alternately 50 and 100 ms
        passes.append((start, loop.time()))
        wake.wake()  # woken again at once, as a flood of submits would

    wake = WakeLoop("test", period=60, step=step, rest=2)
    wake.start()
    wake.wake()
    while len(passes) < 5:
        await asyncio.sleep(0.05)
    await wake.stop()
    for (start, end), (next_start, _) in pairwise(passes):
        assert next_start - end >= 2 * (end - start) * 0.99, passes  # the loop clock's rounding


async def test_stopping_ends_a_rest_without_waiting_it_out() -> None:
    finished = asyncio.Event()

    async def step() -> None:
        await asyncio.sleep(0.01)
        finished.set()

    wake = WakeLoop("test", period=60, step=step, rest=100_000)  # would rest for about 1,000 s
    wake.start()
    wake.wake()
    await finished.wait()
    await asyncio.wait_for(wake.stop(), timeout=30)
