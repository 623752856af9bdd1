"""The vectorised cluster choice picks exactly what the rule, checked one cluster at a time, picks."""

from dataclasses import replace

from hypothesis import given, settings
from hypothesis import strategies as st

from federation.scheduling.choice import ClusterTable, PreemptiblePool, summary
from federation.scheduling.fit import ClusterView, JobView, TierFree, cannot_run, check, labels_unmatched, selects
from federation.scheduling.reservations import Reservations

GPU, CPU = "nvidia.com/gpu", "cpu"


@st.composite
def cluster(draw: st.DrawFn, name: str, least: int = 0) -> ClusterView:
    """A cluster whose tier maxima grow with the tier and never exceed its free totals; it may
    report fewer tiers, or none (an inventory without HyperNodes, or with no nodes summarised).
    `least`: GPUs (and eight CPUs each) it has free at least."""
    free = {GPU: draw(st.integers(least, 64)), CPU: draw(st.integers(least * 8, 512))}
    tiers, below = [], {GPU: 0, CPU: 0}
    for tier, tier_name in enumerate(["node", "leaf", "spine"][:draw(st.integers(0, 3))]):
        most = {r: draw(st.integers(below[r], free[r])) for r in free}
        tiers.append(TierFree(tier, tier_name, most))
        below = most
    node_labels = draw(st.sampled_from([None, frozenset(), frozenset({"os=linux"}),
                                        frozenset({"os=linux", "disk=ssd"})]))
    hist = draw(st.none() | st.lists(st.integers(0, 4), min_size=1, max_size=9).map(tuple)) if not least else None
    return ClusterView(name, {"zone": draw(st.sampled_from(["a", "b"]))}, free, tiers, node_labels=node_labels,
                       gpu_free_nodes=hist)


@st.composite
def job(draw: st.DrawFn, most_gpus: int = 48) -> JobView:
    request = {GPU: draw(st.integers(1, most_gpus)), CPU: draw(st.integers(0, most_gpus * 5))}
    largest = {r: draw(st.integers(0, a)) for r, a in request.items()}
    mode = draw(st.sampled_from(["", "soft", "hard"]))
    selector = draw(st.sampled_from([{}, {"zone": "a"}, {"zone": "b"}]))
    node_selector = draw(st.sampled_from([(), ("os=linux",), ("disk=ssd", "os=linux")]))
    return JobView("j", request, largest, selector, mode, draw(st.integers(1, 2)) if mode == "hard" else 0,
                   node_selector=node_selector, pod_gpus=draw(st.sampled_from([0, 1, 2, 4, 8])))


@settings(max_examples=300, deadline=None)
@given(st.lists(st.integers(0, 9), min_size=1, max_size=6, unique=True).flatmap(
    lambda ids: st.tuples(*[cluster(f"c{i}") for i in ids])), job(), st.data())
def test_vectorised_choice_matches_the_rule(clusters: tuple[ClusterView, ...], gang: JobView,
                                            data: st.DataObject) -> None:
    capacity = {GPU: 64 * len(clusters), CPU: 512 * len(clusters)}
    table = ClusterTable(list(clusters), capacity)
    refused = {c.name: "rejected it" for c in clusters if data.draw(st.booleans(), label=f"refuse {c.name}")}
    assert table.best(gang, refused) == table._best_slowly(gang, refused)
    chosen = table.best(gang, {})
    if chosen is not None:  # after a reservation, the arrays and the rule still agree
        table.reserve(gang, chosen)
        assert table.best(gang, {}) == table._best_slowly(gang, {})


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(0, 9), min_size=1, max_size=8, unique=True).flatmap(
    lambda ids: st.tuples(*[cluster(f"c{i}") for i in ids])), st.lists(job(), min_size=1, max_size=3),
    st.lists(st.integers(0, 2), min_size=1, max_size=30))
def test_the_per_shape_index_follows_every_reservation(clusters: tuple[ClusterView, ...], shapes: list[JobView],
                                                       order: list[int]) -> None:
    """Asked for shape after shape while gangs are reserved, the index (rescoring one cluster at a time
    after a few changes, all at once after many) still picks what the rule picks."""
    capacity = {GPU: 64 * len(clusters), CPU: 512 * len(clusters)}
    table = ClusterTable(list(clusters), capacity)
    for n in order:
        gang = shapes[n % len(shapes)]
        chosen = table.best(gang, {})
        assert chosen == table._best_slowly(gang, {})
        if chosen is not None:
            table.reserve(gang, chosen)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(0, 9), min_size=1, max_size=10, unique=True).flatmap(
    lambda ids: st.tuples(*[cluster(f"c{i}", least=32) for i in ids])), st.lists(job(12), min_size=1, max_size=3),
    st.lists(st.tuples(st.integers(0, 2), st.booleans(), st.integers(0, 9)), min_size=20, max_size=60),
    st.integers(1, 8))
def test_where_a_gang_would_fit_but_for_reservations_follows_every_reservation(
        clusters: tuple[ClusterView, ...], shapes: list[JobView], steps: list[tuple[int, bool, int]],
        every: int) -> None:
    """Remembered per shape between reservations, the answer is still what the free and held room say now: asked
    after every change, or after several (worked out again row by row for a few changed clusters, as arrays for
    more)."""
    capacity = {GPU: 64 * len(clusters), CPU: 512 * len(clusters)}
    table = ClusterTable(list(clusters), capacity)
    views = {c.name: c for c in clusters}
    held: dict[str, dict[str, int]] = {c.name: {} for c in clusters}
    for step, (n, holds, at) in enumerate(steps):
        for other in shapes if step % every == 0 else ():
            expected = next((name for name in table.names if held[name] and selects(other, views[name]) and all(
                table.free_of(name, r) + held[name].get(r, 0) >= a for r, a in other.request.items())), None)
            assert table.fits_without_reservations(other) == expected
        gang = shapes[n % len(shapes)]
        # Any cluster it fits, not only the best: many clusters change between two asks
        chosen = table.names[at % len(table.names)]
        if check(gang, table.view(chosen)) is not None:
            chosen = None
        if chosen is not None and holds:
            table.hold(gang, chosen)
            for r, a in gang.request.items():
                held[chosen][r] = held[chosen].get(r, 0) + a
        elif chosen is not None:
            table.reserve(gang, chosen)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(0, 16), min_size=6, max_size=12), st.lists(st.integers(1, 6), min_size=1, max_size=3),
       st.lists(st.tuples(st.integers(0, 2), st.integers(0, 11), st.booleans()), min_size=10, max_size=60),
       st.integers(1, 8))
def test_many_clusters_changed_between_two_asks(free: list[int], gpus: list[int], steps: list[tuple[int, int, bool]],
                                                every: int) -> None:
    """Gangs held or sent anywhere, several clusters changing between two asks of a shape: the answer kept per shape
    is the first cluster whose free plus held room covers it, where room is held."""
    clusters = [ClusterView(f"c{i:02}", {}, {GPU: gpu}, []) for i, gpu in enumerate(free)]
    table = ClusterTable(clusters, {GPU: sum(free)})
    shapes = [JobView(f"j{n}", {GPU: n}, {GPU: 1}, {}) for n in gpus]
    held = [0] * len(free)
    for step, (n, at, holds) in enumerate(steps):
        for other in shapes if step % every == 0 else ():
            wanted = other.request[GPU]
            expected = next((c.name for i, c in enumerate(clusters) if held[i] and
                             table.free_of(c.name, GPU) + held[i] >= wanted), None)
            assert table.fits_without_reservations(other) == expected
        gang, i = shapes[n % len(shapes)], at % len(clusters)
        if holds:
            table.hold(gang, clusters[i].name)
            held[i] += gang.request[GPU]
        else:
            table.reserve(gang, clusters[i].name)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(0, 9), min_size=1, max_size=8, unique=True).flatmap(
    lambda ids: st.tuples(*[cluster(f"c{i}") for i in ids])), st.lists(job(), min_size=1, max_size=3),
    st.lists(st.tuples(st.integers(0, 2), st.sampled_from(["reserve", "hold", "save", "restore"])), min_size=1,
             max_size=30))
def test_a_clusters_view_kept_between_reservations_is_the_view_built_now(
        clusters: tuple[ClusterView, ...], shapes: list[JobView], steps: list[tuple[int, str]]) -> None:
    """Views are kept per cluster until it takes work (or a trial is undone); each one read is the one its
    free room, tiers and nodes give now, and so are the reasons read from them."""
    capacity = {GPU: 64 * len(clusters), CPU: 512 * len(clusters)}
    table = ClusterTable(list(clusters), capacity)
    saved = None
    for n, step in steps:
        gang = shapes[n % len(shapes)]
        if step == "save":
            saved = table.save()
        elif step == "restore" and saved is not None:
            table.restore(saved)
        elif (chosen := table.best(gang, {})) is not None:
            (table.hold if step == "hold" else table.reserve)(gang, chosen)
        kept = {name: table.view(name) for name in table.names}
        table._built.clear()
        assert kept == {name: table.view(name) for name in table.names}


def test_a_shape_that_fits_nowhere_is_remembered_with_its_reasons() -> None:
    table = ClusterTable([ClusterView("c1", {}, {GPU: 8}, [TierFree(0, "node", {GPU: 8})])], {GPU: 8})
    big = JobView("big", {GPU: 16}, {GPU: 8})
    assert table.fits_nowhere(big) is None
    assert table.best(big, {}) is None
    assert list(table.reasons(big, {})) == ["c1: not enough free: nvidia.com/gpu 8/16 free"]
    assert table.fits_nowhere(JobView("same-shape", {GPU: 16}, {GPU: 8})) == (
        "no ready cluster fits: c1: not enough free: nvidia.com/gpu 8/16 free")


@settings(max_examples=500, deadline=None)
@given(st.lists(st.integers(0, 9), min_size=1, max_size=8, unique=True).flatmap(
    lambda ids: st.tuples(*[cluster(f"c{i}") for i in ids])), job(most_gpus=96), st.data())
def test_each_clusters_reason_read_when_asked_is_the_reason_checked_there(
        clusters: tuple[ClusterView, ...], gang: JobView, data: st.DataObject) -> None:
    """Each cluster's reason, found over the arrays for all clusters at once, is what checking that cluster alone
    says (`fit.check`), as the cluster stood when asked: details are formatted only when read, after the cycle has
    taken more room, and a summary of many reads the kinds alone. Some clusters are too small whatever runs there
    (their capacity, or MIG slices they could cut, said or not), some refused the gang, some took gangs before."""
    views = [replace(c, capacity={GPU: c.free[GPU] + data.draw(st.integers(0, 64), label=f"{c.name} capacity"),
                                  CPU: 1024}) if data.draw(st.booleans(), label=f"{c.name} reports capacity") else c
             for c in clusters]
    views = [replace(c, partitionable={"nvidia.com/mig-1g.10gb": 7}) if data.draw(
        st.booleans(), label=f"{c.name} could cut MIG slices") else c for c in views]
    table = ClusterTable(views, {GPU: 128 * len(views), CPU: 1024 * len(views)})
    others = data.draw(st.lists(job(most_gpus=16), max_size=6), label="gangs placed before")
    for other in others:
        if (chosen := table.best(other, {})) is not None:
            table.reserve(other, chosen)
    refused = {c.name: data.draw(st.sampled_from(["rejected it", "refused for good: lacks quota: gpu", ""]),
                                 label=f"{c.name} refusal")
               for c in views if data.draw(st.booleans(), label=f"refuse {c.name}")}
    reasons = table.reasons(gang, refused)
    checked = [f"{name}: {refused.get(name) or check(gang, table.view(name))}" for name in table.names]
    for other in others:  # the cycle goes on; the reasons already given stay as they were
        if (chosen := table.best(other, {})) is not None:
            table.reserve(other, chosen)
    assert summary(reasons) == summary(checked)
    assert [reasons[i] for i in reversed(range(len(views)))] == checked[::-1]
    assert list(reasons) == checked and reasons[:2] == checked[:2]


def test_many_clusters_are_summarised_by_kind_without_amounts() -> None:
    def reason(free: int, count: int = 5) -> str:
        clusters = [ClusterView(f"c{i}", {"zone": "a" if i < 4 else "b"}, {GPU: free + i},
                                [TierFree(0, "node", {GPU: 8})]) for i in range(count)]
        table = ClusterTable(clusters, {GPU: 64})
        gang = JobView("g", {GPU: 16}, {GPU: 8}, {"zone": "a"})
        assert table.best(gang, {}) is None
        table.reasons(gang, {})
        why = table.fits_nowhere(gang)
        assert why is not None
        return why

    assert reason(2) == ("no ready cluster fits: lacks label zone=a; not enough free "
                         "(each cluster's reason: fedctl explain)")
    assert reason(4) == reason(2)  # other free amounts, same words: nothing to rewrite for each waiting job
    # A cluster joining (or falling silent) with a reason already named changes no waiting job's words either.
    assert reason(2, count=6) == reason(2)
    assert reason(2, count=4) == "no ready cluster fits: not enough free (each cluster's reason: fedctl explain)"


def test_the_pool_says_where_eviction_could_make_room() -> None:
    table = ClusterTable([ClusterView(n, {}, {GPU: 0}, []) for n in ("c1", "c2")], {GPU: 32})
    pool = PreemptiblePool(table, ["q1", "q2"])
    pool.add("c1", "q1", {GPU: 8})
    pool.add("c2", "q2", {GPU: 16})
    assert pool.could_make_room({GPU: 8}, ["q1", "q2"]).tolist() == [True, True]
    assert pool.could_make_room({GPU: 16}, ["q1"]).tolist() == [False, False]
    assert pool.could_make_room({GPU: 16}, ["q2"]).tolist() == [False, True]


def _cluster_for_slowly(table: ClusterTable, views: list[ClusterView], job: JobView, refused: dict[str, str]
                        ) -> str | None:
    """Where to hold room, one cluster at a time: of those that could hold the gang at all and did not refuse it, the
    one with the largest least share of each asked amount free, then the first by name."""
    options = [(-min((table.free_of(v.name, r) / a for r, a in job.request.items() if a), default=0), v.name)
               for v in views if v.name not in refused and cannot_run(job, [v]) is None]
    return min(options)[1] if options else None


@settings(max_examples=300, deadline=None)
@given(st.lists(st.integers(0, 9), min_size=1, max_size=8, unique=True).flatmap(
    lambda ids: st.tuples(*[cluster(f"c{i}") for i in ids])), st.lists(job(most_gpus=96), min_size=1, max_size=4),
    st.data())
def test_where_room_is_held_is_where_the_rule_one_cluster_at_a_time_holds_it(
        clusters: tuple[ClusterView, ...], gangs: list[JobView], data: st.DataObject) -> None:
    """Jobs asking for nothing, or for a resource no cluster has, are among them; the clusters are given in any
    order, and the same shape is asked again after reservations changed what is free."""
    capacity = {GPU: 64 * len(clusters), CPU: 512 * len(clusters)}
    views = list(clusters)
    table = ClusterTable(views, capacity)
    reservations = Reservations(table, views)
    extra = data.draw(st.sampled_from([{}, {"example.com/fpga": 1}, {GPU: 0, CPU: 0}]), label="extra ask")
    gangs = [*gangs, JobView("k", {**gangs[0].request, **extra}, dict(gangs[0].largest_pod), {})]
    for gang in gangs * 2:
        refused = {c.name: "rejected it" for c in views if data.draw(st.booleans(), label=f"refuse {c.name}")}
        assert reservations.cluster_for(gang, refused) == _cluster_for_slowly(table, views, gang, refused)
        chosen = table.best(gang, {})
        if chosen is not None:
            table.reserve(gang, chosen)


LABELS = st.dictionaries(st.sampled_from(["zone", "region", "tier"]), st.sampled_from(["a", "b"]), max_size=3)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(LABELS, st.sampled_from([None, frozenset(), frozenset({"os=linux"}),
                                                   frozenset({"os=linux", "disk=ssd"})])), min_size=1, max_size=12),
       st.lists(st.tuples(LABELS, st.sampled_from([(), ("os=linux",), ("disk=ssd", "os=linux")])), min_size=1,
                max_size=4))
def test_clusters_labelled_alike_are_ruled_out_alike(labelled: list[tuple[dict[str, str], frozenset[str] | None]],
                                                     selectors: list[tuple[dict[str, str], tuple[str, ...]]]) -> None:
    """What the table says of a selector's clusters, worked out once per distinct labelling, is what each cluster's
    own labels say: the same reason (or none) and the same mask of clusters selected."""
    clusters = [ClusterView(f"c{i}", labels, {GPU: 8}, [], node_labels=nodes)
                for i, (labels, nodes) in enumerate(labelled)]
    table = ClusterTable(clusters, {GPU: 8 * len(clusters)})
    by_name = {c.name: c for c in clusters}
    in_order = [by_name[name] for name in table.names]  # (the table's own order)
    for cluster_selector, node_selector in selectors:
        gang = JobView("j", {GPU: 1}, {GPU: 1}, cluster_selector, node_selector=node_selector)
        said = [labels_unmatched(gang, c.labels, c.node_labels) for c in in_order]
        assert list(table.selects(gang)) == [selects(gang, c) for c in in_order] == [s is None for s in said]
        unmatched = table._unmatched(gang)
        if cluster_selector or node_selector:
            assert unmatched is not None and unmatched[1] == said
            assert list(unmatched[0]) == [s is not None for s in said]
        else:
            assert unmatched is None
