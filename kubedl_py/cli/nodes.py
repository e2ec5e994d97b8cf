"""``kubedl-py local node stop|start|remove NAME``: rehearse losing a node on a laptop.

Why through the API server: ``local up`` runs in another process (another terminal), on either control plane.
The command labels the Node (``local.kubedl.io/power``); the node agent that runs it watches that label,
freezes the node as a crashed machine (``stop``: no Lease renewals, no status, no actions; pods keep their last
reported state), resumes it (``start``) or stops running it (``remove``), and answers with an annotation the
command waits for. Kubernetes then does the rest as it would on a real cluster: after
``node-monitor-grace-period`` the node is NotReady and tainted, and the training-job controller replaces its
jobs' pods ``failurePolicy.nodeLostTimeoutSeconds`` later (docs/local-cluster.md).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import sys
import time

from kubedl_local import POWER_LABEL, POWER_STATE
from kubedl_py.api.constants import LOCAL_KUBECONFIG
from kubedl_py.cli.errors import EXIT_FAILED, EXIT_USAGE
from kubedl_py.kube import errors
from kubedl_py.kube.client import KubeClient
from kubedl_py.kube.resources import NODES

#: what each action asks of the agent
WANTED = {"stop": "off", "start": "on", "remove": "removed"}


def run_local_node(args: argparse.Namespace) -> int:
    path = os.path.expanduser(args.kubeconfig or os.environ.get("KUBECONFIG") or LOCAL_KUBECONFIG)
    if not os.path.isfile(path):
        print(
            f"kubedl-py: no kubeconfig at {path}: start a cluster with `kubedl-py local up` (or pass --kubeconfig)",
            file=sys.stderr,
        )
        return EXIT_USAGE
    try:
        return asyncio.run(_switch(path, args.node_command, args.name, args.timeout))
    except errors.KubeError as exc:
        print(f"kubedl-py: {exc}", file=sys.stderr)
        return EXIT_FAILED


async def _switch(kubeconfig: str, action: str, name: str, within: float) -> int:
    wanted = WANTED[action]
    async with KubeClient(kubeconfig=kubeconfig) as kube:
        try:
            await kube.get(NODES, name)
        except errors.NotFound:
            names = ", ".join(sorted(n["metadata"]["name"] for n in (await kube.list(NODES)).items)) or "none"
            print(f"kubedl-py: node {name!r} not found (nodes: {names})", file=sys.stderr)
            return EXIT_USAGE
        await kube.patch(NODES, name, {"metadata": {"labels": {POWER_LABEL: wanted}}})
        deadline = time.monotonic() + within
        while True:
            node = await kube.get(NODES, name)
            if ((node.get("metadata") or {}).get("annotations") or {}).get(POWER_STATE) == wanted:
                break
            if time.monotonic() > deadline:
                print(
                    f"kubedl-py: no node agent answered for node {name} within {within:g}s: is it a node of a "
                    "running `kubedl-py local up` cluster?",
                    file=sys.stderr,
                )
                return EXIT_FAILED
            await asyncio.sleep(0.1)
        if action == "remove":
            with contextlib.suppress(errors.NotFound):
                await kube.delete(NODES, name)
    print(_done(action, name), flush=True)
    return 0


def _done(action: str, name: str) -> str:
    if action == "stop":
        return (
            f"node {name} stopped: its agent no longer reports, as a crashed machine. Kubernetes marks it NotReady "
            "after node-monitor-grace-period (50 s), and the controller replaces its jobs' pods "
            f"failurePolicy.nodeLostTimeoutSeconds (60 s) later. `kubedl-py local node start {name}` brings it back."
        )
    if action == "start":
        return f"node {name} started: it reports again; Kubernetes lifts its taints once it sees it Ready."
    return f"node {name} removed: its Node is deleted and its pods are garbage-collected."
