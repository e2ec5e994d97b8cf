"""The README and docs/ name files a user is told to run, read or apply: each must be in the repository
(a clone has nothing else), and no page may send the reader outside it.

Checked: markdown links (relative to the page), and every path a page mentions under one of the
repository's top-level directories or ``../`` (relative to the repository root, as the pages' commands run
from there).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
_TOP = r"(?:\.\./|\.ci/|examples/|docs/|kubedl_py/|tests/|e2e/|bench/|deploy/)"
_MENTION = re.compile(rf"(?<![\w/.~$-]){_TOP}[\w./{{}}*-]*")
_LINK = re.compile(r"\]\(([^)\s]+)\)")
#: what a command writes, not what a clone holds: `make bench`'s figures
GENERATED = {"bench/results.json"}
#: kubectl's short form of a Deployment (`rollout status deploy/NAME`): every file in deploy/ is a .yaml
_KUBECTL_DEPLOYMENT = re.compile(r"deploy/[\w-]+")


def references(page: Path) -> list[tuple[str, Path]]:
    text = page.read_text()
    found: list[tuple[str, Path]] = []
    for target in _LINK.findall(text):
        if re.match(r"[a-z]+:", target) or target.startswith("#"):
            continue
        found.append((target, (page.parent / target.split("#")[0]).resolve()))
    for mention in _MENTION.findall(text):
        path = mention.rstrip(".,:;")
        if any(ch in path for ch in "{}*"):  # a pattern (examples/*.yaml), not a file
            continue
        if path in GENERATED or _KUBECTL_DEPLOYMENT.fullmatch(path):
            continue
        found.append((path, (ROOT / path).resolve()))
    return found


@pytest.mark.parametrize("page", PAGES, ids=[str(p.relative_to(ROOT)) for p in PAGES])
def test_every_file_a_page_names_is_in_the_repository(page: Path) -> None:
    refs = references(page)
    outside = sorted({ref for ref, path in refs if not path.is_relative_to(ROOT)})
    missing = sorted({ref for ref, path in refs if path.is_relative_to(ROOT) and not path.exists()})
    assert not outside, f"{page.name} sends the reader outside the repository: {outside}"
    assert not missing, f"{page.name} names files the repository does not have: {missing}"


def test_the_readme_names_the_examples_it_runs() -> None:
    named = {ref for ref, _ in references(ROOT / "README.md")}
    assert {"examples/quickstart-pytorch.yaml", "examples/tfjob-ps-worker-python.yaml"} <= named
