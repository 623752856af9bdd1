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
