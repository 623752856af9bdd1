"""The documentation site (mkdocs.yml, docs/): it builds strictly, every page is in the navigation and every link and
anchor resolves; its commands are the README's, which the quick-start and Helm tests run."""

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
    assert (tmp_path / "site" / "operations" / "index.html").exists()
    assert (tmp_path / "site" / "architecture" / "index.html").exists()


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
            index.write_text(index.read_text() + "\n[gone](operations.md#no-such-section)\n")
        else:
            (copy / "docs" / "orphan.md").write_text("# Not in the navigation\n")
        done = build(copy, copy / "site")
        assert done.returncode != 0, mistake


def code_lines(markdown: str) -> list[str]:
    """The commands of its shell blocks, without their trailing comments."""
    return [line.split("  #")[0].rstrip() for block in re.findall(r"```sh\n(.*?)```", markdown, re.S)
            for line in block.splitlines()]


def test_the_landing_pages_commands_are_the_readmes() -> None:
    """The site's commands are copied from the README, where tests run them (the quick start's, the Helm chart's
    install as tests/test_helm.py does it): a command changed in one place only fails here."""
    readme = code_lines((REPO / "README.md").read_text())
    index = code_lines((REPO / "docs" / "index.md").read_text())
    assert index and all(line in readme for line in index), [line for line in index if line not in readme]
