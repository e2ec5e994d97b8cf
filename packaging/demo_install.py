"""``make demo``'s install: kubedl-py, its local clusters and torch, by the route that works from here.

torch's CPU build is on PyTorch's own index only; PyPI's Linux torch is the CUDA build, a 527 MB wheel that
brings about 4 GB of CUDA packages (it trains on the CPU all the same). Asking pip for the CPU index where that
index does not answer made pip print hundreds of retry warnings before falling back to PyPI, so this asks the
index first (a few seconds at most) and says which route it takes and how large it is before pip starts; pip
then shows its progress. ``PIP_INDEX_URL``/``PIP_EXTRA_INDEX_URL`` set by the user win: their choice is kept.

``python packaging/demo_install.py [--dry-run] [--cpu-index URL] -- PIP_INSTALL_ARGS...`` (the Makefile's call).
"""

from __future__ import annotations

import argparse
import os
import shlex
import subprocess
import sys
import urllib.error
import urllib.request

CPU_INDEX = "https://download.pytorch.org/whl/cpu"
#: the PyPI-only route, measured on a fresh venv with a cold pip cache (2 cores, 2026-12-04; README's set-up):
#: PyPI has no CPU build of torch for Linux x86_64, and its CUDA build does not import without the CUDA packages
PYPI_ROUTE = (
    "PyPI's torch 2.13.0, its only Linux build: 2.7 GB of wheels (torch's 527 MB and 19 CUDA packages), "
    "4.7 GB installed; measured at 2 minutes on a 2-core machine, longer on a slower network"
)


def answers(url: str, timeout: float) -> bool:
    """Whether the index serves torch's page within ``timeout`` seconds."""
    try:
        with urllib.request.urlopen(f"{url.rstrip('/')}/torch/", timeout=timeout) as response:
            return bool(response.status == 200)
    except (urllib.error.URLError, OSError, ValueError):
        return False


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cpu-index", default=CPU_INDEX, help=f"PyTorch's CPU index (default {CPU_INDEX})")
    parser.add_argument("--timeout", type=float, default=5.0, help="seconds to wait for the index's answer")
    parser.add_argument("--dry-run", action="store_true", help="say the route and the pip command; install nothing")
    parser.add_argument("pip_args", nargs=argparse.REMAINDER, help="what pip install gets after the route's options")
    args = parser.parse_args(argv)
    pip_args = [a for a in args.pip_args if a != "--"]
    route: list[str] = []
    if os.environ.get("PIP_INDEX_URL") or os.environ.get("PIP_EXTRA_INDEX_URL"):
        said = "torch from the index PIP_INDEX_URL/PIP_EXTRA_INDEX_URL names (your setting)"
    elif answers(args.cpu_index, args.timeout):
        route = ["--extra-index-url", args.cpu_index]
        said = f"torch's CPU build from {args.cpu_index} (no CUDA packages)"
    else:
        said = f"{PYPI_ROUTE}; {args.cpu_index} does not answer from here, so its smaller CPU build cannot be had"
    command = [sys.executable, "-m", "pip", "install", "--progress-bar", "on", *route, *pip_args]
    print(f"make demo: installing kubedl-py, its local clusters and torch (the demo trains with it): {said}")
    print(f"make demo: {shlex.join(command)}", flush=True)
    if args.dry_run:
        return 0
    return subprocess.call(command)


if __name__ == "__main__":
    sys.exit(main())
