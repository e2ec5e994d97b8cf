"""What installing kubedl-py pulls in and prints: ``make demo`` installs the package and torch, not the test
tools (pytest, mypy, ruff, kubectl...), and building the package prints no setuptools deprecation banner
(the license is an SPDX expression, not a table or classifiers)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]


def _names(requirements: list[str]) -> set[str]:
    return {re.split(r"[\s<>=!~\[;]", req, maxsplit=1)[0].lower() for req in requirements}


def test_the_demo_extra_is_only_what_the_demo_runs() -> None:
    extras = PROJECT["optional-dependencies"]
    demo = _names(extras["demo"])
    assert demo == {"torch"}, demo
    assert not demo & _names(extras["test"])


@pytest.mark.skipif(shutil.which("make") is None, reason="needs make")
def test_make_demo_installs_no_test_tools(tmp_path: Path) -> None:
    """``make -n -B demo`` lists every command ``make demo`` runs on a fresh clone (here: a venv that does not
    exist yet): none installs the ``test`` extra."""
    dry = subprocess.run(
        ["make", "-n", "-B", "demo", f"VENV={tmp_path / 'venv'}"], cwd=ROOT, capture_output=True, text=True, check=True
    )
    extras = [
        set(found.split(","))
        for line in dry.stdout.splitlines()
        if "pip install" in line
        for found in re.findall(r"\.\[([\w,]+)\]", line)
    ]
    assert {"demo"} in extras, dry.stdout
    assert not [chosen for chosen in extras if "test" in chosen], dry.stdout


@pytest.mark.skipif(shutil.which("make") is None, reason="needs make")
def test_make_demo_runs_the_demo_on_one_control_plane(tmp_path: Path) -> None:
    """``make demo`` picks one plane (embedded unless CONTROL_PLANE says otherwise); ``make bench``'s default of
    both planes ("all", which the demo refuses) must not leak into it, as it once did through a global default."""
    env = {k: v for k, v in os.environ.items() if k != "CONTROL_PLANE"}
    for plane, expected in ((None, "embedded"), ("kubernetes", "kubernetes")):
        args = ["make", "-n", "-B", "demo", f"VENV={tmp_path / 'venv'}"]
        if plane:
            args.append(f"CONTROL_PLANE={plane}")
        dry = subprocess.run(args, cwd=ROOT, capture_output=True, text=True, check=True, env=env)
        (command,) = [line for line in dry.stdout.splitlines() if "examples/demo.py" in line]
        assert command.endswith(f"examples/demo.py --control-plane {expected}"), command
    bench = subprocess.run(["make", "-n", "bench"], cwd=ROOT, capture_output=True, text=True, check=True, env=env)
    assert "-m bench --control-plane all" in bench.stdout, bench.stdout


def test_the_license_is_an_spdx_expression() -> None:
    assert PROJECT["license"] == "Apache-2.0"
    assert not any(c.startswith("License ::") for c in PROJECT.get("classifiers", []))


def test_building_the_package_prints_no_deprecation_banner(tmp_path: Path) -> None:
    """The metadata setuptools writes for a wheel, from a copy of the sources (nothing is written here)."""
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, tmp_path / name)
    shutil.copytree(ROOT / "kubedl_py", tmp_path / "kubedl_py", ignore=shutil.ignore_patterns("__pycache__"))
    (tmp_path / "out").mkdir()
    build = (
        "import sys; from setuptools import build_meta; print(build_meta.prepare_metadata_for_build_wheel(sys.argv[1]))"
    )
    run = subprocess.run(
        [sys.executable, "-W", "default", "-c", build, str(tmp_path / "out")],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    )
    output = run.stdout + run.stderr
    assert "Deprecat" not in output and "!!" not in output, output
    metadata = (tmp_path / "out" / run.stdout.strip().splitlines()[-1] / "METADATA").read_text()
    assert "License-Expression: Apache-2.0" in metadata.splitlines()
