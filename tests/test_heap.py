"""The collector settings of long-lived processes (`federation.kernel.heap`): frozen state is walked again only once a
quarter of it is new, and garbage hidden in it is then freed. In a child process: freezing is process-wide."""

from __future__ import annotations

import subprocess
import sys
import textwrap

SCRIPT = textwrap.dedent("""
    import gc, weakref
    from federation.kernel import heap

    class Node:
        def __init__(self):
            self.me = self  # a reference cycle: only a collection frees it

    heap.tune()
    node = Node()
    gone = weakref.ref(node)
    heap.settle()  # frozen while alive
    assert gc.is_tracked(node) and gc.get_freeze_count() > 0
    del node  # now garbage, hidden in the frozen part
    heap.settle()
    kept_while_little_is_new = gone() is not None
    # as much again as was frozen, all alive: the next settle walks the frozen part too
    state = [[i] for i in range(gc.get_freeze_count())]
    heap.settle()
    heap.settle()
    print(kept_while_little_is_new, gone() is None, len(state) > 0)
""")


def test_garbage_frozen_while_alive_is_freed_once_a_quarter_of_the_frozen_state_is_new() -> None:
    out = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    kept_while_little_is_new, freed_after, _ = out.stdout.split()
    assert kept_while_little_is_new == "True"  # the frozen part was not walked again for two small settles
    assert freed_after == "True"
