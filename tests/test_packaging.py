"""What installing kubedl-py pulls in and prints: the product's wheel holds no module of the local clusters nor
their dependencies (those are the ``local`` extra, the distribution kubedl-py-local built from
packaging/kubedl-py-local), ``make demo`` installs the package, its local clusters and torch, not the test tools
(pytest, mypy, ruff, kubectl...), and building the package prints no setuptools deprecation banner (the license
is an SPDX expression, not a table or classifiers)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tomllib
import zipfile
from email.parser import Parser
from pathlib import Path

import pytest

from kubedl_py._version import __version__

ROOT = Path(__file__).resolve().parents[1]
PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
LOCAL_DIST = ROOT / "packaging" / "kubedl-py-local"
LOCAL_PROJECT = tomllib.loads((LOCAL_DIST / "pyproject.toml").read_text())["project"]
#: what only the local clusters use: never a dependency of the product
LOCAL_ONLY = {"cel-python", "jsonschema"}


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
    assert {"demo", "local"} in extras, dry.stdout
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


# ------------------------------------------------------------------------------------- product and extra


def _wheels(tmp_path: Path) -> dict[str, Path]:
    """Both wheels built from a copy of the checkout's sources (a stale build/ of the checkout could leak into
    a wheel built in place), as ``pip wheel --no-deps . packaging/kubedl-py-local`` builds them."""
    src = tmp_path / "src"
    src.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, src / name)
    ignore = shutil.ignore_patterns("__pycache__", "build", "*.egg-info")
    shutil.copytree(ROOT / "kubedl_py", src / "kubedl_py", ignore=ignore)
    shutil.copytree(ROOT / "kubedl_local", src / "kubedl_local", ignore=ignore)
    shutil.copytree(LOCAL_DIST, src / "packaging" / "kubedl-py-local", ignore=ignore)
    out = tmp_path / "wheels"
    pip_wheel = [sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--no-build-isolation"]
    subprocess.run(
        [*pip_wheel, "--wheel-dir", str(out), str(src), str(src / "packaging" / "kubedl-py-local")],
        cwd=src,
        capture_output=True,
        text=True,
        check=True,
        timeout=300,
    )
    return {wheel.name.split("-")[0]: wheel for wheel in out.glob("*.whl")}


def _requires(wheel: zipfile.ZipFile) -> list[str]:
    (metadata,) = [name for name in wheel.namelist() if name.endswith(".dist-info/METADATA")]
    return Parser().parsestr(wheel.read(metadata).decode()).get_all("Requires-Dist") or []


def test_the_product_wheel_ships_no_local_cluster_and_the_extra_ships_all_of_it(tmp_path: Path) -> None:
    wheels = _wheels(tmp_path)
    assert set(wheels) == {"kubedl_py", "kubedl_py_local"}, wheels
    checkout_local = {
        str(path.relative_to(ROOT)) for path in (ROOT / "kubedl_local").rglob("*.py") if "__pycache__" not in path.parts
    }
    assert checkout_local

    with zipfile.ZipFile(wheels["kubedl_py"]) as product:
        files = product.namelist()
        assert not [name for name in files if name.startswith("kubedl_local/")], files
        assert "kubedl_py/cli/__init__.py" in files and "kubedl_py/templates/rbac.yaml.j2" in files
        requires = _requires(product)
    runtime = {req for req in requires if "extra ==" not in req}
    assert not _names(sorted(runtime)) & LOCAL_ONLY, runtime
    assert f'kubedl-py-local=={__version__}; extra == "local"' in requires, requires

    with zipfile.ZipFile(wheels["kubedl_py_local"]) as local:
        files = local.namelist()
        modules = {name for name in files if name.endswith(".py")}
        assert modules == checkout_local, modules ^ checkout_local
        requires = _requires(local)
    assert f"kubedl-py=={__version__}" in requires, requires
    assert "cel-python" in _names(requires), requires


def test_each_distribution_pins_the_other_at_the_one_version() -> None:
    """The two are built from one checkout: a wheel of one must never meet another version of the other."""
    assert f"kubedl-py-local=={__version__}" in PROJECT["optional-dependencies"]["local"]
    assert f"kubedl-py=={__version__}" in LOCAL_PROJECT["dependencies"]


#: hides kubedl_local (or celpy) as an installation without the ``local`` extra would
_WITHOUT = """
import sys
from importlib.abc import MetaPathFinder

class Missing(MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name == sys.argv[1] or name.startswith(sys.argv[1] + "."):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None

sys.meta_path.insert(0, Missing())
from kubedl_py.cli import main
sys.exit(main(sys.argv[2:]))
"""


@pytest.mark.parametrize(
    ("missing", "argv"),
    [
        ("kubedl_local", ["local", "up"]),
        ("kubedl_local", ["local", "node", "stop", "n1"]),
        ("celpy", ["local", "up"]),
    ],
)
def test_local_commands_without_the_extra_say_how_to_get_it(missing: str, argv: list[str]) -> None:
    run = subprocess.run(
        [sys.executable, "-c", _WITHOUT, missing, *argv],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
        check=False,
    )
    assert run.returncode == 2, run
    assert "Traceback" not in run.stderr, run.stderr
    command = " ".join(argv[:2])
    assert run.stderr.strip() == (
        f"kubedl-py: `kubedl-py {command}` needs the 'local' extra, which this installation lacks ({missing} is "
        "missing): pip install 'kubedl-py[local]' (from a checkout of kubedl-py: make venv)"
    ), run.stderr


def test_the_product_commands_run_without_the_extra() -> None:
    run = subprocess.run(
        [sys.executable, "-c", _WITHOUT, "kubedl_local", "manifests", "--crds-only"],
        check=False,
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
    )
    assert run.returncode == 0, run.stderr
    assert "kind: CustomResourceDefinition" in run.stdout
