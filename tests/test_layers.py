"""Issue 43 (4): the shared kernel by name. The member agent imports the shared kernel (`federation.kernel`) and the
API's generated messages (`federation.v1`), never a module of the server; the kernel imports nothing else of the
federation. Read from the source, so a new import of the wrong kind fails here, not in a deployment."""

from __future__ import annotations

import ast
from pathlib import Path

from tests.conftest import REPO

ALLOWED = ("federation.kernel", "federation.v1")


def _imports(path: Path) -> set[str]:
    """Every federation module a file imports (top level or inside functions)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "federation":
            names = [f"{node.module}.{a.name}" if node.module == "federation" else node.module for a in node.names]
            found.update(names)
        elif isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name.split(".")[0] == "federation")
    return found


def _outside(paths: list[Path]) -> dict[str, set[str]]:
    out = {}
    for path in paths:
        bad = {m for m in _imports(path) if not any(m == a or m.startswith(a + ".") for a in ALLOWED)}
        if bad:
            out[str(path.relative_to(REPO))] = bad
    return out


def test_the_agent_imports_only_the_shared_kernel_and_the_api_messages() -> None:
    files = sorted((REPO / "member-agent" / "member_agent").glob("*.py"))
    assert len(files) > 20
    assert _outside(files) == {}


def test_the_kernel_imports_nothing_else_of_the_federation() -> None:
    files = sorted((REPO / "federation" / "kernel").glob("*.py"))
    assert {f.stem for f in files} >= {"resources", "gpuask", "dra", "gangs", "durations", "jobspec", "tiers"}
    assert _outside(files) == {}


def test_the_check_sees_a_server_import(tmp_path: Path) -> None:
    bad = tmp_path / "bad.py"
    bad.write_text("from federation.validation import MAX_NAME\n\ndef f():\n    import federation.control.scheduler\n")
    assert _imports(bad) == {"federation.validation", "federation.control.scheduler"}


def _agent_graph(root: Path) -> dict[str, set[str]]:
    """Module -> the agent's modules it imports when it is loaded (top-level imports: those inside a function or
    under TYPE_CHECKING make no circle at run time)."""
    graph: dict[str, set[str]] = {}
    for path in sorted(root.glob("*.py")):
        deps = set()
        for node in ast.parse(path.read_text(), str(path)).body:
            if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == root.name:
                deps.update([node.module.split(".")[1]] if "." in node.module else [a.name for a in node.names])
            elif isinstance(node, ast.Import):
                deps.update(a.name.split(".")[1] for a in node.names if a.name.startswith(root.name + "."))
        graph[path.stem] = deps
    return graph


def _circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Every module from which its own imports lead back to it, with the way back."""
    found = []
    for start in sorted(graph):
        stack, seen = [(start, [start])], {start}
        while stack:
            node, path = stack.pop()
            for dep in sorted(graph.get(node, ())):
                if dep == start:
                    found.append([*path, dep])
                elif dep in graph and dep not in seen:
                    seen.add(dep)
                    stack.append((dep, [*path, dep]))
    return found


def test_the_agents_modules_import_in_no_circle(tmp_path: Path) -> None:
    """Issue 43: the agent's parts import downward only."""
    graph = _agent_graph(REPO / "member-agent" / "member_agent")
    assert {"agent", "jobloop", "policies", "model", "booking"} <= graph.keys()
    assert _circles(graph) == []
    # The check sees a circle when there is one.
    planted = tmp_path / "member_agent"
    planted.mkdir()
    (planted / "a.py").write_text("from member_agent.b import x\n")
    (planted / "b.py").write_text("from member_agent import a\n")
    assert _circles(_agent_graph(planted)) == [["a", "b", "a"], ["b", "a", "b"]]


def _package_graph(root: Path, package: str) -> dict[str, set[str]]:
    """Module -> the package's modules it imports anywhere in it, under TYPE_CHECKING too: a circle there is a
    circle in what a reader must hold in mind, even when Python never meets it."""
    graph: dict[str, set[str]] = {}
    for path in sorted(root.glob("*.py")):
        deps = set()
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.ImportFrom) and node.module == package:
                deps.update(a.name for a in node.names)
            elif isinstance(node, ast.ImportFrom) and node.module and node.module.startswith(package + "."):
                deps.add(node.module[len(package) + 1:].split(".")[0])
            elif isinstance(node, ast.Import):
                deps.update(a.name[len(package) + 1:].split(".")[0] for a in node.names
                            if a.name.startswith(package + "."))
        graph[path.stem] = deps - {path.stem}
    return graph


def test_the_schedulers_parts_import_in_no_circle(tmp_path: Path) -> None:
    """Issue 40 (7): the cycle's parts (ledger, head order, quotas, preemptor, reservations, HyperJobs, backlogs,
    queue manager) import downward only, type-only imports included."""
    graph = _package_graph(REPO / "federation" / "scheduling", "federation.scheduling")
    assert {"cycle", "ledger", "ordering", "quotas", "preemption", "reservations", "hyperjobs", "backlog", "queues",
            "model"} <= graph.keys()
    assert "ledger" in graph["preemption"] and "ordering" in graph["cycle"]
    assert _circles(graph) == []
    planted = tmp_path / "scheduling"
    planted.mkdir()
    (planted / "a.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
                                  "    from federation.scheduling.b import x\n")
    (planted / "b.py").write_text("from federation.scheduling import a\n")
    assert _circles(_package_graph(planted, "federation.scheduling")) == [["a", "b", "a"], ["b", "a", "b"]]
