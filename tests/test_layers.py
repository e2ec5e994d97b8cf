"""The import-linter contracts (pyproject.toml, ``make lint``) cover every package, as the tree has it today.

Why derived from the tree: a contract that lists packages by hand silently stops covering a package added after
it was written (the cycle contract once left out four packages of local/ while its comment said every package
was listed). Here the packages are found on disk and each contract that claims to cover them all is checked
against that list, and every name a contract uses must still exist. The root packages are the top-level packages
the two distributions ship (``kubedl_py``, the product; ``kubedl_local``, the ``local`` extra), read from their
pyproject.toml files, and the test harness.
"""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
CONFIG: dict[str, Any] = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]
ROOTS: list[str] = CONFIG["root_packages"]
#: the pyproject.toml of each distribution built from this checkout
DISTRIBUTIONS = [ROOT / "pyproject.toml", ROOT / "packaging" / "kubedl-py-local" / "pyproject.toml"]
#: top-level packages of the checkout that are neither shipped nor the harness: no import-linter root
NOT_LINTED = {"tests", "bench", "e2e"}


def _contract(name_starts: str) -> dict[str, Any]:
    (found,) = [c for c in CONFIG["contracts"] if c["name"].startswith(name_starts)]
    return found


def packages() -> set[str]:
    """Every package (a folder with ``__init__.py``) under the root packages."""
    return {
        ".".join(init.parent.relative_to(ROOT).parts)
        for root in ROOTS
        for init in (ROOT / root).rglob("__init__.py")
        if "__pycache__" not in init.parts
    }


def modules() -> set[str]:
    """Every module and package under the root packages."""
    found = packages()
    for root in ROOTS:
        for path in (ROOT / root).rglob("*.py"):
            if "__pycache__" not in path.parts and path.name != "__init__.py":
                found.add(".".join(path.with_suffix("").relative_to(ROOT).parts))
    return found


def children(package: str) -> set[str]:
    return {m for m in modules() if m.rpartition(".")[0] == package}


def _layer_names(layers: list[str]) -> set[str]:
    return {name.strip() for layer in layers for name in layer.split("|")}


def shipped() -> set[str]:
    """The top-level packages the distributions ship, as their ``packages.find.include`` patterns name them."""
    found: set[str] = set()
    for path in DISTRIBUTIONS:
        include = tomllib.loads(path.read_text())["tool"]["setuptools"]["packages"]["find"]["include"]
        found |= {pattern for pattern in include if "." not in pattern and "*" not in pattern}
    return found


def test_the_roots_are_the_packages_of_this_checkout() -> None:
    """Every top-level package of the checkout is a root, but for the tests, benchmarks and e2e scenarios; the
    roots are what the two distributions ship (each its own directory) and the harness."""
    assert shipped() == {"kubedl_py", "kubedl_local"}
    assert set(ROOTS) == shipped() | {"harness"}
    top_level = {init.parent.name for init in ROOT.glob("*/__init__.py")}
    assert top_level - NOT_LINTED == set(ROOTS)
    assert {"kubedl_py", "kubedl_local", "harness", "kubedl_local.apiserver", "kubedl_local.storage"} <= packages()


def test_nothing_shipped_imports_the_harness() -> None:
    assert set(_contract("nothing of kubedl_py or kubedl_local imports the test harness")["source_modules"]) == (
        shipped()
    )


def test_the_cycle_contract_covers_every_package() -> None:
    ancestors = set(_contract("no import cycles")["ancestors"])
    assert packages() - ancestors == set(), "add these packages to the acyclic_siblings contract"
    assert ancestors - packages() == set(), "these are no packages any more"


def test_the_package_layers_name_every_top_level_module() -> None:
    """The top-level layering places every root package (kubedl_local and the harness whole, kubedl_py by its
    children: its root module is in no layer), and the harness above them all."""
    layers = _contract("the package is layered")["layers"]
    named = _layer_names(layers)
    for root in ROOTS:
        if root not in named:
            assert children(root) - named == set(), f"place these children of {root} in the package's layers"
    assert {"harness", "kubedl_local"} <= named
    assert layers[0] == "harness"


def test_the_cli_contract_keeps_every_internal_of_the_local_clusters_out() -> None:
    """Only ``kubedl_local`` itself is the command line's way in: every other module of kubedl_local/ is forbidden,
    directly or through a forbidden package above it (a package forbids its descendants too)."""
    forbidden = set(_contract("cli uses the local clusters")["forbidden_modules"])
    internal = {m for m in modules() if m.startswith("kubedl_local.")}
    uncovered = {m for m in internal if not any(m == f or m.startswith(f + ".") for f in forbidden)}
    assert uncovered == set(), "forbid these to the command line"


def test_every_module_a_contract_names_exists() -> None:
    existing = modules()
    named: set[str] = set()
    for contract in CONFIG["contracts"]:
        for key in ("source_modules", "forbidden_modules", "modules", "ancestors"):
            named |= set(contract.get(key, []))
        named |= _layer_names(contract.get("layers", []))
    assert named - existing == set(), "contracts name modules that are gone"
