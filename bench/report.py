"""Print bench/results.json as the Markdown tables of docs/benchmarks.md (so the page quotes the file exactly).

.venv/bin/python -m bench.report [bench/results.json]
"""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
#: inputs echoed in the results, not measurements
SETTINGS = frozenset(
    {"jobs", "replicas", "cpus", "idle_seconds", "runs", "failovers", "background_jobs", "wall_seconds"}
)
ORDER = [
    "bare-client",
    "bare-client-master-first",
    "kubedl-py",
    "training-operator",
    "training-operator-raised",
    "training-operator-tuned",
    "kubedl",
    "kubedl-raised",
    "kubedl-tuned",
]


def _ordered(summary: dict[str, Any]) -> list[str]:
    return [name for name in ORDER if name in summary] + sorted(set(summary) - set(ORDER))


def throughput(results: dict[str, Any], keys: list[str]) -> list[str]:
    lines = [
        "| benchmark | N jobs x 8 | contender | runs | time to all pods + Services, median (min-max) "
        "| ratio to bare client, median (min-max) | until all jobs Running | requests until settled "
        "| controller CPU s | peak RSS MiB |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for key in keys:
        if key not in results:
            continue
        entry = results[key]
        for name in _ordered(entry["summary"]):
            s = entry["summary"][name]
            ratio = (
                f"{s['ratio_to_bare_median']} ({s['ratio_to_bare_min']}-{s['ratio_to_bare_max']})"
                if "ratio_to_bare_median" in s
                else ""
            )
            lines.append(
                f"| `{key}` | {entry['jobs']} | {name} | {s['runs']} | {s['exist_seconds_median']} s "
                f"({s['exist_seconds_min']}-{s['exist_seconds_max']}) | {ratio} | "
                f"{_get(s, 'settle_seconds_median', ' s')} | {_get(s, 'requests_until_settled_median')} | "
                f"{_get(s, 'cpu_seconds_median')} | {_get(s, 'peak_rss_mib_median')} |"
            )
    return lines


def cost(results: dict[str, Any], keys: list[str]) -> list[str]:
    """Whole work: until every pod runs (runs that measured it)."""
    lines = [
        "| benchmark | N jobs x 8 | contender | until all pods Running | requests | per job | controller CPU s "
        "| per 1,000 pods | peak RSS MiB |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for key in keys:
        entry = results.get(key)
        if not entry:
            continue
        pods = entry["jobs"] * entry["replicas"]
        for name in _ordered(entry["summary"]):
            s = entry["summary"][name]
            if "cpu_seconds_all_running_median" not in s:
                continue
            requests = s["requests_until_all_running_median"]
            cpu = s["cpu_seconds_all_running_median"]
            lines.append(
                f"| `{key}` | {entry['jobs']} | {name} | {s['all_pods_running_seconds_median']} s | {requests} | "
                f"{round(requests / entry['jobs'], 1)} | {cpu} | {round(cpu / pods * 1000, 2)} | "
                f"{s['peak_rss_mib_median']} |"
            )
    return lines


def running(results: dict[str, Any], keys: list[str]) -> list[str]:
    """Until every pod runs, per round (runs that measured it): median (min-max), and the requests until then."""
    lines = [
        "| benchmark | N jobs x 8 | contender | runs | until every pod Running, median (min-max) | x kubedl-py, "
        "median (min-max) | requests until then | controller CPU s until then |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for key in keys:
        entry = results.get(key)
        if not entry:
            continue
        ours = [run.get("all_pods_running_seconds") for run in entry["runs"].get("kubedl-py", [])]
        for name in _ordered(entry["summary"]):
            times = [run.get("all_pods_running_seconds") for run in entry["runs"][name]]
            if not times or None in times:
                continue
            spread = f"{statistics.median(times):.2f} s ({min(times):.2f}-{max(times):.2f})"
            ratios = [t / o for t, o in zip(times, ours, strict=False) if o]
            versus = f"{statistics.median(ratios):.2f} ({min(ratios):.2f}-{max(ratios):.2f})" if ratios else "-"
            s = entry["summary"][name]
            lines.append(
                f"| `{key}` | {entry['jobs']} | {name} | {len(times)} | {spread} | {versus} | "
                f"{_get(s, 'requests_until_all_running_median')} | {_get(s, 'cpu_seconds_all_running_median')} |"
            )
    return lines


def fixes(results: dict[str, Any]) -> list[str]:
    """kubedl-py before and after the profile's fixes, each configuration one run of a few rounds."""
    entry = results.get("real_n200_profile_fixes_ab")
    if not entry:
        return []
    lines = [
        "| configuration | rounds | x bare client, median (min-max) | controller CPU s until every object exists "
        "| reconciles until then | controller CPU s until settled | reconciles in all | requests until all Running |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for name in ("before", "parse_cache", "parse_cache_and_batch"):
        run = entry.get(name)
        if not run:
            continue
        s, rounds = run["summary"]["kubedl-py"], run["runs"]["kubedl-py"]

        def spread(field: str, rounds: list[dict[str, Any]] = rounds) -> str:
            values = [r[field] for r in rounds if field in r]
            if not values:
                return "-"
            return f"{statistics.median(values):g} ({min(values):g}-{max(values):g})"

        lines.append(
            f"| {entry['configurations'][name]} | {s['runs']} | {s['ratio_to_bare_median']} "
            f"({s['ratio_to_bare_min']}-{s['ratio_to_bare_max']}) | {spread('cpu_seconds_until_exist')} | "
            f"{spread('reconciles_until_exist')} | {spread('cpu_seconds')} | {spread('reconciles')} | "
            f"{_get(s, 'requests_until_all_running_median')} |"
        )
    return lines


def idle(results: dict[str, Any], key: str) -> list[str]:
    entry = results.get(key)
    if not entry:
        return []
    lines = ["| contender | requests in the idle window | of which writes |", "|---|---|---|"]
    for name in _ordered(entry["summary"]):
        s = entry["summary"][name]
        if "idle_requests" in s:
            lines.append(f"| {name} | {s['idle_requests']} | {s['idle_writes']} |")
    return lines


def lifecycle(results: dict[str, Any]) -> list[str]:
    lines = [
        "| run | controller | submit -> all 64 pods Running p50 | p99 | max | requests per 8-replica job's life | "
        "of which writes | by verb |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for key, label in (
        ("real_lifecycle_before_dialed_services", "2026-11-24, a Service per replica"),
        ("real_lifecycle", "the Services dialed only"),
    ):
        entry = results.get(key)
        if not entry:
            continue
        for name in _ordered({k: v for k, v in entry.items() if isinstance(v, dict) and "lifecycle" in v}):
            lat, life = entry[name]["submit_to_all_running"], entry[name]["lifecycle"]
            verbs = ", ".join(f"{verb} {count}" for verb, count in sorted(life["by_verb"].items()))
            lines.append(
                f"| {label} | {name} | {lat['p50_ms']} ms | {lat['p99_ms']} ms | {lat['max_ms']} ms | "
                f"{life['requests_per_job']} | {life['writes_per_job']} | {verbs} (for {life['jobs']} jobs) |"
            )
    return lines


def failover(results: dict[str, Any]) -> list[str]:
    """One row per controller and load; an entry of several runs shows each figure's median (min-max)."""
    lines = [
        "| load | controller | runs | delete -> new pod and Service re-pointed, p50 | p99 | new pod only, p99 "
        "| Service left stale | pod created before its Service was re-pointed | old pod's deletion p99 "
        "| controller's part p99 | audit log: pod gone -> first write, p99 | audit log: its writes, p99 "
        "| all its writes in kube-apiserver, p99 | APF queueing max | writes held by the gate (> 250 ms) "
        "| the burst's pods created in |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for key, load in (
        ("real_failover_before", "idle, before the urgent lane"),
        ("real_failover_under_load_before", "200 jobs being created, before the urgent lane"),
        ("real_failover_before_early_repoint", "idle, before the early re-point"),
        ("real_failover", "idle"),
        ("real_failover_under_load_before_event", "200 jobs being created, Event still before the pod"),
        (
            "real_failover_under_load_before_urgent_workers",
            "200 jobs being created, before the urgent workers and informer slice",
        ),
        (
            "real_failover_under_load_before_early_repoint",
            "200 jobs being created, before the early re-point, timed on a watch of the whole namespace",
        ),
        ("real_failover_under_load_before_write_gate", "200 jobs being created, before the write gate"),
        (
            "real_failover_under_load_without_gate_at_0048",
            "200 jobs being created, write gate off (`--urgent-write-hold 0`), the run of 2026-11-24 00:48",
        ),
        ("real_failover_under_load_at_0036", "200 jobs being created, the run of 2026-11-24 00:36"),
        ("real_failover_under_load_without_gate", "200 jobs being created, write gate off (`--urgent-write-hold 0`)"),
        (
            "real_failover_under_load_before_fair_status",
            "200 jobs being created, the run of 2026-11-24 06:21, before the node agent's per-node status writes",
        ),
        (
            "real_failover_under_load_before_repair_window",
            "200 jobs being created, the run of 2026-11-24 11:15, before the repair window",
        ),
        ("real_failover_under_load_at_1124", "200 jobs being created, the run of 2026-11-24 14:07"),
        ("real_failover_under_load", "200 jobs being created"),
    ):
        entry = results.get(key) or {}
        runs = entry.get("repeats", 1)
        contenders = entry.get("figures", entry)
        for name in _ordered({k: v for k, v in contenders.items() if isinstance(v, dict) and "failovers" in v}):
            f = contenders[name]
            lines.append(
                f"| {load} | {name} | {runs} | {_get(f, 'p50_ms', ' ms')} | {_get(f, 'p99_ms', ' ms')} | "
                f"{_get(f, 'new_pod_p99_ms', ' ms')} | {_get(f, 'service_left_stale')} of {_get(f, 'failovers')} | "
                f"{_get(f, 'pod_created_before_service_repointed')} | {_get(f, 'deletion_p99_ms', ' ms')} | "
                f"{_get(f, 'controller_p99_ms', ' ms')} | "
                f"{_get(f, 'reaction_p99_ms', ' ms')} | {_get(f, 'repair_p99_ms', ' ms')} | "
                f"{_get(f, 'write_p99_ms', ' ms')} | {_get(f, 'apf_queued_max_ms', ' ms')} | "
                f"{_get(f, 'writes_held')} ({_get(f, 'writes_held_over_250ms')}) | "
                f"{_get(f, 'burst_pods_created_s', ' s')} |"
            )
    return lines


def embedded(results: dict[str, Any]) -> list[str]:
    lines = ["| benchmark | figure | median | min | max |", "|---|---|---|---|---|"]
    for key, entry in results.items():
        if key.startswith("real_") or not isinstance(entry, dict) or "figures" not in entry:
            continue
        for path, value in _flatten(entry["figures"]):
            if path.rsplit(".", 1)[-1] in SETTINGS:
                continue
            if isinstance(value, dict) and "median" in value:
                runs = f"{key} ({entry['repeats']} runs)"
                lines.append(f"| {runs} | {path} | {value['median']} | {value['min']} | {value['max']} |")
    return lines


def _flatten(figures: Any, prefix: str = "") -> list[tuple[str, Any]]:
    out: list[tuple[str, Any]] = []
    if isinstance(figures, dict) and "median" not in figures:
        for key, value in figures.items():
            out += _flatten(value, f"{prefix}.{key}" if prefix else key)
    else:
        out.append((prefix, figures))
    return out


def dated_run(results: dict[str, Any]) -> list[str]:
    """The newest named run (``python -m bench issue38``): its entries only, each figure per round as median
    (min-max), and round by round how often kubedl-py was ahead of each contender."""
    stamped = [entry["run"] for entry in results.values() if isinstance(entry, dict) and "run" in entry]
    if not stamped:
        return []
    run = max(stamped, key=lambda r: r["started"])
    keys = [key for key, entry in results.items() if isinstance(entry, dict) and entry.get("run") == run]
    lines = [f"Run started {run['started']} at commit {run['commit']}; its entries:", ""]
    for key in keys:
        entry = results[key]
        lines.append(f"- `{key}`: from {entry.get('measured_at', '?')}, {entry.get('wall_seconds', '?')} s")
    for key in keys:
        entry = results[key]
        if "summary" in entry:
            lines += ["", *_rounds(key, entry)]
        elif "repeats" in entry and "kubedl-py" in entry["runs"][0]:
            lines += ["", *_failover_runs(key, entry)]
        elif "kubedl-py" in entry and "lifecycle" in entry["kubedl-py"]:
            lines += ["", *lifecycle({"real_lifecycle": entry})]
        elif key.startswith("real_hostnet_scale"):
            lines += ["", *_hostnet(key, entry)]
    return lines


def _spread(values: list[float], unit: str = "", digits: int = 2) -> str:
    if not values:
        return "-"
    if min(values) == max(values):
        return f"{values[0]:.{digits}f}{unit}"
    return f"{statistics.median(values):.{digits}f}{unit} ({min(values):.{digits}f}-{max(values):.{digits}f})"


def _table(title: str, columns: list[str]) -> list[str]:
    """A titled Markdown table's first lines: the title, its header and the separator its columns make."""
    return [title, "", "| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]


def _rounds(key: str, entry: dict[str, Any]) -> list[str]:
    jobs = entry["jobs"]
    lines = _table(
        f"`{key}`: {jobs} PyTorchJobs x {entry['replicas']}, {entry['nodes']} nodes",
        [
            "contender",
            "rounds",
            "every pod and Service exists",
            "x bare client",
            "every pod Running",
            "requests until every pod runs (per job)",
            "controller CPU s until then",
            "peak RSS MiB",
            "requests in idle",
        ],
    )
    runs = entry["runs"]
    bare = [run["exist_seconds"] for run in runs.get("bare-client", [])]
    for name in _ordered(entry["summary"]):
        rounds = runs[name]
        exist = [run["exist_seconds"] for run in rounds]
        ratios = [t / b for t, b in zip(exist, bare, strict=False)] if name != "bare-client" else []
        running_ = [run["all_pods_running_seconds"] for run in rounds if "all_pods_running_seconds" in run]
        # the bare client's requests are its creates; a controller's, all it sent until every pod ran
        field = "requests" if name == "bare-client" else "requests_until_all_running"
        requests = [run[field]["total"] for run in rounds if field in run]
        cpu = [run["cpu_seconds_all_running"] for run in rounds if "cpu_seconds_all_running" in run]
        rss = [run["peak_rss_mib"] for run in rounds if "peak_rss_mib" in run]
        idle_ = [run["idle_requests"].get("total", 0) for run in rounds if "idle_requests" in run]
        per_job = f" ({statistics.median(requests) / jobs:.1f})" if requests else ""
        lines.append(
            f"| {name} | {len(rounds)} | {_spread(exist, ' s')} | {_spread(ratios) if ratios else '1.00'} | "
            f"{_spread(running_, ' s')} | {_spread(requests, digits=0)}{per_job} | {_spread(cpu)} | "
            f"{_spread(rss, digits=0)} | {idle_[0] if idle_ else '-'} |"
        )
    ours = runs.get("kubedl-py", [])
    for name in _ordered(entry["summary"]):
        if name in ("kubedl-py", "bare-client") or not ours:
            continue
        pairs = list(zip(ours, runs[name], strict=False))
        ahead = sum(1 for us, them in pairs if us["exist_seconds"] < them["exist_seconds"])
        timed = [
            (us, them) for us, them in pairs if "all_pods_running_seconds" in us and "all_pods_running_seconds" in them
        ]
        first = sum(1 for us, them in timed if us["all_pods_running_seconds"] < them["all_pods_running_seconds"])
        lines.append(
            f"- against {name}: kubedl-py's objects all existed first in {ahead} of {len(pairs)} rounds, "
            f"its pods all ran first in {first} of {len(timed)}"
        )
    return lines


def _failover_runs(key: str, entry: dict[str, Any]) -> list[str]:
    lines = _table(
        f"`{key}`: {entry['repeats']} runs",
        [
            "controller",
            "p50 per run",
            "p99 per run",
            "runs with p99 under 1 s",
            "slowest failover per run",
            "old pod's deletion p99",
            "controller's part p99",
        ],
    )
    names = [name for name in ORDER if name in entry["runs"][0]]
    for name in names:
        runs = [run[name] for run in entry["runs"]]

        def each(field: str, runs: list[dict[str, Any]] = runs) -> str:
            return ", ".join(f"{run[field] / 1000:.2f}" for run in runs) + " s"

        under = sum(1 for run in runs if run["p99_ms"] < 1000)
        lines.append(
            f"| {name} | {each('p50_ms')} | {each('p99_ms')} | {under} of {len(runs)} | {each('max_ms')} | "
            f"{each('deletion_p99_ms')} | {each('controller_p99_ms')} |"
        )
    return lines


def _hostnet(key: str, entry: dict[str, Any]) -> list[str]:
    lines = _table(
        f"`{key}`",
        [
            "port range",
            "jobs",
            "pods",
            "nodes used",
            "all Running",
            "port collisions on a node",
            "Services off their pod",
            "most pods on one port number",
            "requests per job",
            "CPU s",
            "peak RSS MiB",
        ],
    )
    for run in entry["runs"]:
        lines.append(
            f"| {run['port_range']} | {run['jobs']} | {run['pods']} | {run['nodes_used']} | "
            f"{run['all_running_seconds']} s | {run['port_collisions_on_a_node']} | "
            f"{run['services_not_on_their_pod']} | "
            f"{run['most_pods_per_port']} | {run['requests_per_job']} | {run['cpu_seconds']} | {run['peak_rss_mib']} |"
        )
    return lines


def _get(entry: dict[str, Any], key: str, unit: str = "") -> str:
    """A figure with its unit; one of several runs (``{"median", "min", "max"}``) as ``median (min-max)``."""
    if key not in entry:
        return "-"
    value = entry[key]
    if isinstance(value, dict):
        if value["min"] == value["max"]:
            return f"{value['median']}{unit}"
        return f"{value['median']}{unit} ({value['min']}-{value['max']})"
    return f"{value}{unit}"


def main(argv: list[str] | None = None) -> int:
    args = argv if argv is not None else sys.argv[1:]
    path = Path(args[0]) if args else HERE / "results.json"
    results = json.loads(path.read_text())
    sections = {
        "The newest dated run": dated_run(results),
        "Throughput": throughput(
            results,
            [
                "real_n200",
                "real_n200_scheduler500",
                "real_n200_scheduler500_polled",
                "real_n1000",
                "real_controller_tuned_preliminary",
            ],
        ),
        "Throughput, before the dialed Services (a Service per replica)": throughput(
            results,
            ["real_n50", "real_n200_before_dialed_services", "real_n1000_before_dialed_services", "real_pods10000"],
        ),
        "Until every pod runs": running(
            results, ["real_n200_scheduler500", "real_n200_scheduler500_polled", "real_n1000", "real_n200"]
        ),
        "Cost of the whole work": cost(
            results, ["real_n200", "real_n200_scheduler500", "real_n1000", "real_pods10000", "real_idle"]
        ),
        "The profile's fixes, before and after (real_n200_profile_fixes_ab)": fixes(results),
        "Idle (real_n200)": idle(results, "real_n200"),
        "Idle, after every pod runs (real_idle)": idle(results, "real_idle"),
        "Lifecycle": lifecycle(results),
        "Failover": failover(results),
        "Embedded, median of 5": embedded(results),
    }
    for title, lines in sections.items():
        print(f"### {title}\n")
        print("\n".join(lines) + "\n")
    for key, entry in results.items():
        if isinstance(entry, dict) and "measured_at" in entry:
            print(f"- {key}: measured {entry['measured_at']}, {entry.get('wall_seconds', '?')} s wall")
    return 0


if __name__ == "__main__":
    sys.exit(main())
