"""Every registered kind through the SDK and the CLI: found by its kind, plural or short name, listed, waited
for, described, its logs read and deleted -- the SDK's kind table is the registry, not two hard-coded kinds."""

from __future__ import annotations

import asyncio
from typing import Any

from kubedl_py.api.kinds import KindAPI, all_kinds
from kubedl_py.api.validation import parse_job
from kubedl_py.sdk import AsyncTrainingClient, JobNotFoundError, job_state
from tests.integration.conftest import Env, eventually
from tests.sdk.helpers import ending
from tests.sdk.test_cli import kubedl, one_line


def minimal_job(plugin: KindAPI, name: str) -> dict[str, Any]:
    """The kind's head (its one-pod Master/Chief, when it has one) and one Worker; pods stay after success
    (cleanPodPolicy None) so their logs can be read. The head ends after the worker: no cleanup race."""
    framework = plugin.framework
    types: dict[str, float] = {}
    if framework.master_types:
        types[framework.master_types[0]] = 0.5
    if "Worker" in framework.replica_types:
        types["Worker"] = 0.1 if types else 0.5
    specs = {
        rtype: {
            "replicas": 1,
            "restartPolicy": "Never",
            "template": {
                "metadata": {"annotations": ending(0, seconds)},
                "spec": {"containers": [{"name": framework.container_name, "image": "busybox", "command": ["true"]}]},
            },
        }
        for rtype, seconds in types.items()
    }
    body = {
        "apiVersion": plugin.api_version,
        "kind": plugin.kind,
        "metadata": {"name": name},
        "spec": {framework.replica_specs_field: specs, "cleanPodPolicy": "None"},
    }
    parse_job(body)  # valid by the kind's own rules
    return body


async def served(client: AsyncTrainingClient, plugin: KindAPI) -> None:
    """Once the kind's CRD is served (the real API server takes a moment after the CRD is created)."""

    async def listed() -> bool:
        try:
            await client.list(plugin.kind)
        except JobNotFoundError:
            return False
        return True

    await eventually(listed, what=f"{plugin.framework.plural} to be served")


async def test_every_registered_kind_works_with_get_wait_logs_describe_delete(
    cluster: Env, client: AsyncTrainingClient
) -> None:
    plugins = all_kinds()
    assert {p.kind for p in plugins} >= {"PyTorchJob", "TFJob", "XGBoostJob", "PaddleJob", "JAXJob"}
    names = {plugin.kind: f"k-{plugin.name}" for plugin in plugins}
    for plugin in plugins:
        await served(client, plugin)
        await client.submit(minimal_job(plugin, names[plugin.kind]))

    listed = await client.list()
    assert sorted((job.kind, job.name) for job in listed) == sorted(names.items())

    async def check(plugin: KindAPI) -> None:
        framework = plugin.framework
        name = names[plugin.kind]
        for alias in (plugin.kind, framework.plural, *framework.short_names):
            assert (await client.get(name, alias)).kind == plugin.kind, alias
        assert (await client.get(name)).kind == plugin.kind  # no kind: looked for in every kind
        done = await client.wait(name, kind=framework.short_names[0], timeout=60)
        assert job_state(done) == "Succeeded"
        log = await client.logs(name)  # the head's, or worker 0's
        assert f"container {framework.container_name} started" in log, log
        described = await client.describe(name)
        assert sorted(pod.name for pod in described.pods) == sorted(
            f"{name}-{rtype.lower()}-0" for rtype in done.replica_specs
        )
        await client.delete(name, framework.plural, wait=True, timeout=30)

    await asyncio.gather(*(check(plugin) for plugin in plugins))
    assert await client.list() == []


async def test_the_cli_takes_any_kind_by_short_name(cluster: Env, client: AsyncTrainingClient) -> None:
    plugin = next(p for p in all_kinds() if p.kind == "XGBoostJob")
    await served(client, plugin)
    await client.submit(minimal_job(plugin, "xgb"))
    waited = await kubedl(cluster, "wait", "xgb", "--kind", "xgbj", "--timeout", "60")
    assert waited.code == 0, waited.err
    got = await kubedl(cluster, "get", "xgb", "--kind", "xgboostjobs")
    assert got.code == 0 and got.out.splitlines()[1].split()[:3] == ["xgb", "XGBoostJob", "Succeeded"], got
    unknown = await kubedl(cluster, "get", "xgb", "--kind", "mxjob")
    line = one_line(unknown.err)
    assert unknown.code == 2 and all(p.kind in line for p in all_kinds()), line
    deleted = await kubedl(cluster, "delete", "xgb", "--wait")
    assert deleted.out.strip() == 'xgboostjob.training.kubedl.io "xgb" deleted', deleted
