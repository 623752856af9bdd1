"""GPU devices inside a node (issue 31): KAI's annotations read as KAI defines them; `fits` counts exactly the pods
that `assign` then places one after another; no device is ever given past its whole."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from federation.kernel.gpuask import (
    FRACTION,
    MEMORY,
    NUM_DEVICES,
    WHOLE,
    AskError,
    GpuAsk,
    ask_of,
)
from member_agent.devices import assign, fits, parse_devices


def test_asks_read_as_kai_defines_them() -> None:
    assert ask_of({}, 0) is None
    assert ask_of({}, 2) == GpuAsk(2)
    assert ask_of({FRACTION: "0.5"}, 0) == GpuAsk(1, 500)
    assert ask_of({FRACTION: "0.25", NUM_DEVICES: "2"}, 0) == GpuAsk(2, 250)
    assert ask_of({MEMORY: "20000"}, 0) == GpuAsk(1, WHOLE, 20000)
    assert GpuAsk(1, WHOLE, 20000).share_on(80000) == 250
    assert GpuAsk(1, WHOLE, 20001).share_on(80000) == 251  # rounds up: never less memory than asked
    assert GpuAsk(1, WHOLE, 90000).share_on(80000) > WHOLE  # more than one device has


@pytest.mark.parametrize(("annotations", "gpus", "names"), [
    ({FRACTION: "1.5"}, 0, FRACTION),
    ({FRACTION: "0"}, 0, FRACTION),
    ({FRACTION: "half"}, 0, FRACTION),
    ({FRACTION: "nan"}, 0, FRACTION),
    ({FRACTION: "0.0001"}, 0, FRACTION),
    ({FRACTION: "0.5", MEMORY: "100"}, 0, MEMORY),
    ({FRACTION: "0.5"}, 1, "nvidia.com/gpu"),
    ({MEMORY: "-3"}, 0, MEMORY),
    ({MEMORY: "1.5"}, 0, MEMORY),
    ({NUM_DEVICES: "2"}, 0, NUM_DEVICES),
    ({FRACTION: "0.5", NUM_DEVICES: "0"}, 0, NUM_DEVICES),
    ({FRACTION: "0.5", NUM_DEVICES: str(2**63 - 1)}, 0, NUM_DEVICES),  # beyond any node
    ({FRACTION: "0.5", NUM_DEVICES: "\u0663"}, 0, NUM_DEVICES),  # an Arabic-Indic 3, which int() reads
    ({FRACTION: "0.5", NUM_DEVICES: "1_0"}, 0, NUM_DEVICES),
    ({FRACTION: "0.5", NUM_DEVICES: "65"}, 0, NUM_DEVICES),
    ({MEMORY: str(2**40)}, 0, MEMORY),
])
def test_bad_asks_name_the_annotation(annotations: dict[str, str], gpus: int, names: str) -> None:
    with pytest.raises(AskError, match=names):
        ask_of(annotations, gpus)


def test_fractions_pack_on_the_fullest_device_and_whole_devices_stay_whole() -> None:
    free = [WHOLE, 600, WHOLE, 300]
    assert assign(free, 250, 1) == (3,)  # the device it leaves fullest
    assert assign(free, 500, 1) == (1,)
    assert assign(free, WHOLE, 2) == (0, 2)
    assert assign(free, WHOLE, 3) is None  # partly used devices are not whole
    assert fits(free, WHOLE, 1) == 2
    assert fits(free, 500, 1) == 2 + 1 + 2 + 0


def test_multi_device_fractions_keep_the_count() -> None:
    # Best fit would take the two one-slot devices and leave a single device with two slots: one pod, not two.
    free = [500, 500, WHOLE]
    assert fits(free, 500, 2) == 2
    first = assign(free, 500, 2)
    assert first is not None and 2 in first


def test_device_lists_round_trip() -> None:
    assert parse_devices("0,3") == (0, 3)
    assert parse_devices("") == ()
    assert parse_devices("x") == ()


shares = st.integers(min_value=1, max_value=WHOLE)


@settings(max_examples=300, deadline=None)
@given(free=st.lists(st.integers(min_value=0, max_value=WHOLE), min_size=0, max_size=8), share=shares,
       devices=st.integers(min_value=1, max_value=4))
def test_fits_counts_exactly_what_assign_places(free: list[int], share: int, devices: int) -> None:
    counted = fits(free, share, devices)
    left, placed = list(free), 0
    while (chosen := assign(left, share, devices)) is not None:
        assert len(set(chosen)) == devices
        for d in chosen:
            left[d] -= share
            assert left[d] >= 0  # never past the whole
        placed += 1
    assert placed == counted


@settings(max_examples=200, deadline=None)
@given(asks=st.lists(st.tuples(shares, st.integers(min_value=1, max_value=3)), max_size=30))
def test_mixed_asks_never_share_a_device_past_its_whole(asks: list[tuple[int, int]]) -> None:
    free = [WHOLE] * 8
    for share, devices in asks:
        before = fits(free, share, devices)
        chosen = assign(free, share, devices)
        assert (chosen is None) == (before == 0)
        for d in chosen or ():
            free[d] -= share
        assert all(0 <= f <= WHOLE for f in free)
        if chosen is not None:
            assert fits(free, share, devices) == before - 1
