"""Stream messages sent in batches: a burst of orders or reports costs one stream message, not one each.

Each message written on a gRPC stream costs both ends a round of the event loop and of gRPC's own machinery, as
much as building a small message many times over; with one-GPU jobs flowing by the thousand it was a quarter of the
agent's time. So whoever writes takes, with the message it waited for, those already queued behind it (never waiting
for more: a lone message goes at once), and sends them as one batch, in order; the reader handles a batch's messages
one after the other, as if each had come alone. Each side says at the stream's start that it reads batches
(`Register.batches`, `Registered.batches`): a peer of an earlier release is sent single messages.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable, Sequence
from typing import Protocol, TypeVar

BATCH_MESSAGES = 256  # messages in one batch at most
BATCH_BYTES = 1 << 20  # encoded bytes of one batch at most (a larger message goes alone): well inside gRPC's 4 MiB


class Sized(Protocol):
    def ByteSize(self) -> int: ...


M = TypeVar("M", bound=Sized)


def drained(first: M, queue: asyncio.Queue[M], most: int = BATCH_MESSAGES) -> list[M]:
    """`first`, then what is queued behind it now, in order, up to `most` messages in all."""
    taken = [first]
    while len(taken) < most and not queue.empty():
        taken.append(queue.get_nowait())
    return taken


def packed(messages: Sequence[M], most_bytes: int = BATCH_BYTES) -> list[list[M]]:
    """The messages in order, in consecutive groups of at most `most_bytes` encoded (a larger message alone)."""
    groups: list[list[M]] = []
    size = most_bytes + 1
    for message in messages:
        n = message.ByteSize()
        if size + n > most_bytes:
            groups.append([])
            size = 0
        groups[-1].append(message)
        size += n
    return groups


def batched(messages: Sequence[M], wrap: Callable[[list[M]], M], batches: bool = True) -> Iterable[M]:
    """The messages as stream messages: each group of `packed` as one (`wrap`, a group of one as itself), or, to a
    peer that reads no batches, each alone."""
    if not batches:
        return messages
    return (group[0] if len(group) == 1 else wrap(group) for group in packed(messages))
