"""WatchJobs: ordered, resumable, gap-free, and indifferent to slow or many watchers."""

import asyncio

from federation.relay.events import EventHub
from federation.v1 import common_pb2, jobs_pb2
from tests.conftest import Api, make_queue
from tests.test_api_jobs import spec


async def collect(api: Api, count: int, **request: object) -> list[common_pb2.JobEvent]:
    out = []
    async for event in api.jobs.WatchJobs(jobs_pb2.WatchJobsRequest(**request)):
        out.append(event)
        if len(out) == count:
            break
    return out


async def submit(api: Api, n: int, prefix: str = "j") -> list[str]:
    ids = []
    for start in range(0, n, 100):
        batch = [spec(name=f"{prefix}{i}") for i in range(start, min(n, start + 100))]
        ids += [r.job_id for r in (await api.jobs.SubmitJobs(jobs_pb2.SubmitJobsRequest(specs=batch))).results]
    return ids


async def test_replay_and_resume_without_gaps_or_repeats(api: Api) -> None:
    await make_queue(api)
    ids = await submit(api, 50)
    everything = await asyncio.wait_for(collect(api, 50, after_sequence=0), 30)
    assert [e.sequence for e in everything] == list(range(1, 51))
    assert [e.job_id for e in everything] == ids
    assert {e.type for e in everything} == {"Submitted"}
    resumed = await asyncio.wait_for(collect(api, 25, after_sequence=25), 30)
    assert [e.sequence for e in resumed] == list(range(26, 51))


async def test_live_events_reach_many_watchers_in_the_same_order(api: Api) -> None:
    await make_queue(api)
    await submit(api, 5, "old")
    watchers = [asyncio.create_task(collect(api, 40)) for _ in range(40)]
    # Every stream open before the events it should see (however long a loaded machine takes to open them).
    deadline = asyncio.get_running_loop().time() + 60
    while api.server.hub.watchers < 40:
        assert asyncio.get_running_loop().time() < deadline, f"{api.server.hub.watchers} of 40 streams open"
        await asyncio.sleep(0.05)
    ids = await submit(api, 30)
    for job_id in ids[:10]:
        await api.jobs.CancelJob(jobs_pb2.CancelJobRequest(id=job_id))
    results = await asyncio.wait_for(asyncio.gather(*watchers), 60)
    expected = list(range(6, 46))  # only new events: the 5 older ones are not replayed
    for events in results:
        assert [e.sequence for e in events] == expected
    assert [e.type for e in results[0]][-10:] == ["Cancelled"] * 10


async def test_filters(api: Api) -> None:
    await make_queue(api, "a", "t1")
    await make_queue(api, "b", "t2")
    await api.jobs.SubmitJobs(jobs_pb2.SubmitJobsRequest(specs=[spec(name=f"x{i}", queue="ab"[i % 2])
                                                                for i in range(10)]))
    only_b = await asyncio.wait_for(collect(api, 5, after_sequence=0, tenant="t2"), 30)
    assert {e.queue for e in only_b} == {"b"}
    one = await asyncio.wait_for(collect(api, 1, after_sequence=0, job_id=only_b[2].job_id), 30)
    assert one[0].sequence == only_b[2].sequence


async def test_a_lagging_watcher_rereads_the_gap() -> None:
    """A watcher whose queue overflows is not waited for; it re-reads the gap and loses nothing."""
    log: list[dict[str, int]] = []

    async def load(after: int, upto: int | None) -> list[dict[str, int]]:
        return [e for e in log if e["seq"] > after and (upto is None or e["seq"] <= upto)][:7]

    async def current() -> int:
        return log[-1]["seq"] if log else 0

    hub = EventHub(load, current, last_seq=0, watcher_queue=4)
    stream = hub.watch(None)
    first = asyncio.create_task(anext(stream))
    await asyncio.sleep(0)  # the watcher subscribes
    log.extend({"seq": i} for i in range(1, 31))
    await hub._deliver_new()  # 30 events into a queue of 4: the watcher lags
    assert [s.lagging for s in hub._subscribers] == [True]
    seqs = [(await first)["seq"]] + [(await anext(stream))["seq"] for _ in range(29)]
    assert seqs == list(range(1, 31))
    log.extend({"seq": i} for i in range(31, 36))
    await hub._deliver_new()  # after catching up, it is live again
    assert [(await anext(stream))["seq"] for _ in range(5)] == list(range(31, 36))
    await stream.aclose()


async def test_a_hub_nobody_watches_reads_nothing_and_its_first_watcher_starts_from_the_log_as_it_stands() -> None:
    """Every local write wakes the hub. With nobody watching it reads nothing (it read where the log stood at each
    write: four round trips a submitted batch). The first watcher brings it up to date, so neither the hub nor the
    watcher reads again what was written before it joined; a watcher resuming from an earlier point reads that as its
    backlog, without gaps or repeats."""
    log: list[dict[str, int]] = []
    loads: list[tuple[int, int | None]] = []

    async def load(after: int, upto: int | None) -> list[dict[str, int]]:
        loads.append((after, upto))
        return [e for e in log if e["seq"] > after and (upto is None or e["seq"] <= upto)][:7]

    asked: list[int] = []  # where the log stood, each time the hub asked

    async def current() -> int:
        asked.append(log[-1]["seq"] if log else 0)
        return asked[-1]

    hub = EventHub(load, current, last_seq=0)
    for start in (1, 11, 21):  # three writes while nobody watches, each waking the hub
        log.extend({"seq": i} for i in range(start, start + 10))
        await hub._deliver_new()
    live = hub.watch(None)
    first = asyncio.create_task(anext(live))
    await asyncio.sleep(0)  # it joins
    assert asked == [30, 30]  # the watcher's "now", and the hub brought up to date as it joined: nothing before
    log.extend({"seq": i} for i in range(31, 36))
    await hub._deliver_new()
    assert [(await first)["seq"]] + [(await anext(live))["seq"] for _ in range(4)] == list(range(31, 36))
    assert loads and min(after for after, _ in loads) == 30  # from where the log stood when it joined
    resumed = hub.watch(10)  # joins a hub that is up to date: 11 to 35 are its backlog
    assert [(await anext(resumed))["seq"] for _ in range(25)] == list(range(11, 36))
    log.append({"seq": 36})
    await hub._deliver_new()
    assert (await anext(live))["seq"] == 36
    assert (await anext(resumed))["seq"] == 36
    await live.aclose()
    await resumed.aclose()


async def test_a_stalled_client_gets_every_event(api: Api) -> None:
    """Many events arrive while a client reads nothing; it still receives all, in order."""
    await make_queue(api)
    stream = api.jobs.WatchJobs(jobs_pb2.WatchJobsRequest())
    first = asyncio.create_task(stream.read())
    await asyncio.sleep(0.5)
    await submit(api, 1500)
    events = [await asyncio.wait_for(first, 30)]
    while len(events) < 1500:
        events.append(await asyncio.wait_for(stream.read(), 30))
    stream.cancel()
    assert [e.sequence for e in events] == list(range(1, 1501))
