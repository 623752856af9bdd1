"""The compiled victim search (and usage sums, `model.summed_by`, and deserved shares, `fairshare.hierarchical`),
and the one switch between them and the Python code they must equal.

Reclaim's search for the cluster and gangs to evict was 88 % of a steady cycle at 1,000 clusters, nearly all of it
interpreter overhead per gang looked at (`make bench`, profile.md). `native/` is that walk in Rust (PyO3, built by
`make`); `preemption.Preemptor` keeps the Python walk, which answers when the extension is not installed and which
the differential tests (tests/test_native_reclaim.py) hold the compiled one equal to.
"""

from __future__ import annotations

from collections.abc import Callable
from types import ModuleType
from typing import Any, TypeVar, cast

try:
    import federation_native as _federation_native
except ImportError:  # a checkout where `make` has not built native/ yet
    _federation_native = None

compiled: ModuleType | None = _federation_native

# The running gangs the compiled search has read from a snapshot's plain list, kept from one cycle's build to the next
# (`GangMemo`): it keeps what each RunningJob says of itself, by object, never what follows from the cycle's clock, so
# no decision depends on it; a build that finds it in use by another thread reads every gang itself. Gangs kept across
# cycles (`running.Running`) have a store of their own (`GangStore`), changed as they start and end.
memo: Any = _federation_native.GangMemo() if _federation_native is not None else None


F = TypeVar("F", bound=Callable[..., Any])


def or_python(name: str, oracle: F) -> F:
    """The compiled function `name` while `compiled` is on (read when asked: the benchmarks' baselines switch it off),
    its Python oracle answering whatever it declines (None); the oracle itself without it, or in a build of native/
    from before it."""
    found = getattr(compiled, name, None)
    if found is None:
        return oracle

    def either(*args: Any) -> Any:
        answer = found(*args)
        return answer if answer is not None else oracle(*args)

    return cast(F, either)
