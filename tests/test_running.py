"""The running gangs kept across cycles (`Running`) against the same gangs read afresh: after any sequence of gangs
starting, ending and changing, the sums per queue (a resource some gang names kept even at 0, as adding the gangs
up one by one keeps it), each cluster's preemptible gangs and each HyperJob's clusters are what a fresh read gives."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from federation.scheduling.model import RunningJob, summed_in_python
from federation.scheduling.running import Running, read

GANG = st.builds(
    RunningJob,
    id=st.sampled_from([f"g{i}" for i in range(12)]),
    queue=st.sampled_from(["a", "b", "c"]),
    cluster=st.sampled_from(["c0", "c1", "c2"]),
    priority=st.just(0),
    seq=st.just(0),
    request=st.dictionaries(st.sampled_from(["nvidia.com/gpu", "cpu", "memory"]), st.integers(0, 16), max_size=3),
    preemptible=st.booleans(),
    group=st.sampled_from(["", "", "h1", "h2"]),
)
EVENT = st.one_of(st.tuples(st.just("add"), GANG), st.tuples(st.just("discard"), st.sampled_from(
    [f"g{i}" for i in range(14)])))


def read_afresh(gangs: list[RunningJob]) -> tuple[object, ...]:
    preemptible: dict[str, set[str]] = {}
    groups: dict[str, list[str]] = {}
    for gang in gangs:
        if gang.preemptible:
            preemptible.setdefault(gang.cluster, set()).add(gang.id)
        if gang.group:
            groups.setdefault(gang.group, []).append(gang.cluster)
    return (summed_in_python([g.queue for g in gangs], [g.request for g in gangs]), preemptible,
            {h: sorted(c) for h, c in groups.items()})


def read_kept(kept: Running) -> tuple[object, ...]:
    return ({q: dict(u) for q, u in kept.usage().items()},
            {c: {g.id for g in gangs} for c, gangs in kept.preemptible().items()},
            {h: sorted(kept.clusters_of(h)) for h in ("h1", "h2") if kept.clusters_of(h)})


@settings(max_examples=400, deadline=None)
@given(st.lists(EVENT, max_size=60))
def test_kept_gangs_read_as_the_same_gangs_afresh(events: list[tuple[str, object]]) -> None:
    kept, gangs = Running(), {}
    handed_out = []
    for kind, what in events:
        if kind == "add":
            assert isinstance(what, RunningJob)
            gangs.pop(what.id, None)  # a gang that changed is the newest of its id
            gangs[what.id] = what
            kept.add(what)
        else:
            assert isinstance(what, str)
            gangs.pop(what, None)
            kept.discard(what)
        assert read_kept(kept) == read_afresh(list(gangs.values()))
        assert len(kept) == len(gangs) and sorted(g.id for g in kept) == sorted(gangs)
        handed_out.append((kept.preemptible(), {c: [g.id for g in listed] for c, listed in kept.preemptible().items()}))
    for lists, ids in handed_out:  # a list handed out to a cycle is never changed after
        assert {c: [g.id for g in listed] for c, listed in lists.items()} == ids
    fresh = Running(gangs.values())
    assert read_kept(fresh) == read_kept(kept) and read(kept) is kept
    assert read_kept(read(list(gangs.values()))) == read_afresh(list(gangs.values()))
