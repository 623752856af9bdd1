"""The documentation site (mkdocs.yml, docs/): it builds strictly, every page is in the navigation and every link and
anchor resolves (the README's too: the site's home is the README, tests/test_reference.py holds them equal); the
README stays a landing page."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

from federation.cli.dev import BIN
from federation.testbed.build import REPO


def build(root: Path, out: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(BIN / "mkdocs"), "build", "--strict", "-f", str(root / "mkdocs.yml"), "-d", str(out)],
                          capture_output=True, text=True, timeout=300, env={**os.environ, "NO_MKDOCS_2_WARNING": "1"})


def test_the_site_builds_strictly(tmp_path: Path) -> None:
    done = build(REPO, tmp_path / "site")
    assert done.returncode == 0, done.stderr
    for page in ("architecture", "operations/database", "tutorials/kubernetes", "reference/api", "concepts/scheduling"):
        assert (tmp_path / "site" / page / "index.html").exists(), page


def test_a_broken_link_or_a_page_left_out_fails_the_build(tmp_path: Path) -> None:
    """The checks the strict build stands for: each mistake alone fails it."""
    for mistake in ("link", "anchor", "page"):
        copy = tmp_path / mistake
        shutil.copytree(REPO / "docs", copy / "docs")
        shutil.copy(REPO / "mkdocs.yml", copy / "mkdocs.yml")
        index = copy / "docs" / "index.md"
        if mistake == "link":
            index.write_text(index.read_text() + "\n[gone](no-such-page.md)\n")
        elif mistake == "anchor":
            index.write_text(index.read_text() + "\n[gone](operations/database.md#no-such-section)\n")
        else:
            (copy / "docs" / "orphan.md").write_text("# Not in the navigation\n")
        done = build(copy, copy / "site")
        assert done.returncode != 0, mistake


def test_the_readme_is_a_landing_page() -> None:
    """What it is, a picture, the quick start, the install, where to read next: the rest lives in docs/."""
    readme = (REPO / "README.md").read_text()
    assert len(readme.splitlines()) < 200
    headings = re.findall(r"^## (.+)$", readme, re.M)
    assert headings[:2] == ["Quick start", "Install on a real cluster"] and "Read next" in headings
    assert "```mermaid" in readme
