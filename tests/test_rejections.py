"""A cluster's rejection keeps a job away from it until the cluster reports a change, under a floor that
doubles with each rejection of the same job (issue 42, 10: a fixed 30 s kept a queue from the room a reclaim
made for it, and sent a job back to a cluster that would refuse it again)."""

from federation.control.rejections import CEILING, FLOOR, Rejections

BEFORE, AFTER = 7, 8  # the cluster's inventory version, before and after its inventory changed


def test_a_rejection_holds_while_the_cluster_is_unchanged_and_lifts_when_it_changes() -> None:
    memory = Rejections()
    memory.put("j", "east", "rejected it recently: no node with 4 free", now=0.0)
    assert memory.live(0.0, {"east": BEFORE}) == {("j", "east"): "rejected it recently: no node with 4 free"}
    # Unchanged long past any fixed memory: the agent would answer the same.
    assert ("j", "east") in memory.live(10 * CEILING, {"east": BEFORE})
    # Changed (the reclaimed pods ended): offered again at once, the floor having passed.
    assert memory.live(10 * CEILING + 0.1, {"east": AFTER}) == {}


def test_the_floor_doubles_with_each_rejection_of_the_same_job_and_is_forgotten_with_the_job() -> None:
    memory = Rejections()
    t = 0.0
    for floor in (FLOOR, 2 * FLOOR, 4 * FLOOR):
        memory.put("j", "east", "rejected", now=t)
        memory.live(t, {"east": BEFORE})
        # The cluster changes at once, but the rejection holds for its floor.
        assert ("j", "east") in memory.live(t + floor - 0.01, {"east": AFTER})
        assert memory.live(t + floor, {"east": AFTER}) == {}
        t += floor
    memory.put("j", "east", "rejected", now=t)
    memory.live(t, {"east": BEFORE}, waiting={"j"})
    assert memory.live(t + 2 * CEILING, {"east": AFTER}, waiting={"j"}) == {}
    # Under the ceiling however often it is rejected.
    for _ in range(20):
        memory.put("j", "east", "rejected", now=t)
    memory.live(t, {"east": BEFORE})
    assert memory.live(t + CEILING, {"east": AFTER}) == {}
    # A job no longer waiting is forgotten: its next rejection starts from the first floor again.
    memory.live(t, {}, waiting=set())
    memory.put("j", "east", "rejected", now=t)
    memory.live(t, {"east": BEFORE})
    assert memory.live(t + FLOOR, {"east": AFTER}) == {}


def test_another_clusters_change_lifts_nothing_and_an_unreported_cluster_keeps_it() -> None:
    memory = Rejections()
    memory.put("j", "east", "rejected", now=0.0)
    memory.put("j", "west", "rejected", now=0.0)
    memory.live(0.0, {"east": BEFORE, "west": BEFORE})
    assert set(memory.live(100.0, {"east": BEFORE, "west": AFTER})) == {("j", "east")}
    assert set(memory.live(200.0, {})) == {("j", "east")}  # east not Ready now: nothing to compare


def test_a_change_between_the_rejection_and_the_first_look_lifts_it() -> None:
    """The cluster's inventory moved after the agent rejected the job and before the scheduler read the rejection:
    compared with the version read before the rejection, the job is offered again; had the version first read
    after it been the baseline, it would wait for another change, in a cluster that is done changing forever."""
    memory = Rejections()
    memory.put("j", "east", "rejected", now=0.0, seen=BEFORE)
    assert ("j", "east") in memory.live(0.0, {"east": AFTER})  # the floor first
    assert memory.live(FLOOR, {"east": AFTER}) == {}
    unknown = Rejections()  # nothing read before it: the first version given is its baseline
    unknown.put("j", "east", "rejected", now=0.0)
    unknown.live(0.0, {"east": AFTER})
    assert ("j", "east") in unknown.live(10 * CEILING, {"east": AFTER})
