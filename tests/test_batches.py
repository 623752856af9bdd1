"""How a writer gathers stream messages into batches (`federation.kernel.batches`): in order, never waiting, each
batch within its bytes."""

from __future__ import annotations

import asyncio
from itertools import pairwise

from hypothesis import given
from hypothesis import strategies as st

from federation.kernel.batches import drained, packed
from federation.v1 import agent_pb2


def _message(size: int) -> agent_pb2.AgentMessage:
    return agent_pb2.AgentMessage(log_chunk=agent_pb2.LogChunk(stream_id="s", data=b"x" * size))


@given(st.lists(st.integers(0, 600), max_size=40), st.integers(1, 50), st.integers(64, 2_000))
def test_batches_keep_the_order_take_only_what_is_queued_and_stay_within_their_bytes(
        sizes: list[int], most: int, most_bytes: int) -> None:
    queue: asyncio.Queue[agent_pb2.AgentMessage] = asyncio.Queue()
    messages = [_message(n) for n in sizes]
    for message in messages:
        queue.put_nowait(message)
    first = _message(1)
    taken = drained(first, queue, most)
    assert taken == [first, *messages[:most - 1]]  # never more than were queued, never past `most`
    assert queue.qsize() == max(len(messages) - (most - 1), 0)
    groups = packed(taken, most_bytes)
    assert [m for group in groups for m in group] == taken  # every message once, in order
    for group in groups:
        assert group
        assert len(group) == 1 or sum(m.ByteSize() for m in group) <= most_bytes  # a larger one goes alone
    # As few groups as the bytes allow: no two neighbours could have been one.
    for left, right in pairwise(groups):
        assert sum(m.ByteSize() for m in left) + right[0].ByteSize() > most_bytes
