"""Scale benchmark (issue 39): 15000 nodes and 150000 pods, three times scheduler_perf's largest case (5000 nodes).

``make bench-scale`` (``python -m bench.scale``) writes ``bench/results/scale.json`` and the "Scale" section of
``docs/benchmarks.md`` (``python -m bench.scale --render`` writes the section again from the JSON files).
Settings (environment):

- ``BENCH_SCALE_NODES`` (15000), ``BENCH_SCALE_PODS`` (150000): the size.
- ``BENCH_SCHEDULERS`` (kube-scheduler,kopf-scheduler): which run, one after the other.
- ``BENCH_SCALE_TAKEOVER_PODS`` (the pod count; 0 = no takeover phase): kopf-scheduler's takeover backlog.
- ``BENCH_SCALE_MIN_FREE_MIB`` (6144): pod creation stops when the machine's ``MemAvailable`` falls below this
  (room left for the scheduler's cache); the pods created by then are the size that holds, and are what run.
- ``BENCH_SCALE_CHUNK`` (5000): pods created between two looks at the memory.
- ``BENCH_SCALE_CAPACITY_ONLY`` (0): 1 = only create the nodes and pods and bind them with the e2e benchmark's
  ceiling binder (no scheduler), to ``scale-capacity.json``: where the control plane stops, and its memory per
  1000 pods (``control_plane.creation_curves``).
- ``BENCH_STALL_SECONDS`` (300), ``BENCH_RESULTS_DIR``, ``BENCH_DOC`` (as ``bench/e2e.py``; empty = no doc).

Method: :mod:`bench.e2e`'s, one run per scheduler (:func:`bench.e2e.run_one` with :class:`ScaleHooks`): the same
light control plane (etcd + kube-apiserver, no APF, plain Ready nodes of scheduler_perf's node-default), the
run's pod-default pods all pending before its scheduler is spawned, the pods deleted after it. Per scheduler:
pods/s (scheduler_perf's SchedulingThroughput), wall time (spawn → last bind), peak RSS (``VmHWM``), CPU seconds
per pod, start-up (spawn → first bind, and spawn → ``/readyz/sched-handler-sync`` answering 200: the initial
LIST of every informer delivered to the cache) and nothing lost (``bench/_scale_checks.py``: listed from the API
server after the scheduler stopped). Then, for kopf-scheduler, :func:`bench.takeover.measure_takeover` on a fresh
backlog of the same size: two replicas, the active one SIGKILLed at its first bind, the time to the standby's
first bind. The control plane's own memory (kube-apiserver and etcd RSS, and etcd's data, which lives on tmpfs)
is sampled every second throughout, so the point where this machine stops can be read off and extrapolated.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import aiohttp

from bench._e2e_report import replace_section
from bench._machine_lock import refuse_if_busy
from bench._scale_checks import (
    DEFAULT_NODES,
    DEFAULT_PODS,
    check_placement,
    env_int,
    env_size,
    extrapolate,
    lost,
    slope_per_1000,
)
from bench._scale_report import BEGIN, END, render_section
from bench.e2e import (
    CEILING,
    DOC_PATH,
    KOPF,
    KUBE,
    REPO_ROOT,
    RESULTS_DIR,
    SCHEDULER_NAMES,
    Api,
    Config,
    PodWatch,
    Runner,
    Workload,
    _clean,
    basic_pod,
    compile_operator_bytecode,
    delete_namespace_pods,
    ensure_nodes,
    load1,
    machine_facts,
    prepare_kopf,
    run_one,
)
from bench.takeover import measure_takeover
from tools.localcluster import LocalCluster

MIB = 1024 * 1024
#: The line of a verbose ``/readyz`` once the informers' initial lists are in the cache (upstream's check name).
SYNCED = "[+]sched-handler-sync ok"


def _rss_mib(pid: int, field: str = "VmRSS") -> float:
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


def mem_available_mib() -> float:
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) / 1024
    return 0.0


def _dir_mib(path: Path) -> float:
    """Bytes in use under ``path`` (etcd's data on tmpfs is memory), in MiB."""
    total = 0
    for root, _, files in os.walk(path):
        for name in files:
            with contextlib.suppress(OSError):
                total += os.stat(os.path.join(root, name)).st_blocks * 512
    return total / MIB


class ControlPlaneMeter:
    """kube-apiserver's and etcd's memory, sampled every second; named snapshots and the peaks."""

    def __init__(self, cluster: LocalCluster) -> None:
        self.cluster = cluster
        self.peak: dict[str, float] = {}
        self.snapshots: dict[str, dict[str, float]] = {}
        #: Per namespace: (pods created so far, the control plane's MiB) after each chunk of pods.
        self.curves: dict[str, list[tuple[int, float]]] = {}
        self._task: asyncio.Task[None] | None = None

    def sample(self) -> dict[str, float]:
        now = {
            "apiserver_rss_mib": _rss_mib(self.cluster.components["kube-apiserver"].pid),
            "etcd_rss_mib": _rss_mib(self.cluster.components["etcd"].pid),
            "etcd_data_mib": _dir_mib(self.cluster.etcd_dir),
            "mem_available_mib": mem_available_mib(),
        }
        now["total_mib"] = now["apiserver_rss_mib"] + now["etcd_rss_mib"] + now["etcd_data_mib"]
        for key, value in now.items():
            if key == "mem_available_mib":
                self.peak["mem_available_min_mib"] = min(self.peak.get("mem_available_min_mib", value), value)
            else:
                self.peak[key] = max(self.peak.get(key, 0.0), value)
        return now

    def snapshot(self, label: str) -> dict[str, float]:
        self.snapshots[label] = {key: round(value, 1) for key, value in self.sample().items()}
        return self.snapshots[label]

    def curve_point(self, namespace: str, pods: int) -> None:
        now = self.sample()
        self.curves.setdefault(namespace, []).append((pods, round(now["total_mib"], 1)))
        print(
            f"    {namespace}: {pods} pods: control plane {now['total_mib']:.0f} MiB (kube-apiserver "
            f"{now['apiserver_rss_mib']:.0f}, etcd {now['etcd_rss_mib']:.0f} + data {now['etcd_data_mib']:.0f}); "
            f"MemAvailable {now['mem_available_mib']:.0f} MiB",
            flush=True,
        )

    def start(self) -> None:
        async def loop() -> None:
            while True:
                self.sample()
                await asyncio.sleep(1.0)

        self._task = asyncio.create_task(loop())

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    def summary(self) -> dict[str, Any]:
        slopes = [slope_per_1000(points) for points in self.curves.values() if len(points) > 1]
        return {
            "snapshots": self.snapshots,
            "peak": {key: round(value, 1) for key, value in self.peak.items()},
            "creation_curves": self.curves,
            "pending_mib_per_1000": round(max(slopes), 1) if slopes else None,
        }


async def create_guarded(
    api: Api, meter: ControlPlaneMeter, namespace: str, scheduler_name: str, want: int, settings: dict[str, int]
) -> tuple[int, str]:
    """Create up to ``want`` pending pod-default pods in chunks, stopping when the machine's free memory falls
    below the floor; (how many were created, why it stopped early or "")."""
    created, chunk = 0, settings["chunk"]
    meter.curve_point(namespace, 0)
    while created < want:
        free = mem_available_mib()
        if free < settings["min_free_mib"]:
            reason = (
                f"MemAvailable {free:.0f} MiB < {settings['min_free_mib']} MiB after {created} pods "
                f"(kube-apiserver {meter.sample()['apiserver_rss_mib']:.0f} MiB)"
            )
            print(f"  !! pod creation stopped: {reason}", flush=True)
            return created, reason
        bodies = [basic_pod(f"pod-{i:06d}", scheduler_name) for i in range(created, min(want, created + chunk))]
        await api.create_many(f"/api/v1/namespaces/{namespace}/pods", bodies, concurrency=64)
        created += len(bodies)
        meter.curve_point(namespace, created)
    return created, ""


async def list_all(api: Api, path: str) -> list[dict[str, Any]]:
    """Every object of a collection, in pages of 5000."""
    items: list[dict[str, Any]] = []
    params = {"limit": "5000"}
    while True:
        page = await api.request("GET", path, params=params)
        items.extend(page.get("items") or [])
        token = (page.get("metadata") or {}).get("continue")
        if not token:
            return items
        params = {"limit": "5000", "continue": token}


async def placement(api: Api, namespace: str, expected: int, rebound: int) -> dict[str, Any]:
    """The end-of-run check from the API server (``bench/_scale_checks.py``)."""
    pods = await list_all(api, f"/api/v1/namespaces/{namespace}/pods")
    nodes = await list_all(api, "/api/v1/nodes")
    check = check_placement(pods, nodes)
    reasons = lost(check, expected, rebound)
    return {"check": check, "rebound": rebound, "nothing_lost": not reasons, "lost": reasons}


class ScaleHooks:
    """:class:`bench.e2e.RunHooks` for one scheduler's run: guarded creation, readiness, the end-of-run check."""

    def __init__(self, meter: ControlPlaneMeter, want: int, settings: dict[str, int]) -> None:
        self.meter = meter
        self.want = want
        self.settings = settings
        self.fields: dict[str, Any] = {}
        self._before: dict[str, float] = {}
        self._ready: asyncio.Task[float | None] | None = None
        self._spawn = 0.0

    async def create_pods(self, api: Api, workload: Workload, namespace: str, scheduler_name: str) -> int:
        self._before = self.meter.snapshot(f"{namespace}: before pods")
        started = time.monotonic()
        created, stopped = await create_guarded(api, self.meter, namespace, scheduler_name, self.want, self.settings)
        after = self.meter.snapshot(f"{namespace}: pods created")
        self.fields = {
            "requested_pods": self.want,
            "created_s": round(time.monotonic() - started, 1),
            "creation_stopped": stopped,
            "control_plane_pending_growth_mib": round(after["total_mib"] - self._before["total_mib"], 1),
        }
        print(f"  created {created} pods in {self.fields['created_s']}s", flush=True)
        return created

    def spawned(self, runner: Runner, spawn: float) -> None:
        self._spawn = spawn
        self._ready = asyncio.create_task(self._until_ready(runner))

    async def _until_ready(self, runner: Runner) -> float | None:
        """Seconds from spawn until ``/readyz?verbose`` says ``[+]sched-handler-sync ok`` (both schedulers have
        that check; only ``/readyz`` itself is readable anonymously, so its verbose answer is parsed)."""
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=2)) as session:
            while runner.alive():
                url = f"https://127.0.0.1:{runner.secure_port}/readyz?verbose"
                with contextlib.suppress(aiohttp.ClientError, TimeoutError, OSError):
                    async with session.get(url, ssl=False) as answer:
                        if SYNCED in await answer.text():
                            return round(time.monotonic() - self._spawn, 2)
                await asyncio.sleep(0.1)
        return None

    async def finished(self, api: Api, namespace: str, watch: PodWatch) -> dict[str, Any]:
        ready_s = None
        if self._ready is not None:
            if not self._ready.done():
                self._ready.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                ready_s = await self._ready
        bound = self.meter.snapshot(f"{namespace}: all bound")
        growth = round(bound["total_mib"] - self._before["total_mib"], 1)
        checked = await placement(api, namespace, len(watch.created), len(watch.rebound))
        return {**self.fields, "control_plane_growth_mib": growth, "ready_s": ready_s, **checked}


async def run_schedulers(
    api: Api, cluster: LocalCluster, meter: ControlPlaneMeter, size: tuple[int, int], settings: dict[str, int]
) -> list[dict[str, Any]]:
    """One run per scheduler; a run that could not create all pods sets the size of the runs after it."""
    nodes, want = size
    schedulers = [s.strip() for s in os.environ.get("BENCH_SCHEDULERS", "").split(",") if s.strip()] or [KUBE, KOPF]
    config = Config(reps=1, schedulers=schedulers, stall_seconds=float(settings["stall_seconds"]), doc_path=None)
    config.log_dir = Path(tempfile.mkdtemp(prefix="kopf-scheduler-scale-"))
    print(f"logs: {config.log_dir}", flush=True)
    workload = Workload("scale", f"SchedulingBasic at {nodes} nodes", nodes, want, basic_pod, "pod-default pods")
    rows = []
    for scheduler in schedulers:
        hooks = ScaleHooks(meter, want, settings)
        started = time.monotonic()
        row, _ = await run_one(api, cluster, config, workload, scheduler, 1, config.log_dir, hooks)
        total = time.monotonic() - started
        rss = [mib for _, mib in row.pop("rss_timeline", None) or []]
        row["rss_base_mb"] = min(rss) if rss else None  # its RSS a second after spawn: before most of its cache
        row["wall_s"] = round(row["startup_s"] + row["duration_s"], 1)
        row["cpu_ms_per_pod"] = round(row["cpu_s"] / row["bound"] * 1000, 2) if row["bound"] else None
        row["cleanup_s"] = round(total - row["created_s"] - row["wall_s"], 1)  # the check and the deletion
        meter.snapshot(f"{scheduler}: pods deleted")
        want = min(want, row["pods"])
        rows.append(row)
        print(
            f"  {scheduler}: ready {row['ready_s']}s, first bind {row['startup_s']:.1f}s, all bound "
            f"{row['wall_s']}s, {row['throughput_avg']:.0f} pods/s, peak RSS {row['peak_rss_mb']:.0f} MiB, "
            f"{row['cpu_ms_per_pod']} ms CPU/pod; nothing lost: {row['nothing_lost']} {row['lost']}",
            flush=True,
        )
    return rows


async def run_takeover(
    api: Api, cluster: LocalCluster, meter: ControlPlaneMeter, pods: int, settings: dict[str, int]
) -> dict[str, Any]:
    """kopf-scheduler's takeover on a backlog of ``pods`` (``bench/takeover.py``'s method), checked the same way."""
    namespace = "scale-takeover"
    body = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}}
    await api.request("POST", "/api/v1/namespaces", body=body)
    watch = PodWatch(api, namespace)
    await watch.start()
    try:
        started = time.monotonic()
        created, stopped = await create_guarded(api, meter, namespace, SCHEDULER_NAMES[KOPF], pods, settings)
        while len(watch.created) < created:
            watch.check()
            await asyncio.sleep(0.2)
        created_s = round(time.monotonic() - started, 1)
        print(f"  takeover: created {created} pods in {created_s}s", flush=True)
        log_dir = Path(tempfile.mkdtemp(prefix="kopf-scheduler-scale-takeover-"))
        measured = await measure_takeover(cluster, watch, created, None, log_dir, max(1800.0, created / 20))
        checked = await placement(api, namespace, len(watch.created), len(watch.rebound))
    finally:
        await watch.stop()
    meter.snapshot("takeover: all bound")
    await delete_namespace_pods(api, namespace, wait_seconds=max(1800.0, created / 50))
    print(f"  takeover: {measured['takeover_s']}s; nothing lost: {checked['nothing_lost']} {checked['lost']}")
    return {"pods": created, "created_s": created_s, "creation_stopped": stopped, **measured, **checked}


def control_plane_figures(meter: ControlPlaneMeter, rows: list[dict[str, Any]], nodes_s: float) -> dict[str, Any]:
    snaps = meter.snapshots
    empty, with_nodes = snaps["empty"]["total_mib"], snaps["nodes created"]["total_mib"]
    growth = [row["control_plane_growth_mib"] * 1000 / row["pods"] for row in rows if row["pods"]]
    return {
        **meter.summary(),
        "nodes_created_s": round(nodes_s, 1),
        "empty_mib": empty,
        "nodes_mib": round(with_nodes - empty, 1),
        "pods_mib_per_1000": round(max(growth), 1) if growth else None,
    }


async def probe_capacity(
    api: Api, cluster: LocalCluster, meter: ControlPlaneMeter, pods: int, settings: dict[str, int]
) -> dict[str, Any]:
    """``BENCH_SCALE_CAPACITY_ONLY=1``: create the pods up to the size or the memory floor, then bind them all with
    :mod:`bench._e2e_ceiling` (no scheduling, no events): where the control plane stops, and its memory per 1000
    pods pending and bound, without the schedulers' time."""
    namespace = "scale-capacity"
    body = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}}
    await api.request("POST", "/api/v1/namespaces", body=body)
    watch = PodWatch(api, namespace)
    await watch.start()
    runner = Runner(CEILING, cluster, namespace, Config(), Path(tempfile.mkdtemp(prefix="kopf-scheduler-capacity-")))
    try:
        started = time.monotonic()
        created, stopped = await create_guarded(api, meter, namespace, SCHEDULER_NAMES[CEILING], pods, settings)
        created_s = round(time.monotonic() - started, 1)
        pending = meter.snapshot("capacity: pods created")
        print(f"  capacity: {created} pods in {created_s}s; control plane {pending}", flush=True)
        started = time.monotonic()
        runner.start()
        while len(watch.bound) < created and runner.alive() and time.monotonic() - started < 3600:
            watch.check()
            await asyncio.sleep(1.0)
        bound_s = round(time.monotonic() - started, 1)
    finally:
        runner.stop()
        await watch.stop()
    bound = meter.snapshot("capacity: pods bound")
    print(f"  capacity: {len(watch.bound)} bound in {bound_s}s; control plane {bound}", flush=True)
    return {
        "pods": created,
        "created_s": created_s,
        "creation_stopped": stopped,
        "bound": len(watch.bound),
        "bound_s": bound_s,
    }


async def run(size: tuple[int, int], settings: dict[str, int]) -> dict[str, Any]:
    nodes, pods = size
    cluster = LocalCluster("light", unlimited=True, apiserver_args=["--delete-collection-workers=4", "--event-ttl=10m"])
    started = time.monotonic()
    with cluster:
        api = Api(cluster)
        meter = ControlPlaneMeter(cluster)
        meter.start()
        try:
            await prepare_kopf(cluster)
            meter.snapshot("empty")
            nodes_started = time.monotonic()
            await ensure_nodes(api, 0, nodes)
            nodes_s = time.monotonic() - nodes_started
            meter.snapshot("nodes created")
            if settings["capacity_only"]:
                capacity = await probe_capacity(api, cluster, meter, pods, settings)
                return {
                    "size": {"nodes": nodes, "pods": capacity["pods"], "requested_pods": pods},
                    "capacity": capacity,
                    "control_plane": control_plane_figures(meter, [], nodes_s),
                    "runtime_s": round(time.monotonic() - started, 1),
                }
            rows = await run_schedulers(api, cluster, meter, size, settings)
            held = min((row["pods"] for row in rows), default=pods)
            takeover: dict[str, Any] = {}
            if settings["takeover_pods"] and any(row["scheduler"] == KOPF for row in rows):
                takeover = await run_takeover(api, cluster, meter, min(settings["takeover_pods"], held), settings)
        finally:
            await meter.stop()
            await api.close()
    return {
        "size": {"nodes": nodes, "pods": held, "requested_pods": pods},
        "rows": rows,
        "takeover": takeover,
        "control_plane": control_plane_figures(meter, rows, nodes_s),
        "runtime_s": round(time.monotonic() - started, 1),
    }


def settings_from_env(pods: int) -> dict[str, int]:
    env = os.environ
    return {
        "takeover_pods": env_int(env, "BENCH_SCALE_TAKEOVER_PODS", pods),
        "min_free_mib": env_int(env, "BENCH_SCALE_MIN_FREE_MIB", 6144),
        "chunk": env_int(env, "BENCH_SCALE_CHUNK", 5000, minimum=1),
        "stall_seconds": env_int(env, "BENCH_STALL_SECONDS", 300, minimum=1),
        "capacity_only": env_int(env, "BENCH_SCALE_CAPACITY_ONLY", 0),
    }


def write_doc(result: dict[str, Any], capacity: dict[str, Any] | None) -> None:
    """The section of ``docs/benchmarks.md`` (or ``BENCH_DOC``; empty = none) from the run and the capacity probe."""
    doc = os.environ.get("BENCH_DOC")
    doc_path = DOC_PATH if doc is None else (Path(doc) if doc else None)
    if doc_path is not None:
        replace_section(doc_path, render_section(result, capacity), BEGIN, END)
        print(f"wrote {doc_path}", flush=True)


def main(argv: list[str] | None = None) -> int:
    results_dir = Path(os.environ.get("BENCH_RESULTS_DIR") or RESULTS_DIR)
    if (argv if argv is not None else sys.argv[1:]) == ["--render"]:  # the doc again from the JSON, nothing run
        capacity = results_dir / "scale-capacity.json"
        loaded = json.loads(capacity.read_text()) if capacity.exists() else None
        write_doc(json.loads((results_dir / "scale.json").read_text()), loaded)
        return 0
    size = env_size(os.environ)
    settings = settings_from_env(size[1])
    facts = machine_facts()
    print(f"scale: {size[0]} nodes, {size[1]} pods; {settings}; load {load1():.2f}", flush=True)
    compile_operator_bytecode()
    with refuse_if_busy("bench.scale"):
        result = asyncio.run(run(size, settings))
    result["meta"] = facts
    results_dir.mkdir(parents=True, exist_ok=True)
    if settings["capacity_only"]:
        (results_dir / "scale-capacity.json").write_text(json.dumps(_clean(result), indent=1) + "\n")
        print(f"wrote scale-capacity.json; control plane {json.dumps(result['control_plane']['peak'])}", flush=True)
        if (results_dir / "scale.json").exists():
            write_doc(json.loads((results_dir / "scale.json").read_text()), _clean(result))
        return 0
    if (result["size"]["nodes"], result["size"]["pods"]) != (DEFAULT_NODES, DEFAULT_PODS):
        result["extrapolation"] = extrapolate(result, DEFAULT_NODES, DEFAULT_PODS)
        print(f"extrapolated to the issue's size: {json.dumps(result['extrapolation'])}", flush=True)
    out = results_dir / "scale.json"
    out.write_text(json.dumps(_clean(result), indent=1) + "\n")
    print(f"wrote {out.relative_to(REPO_ROOT) if out.is_relative_to(REPO_ROOT) else out}", flush=True)
    capacity = results_dir / "scale-capacity.json"
    write_doc(_clean(result), json.loads(capacity.read_text()) if capacity.exists() else None)
    complete = all(row["complete"] and row["nothing_lost"] for row in result["rows"])
    return 0 if complete and (not result["takeover"] or result["takeover"]["nothing_lost"]) else 1


if __name__ == "__main__":
    sys.exit(main())
