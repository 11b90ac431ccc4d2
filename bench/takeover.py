"""Takeover benchmark (issue 15): how long a pending backlog waits when the active replica is SIGKILLed.

``python -m bench.takeover`` (sizes: ``BENCH_TAKEOVER=<nodes>x<pods>``, default 5000x50000; peering lifetime:
``BENCH_TAKEOVER_LIFETIME``, default the operator's 15 s; ``BENCH_TAKEOVER_ETCD_COMPACTION``, the API server's
``--etcd-compaction-interval``, default 5m: how long a paginated LIST's continue token lives) writes
``bench/results/takeover.json``.

Method, on the same light control plane as :mod:`bench.e2e` (etcd + kube-apiserver, plain Ready nodes,
scheduler_perf's pod-default pods, all pending before any replica starts):

1. Replica A (peering priority 100) starts; once its peering entry is there, replica B (priority 50) starts and
   pauses in A's favour, as a standby does (``--peering`` is mandatory), and its cache follows the cluster
   meanwhile (its own LIST and watches, ``standby.py``).
2. The moment the harness's watch sees A's first bind, A is SIGKILLed. Its peering entry stays until its
   ``lastseen + lifetime`` passes; then B resumes: its standby stops following, kopf starts its watches where
   the standby's stopped, and the profiles' loops start.
3. Measured: *takeover* = SIGKILL → B's first bind (B's ``scheduler_schedule_attempts_total{result=
   "scheduled"}`` polled every 50 ms), with its milestones: when A's entry expired (its ``lastseen`` +
   ``lifetime``), when B became active (its ``leader_election_master_status`` gauge), when B's cache was
   rebuilt (each "cache reconciled" log line, negative while it stood by); A's *start-up* (spawn → first
   bind: the cold start at this size); the backlog at the kill; B's time to bind all of it, its CPU and peak RSS.

The issue's target is takeover ≤ lifetime + 5 s. kube-scheduler's standby keeps warm informers and only waits
for the lease (15 s) and its retry period (2 s); so does ours since the warm standby (before it, a resumed
replica listed everything again: ≈ 5 s at this size).
"""

from __future__ import annotations

import asyncio
import datetime
import json
import math
import os
import re
import tempfile
import time
from pathlib import Path
from typing import Any

from bench._machine_lock import refuse_if_busy
from bench.e2e import (
    KOPF,
    REPO_ROOT,
    RESULTS_DIR,
    SCHEDULER_NAMES,
    Api,
    PodWatch,
    basic_pod,
    ensure_nodes,
    load1,
    machine_facts,
    prepare_kopf,
    proc_stats,
)
from tools.localcluster import LocalCluster

DEFAULT_SIZE = (5000, 50000)
#: The operator's line once its reconciling LIST rebuilt the cache (eventhandlers.py).
RECONCILED = re.compile(r"cache reconciled")


def _size() -> tuple[int, int]:
    raw = os.environ.get("BENCH_TAKEOVER", "")
    if not raw:
        return DEFAULT_SIZE
    nodes, _, pods = raw.partition("x")
    return int(nodes), int(pods)


async def _create_backlog(api: Api, namespace: str, pods: int) -> None:
    bodies = [basic_pod(f"pod-{i:05d}", SCHEDULER_NAMES[KOPF]) for i in range(pods)]
    await api.create_many(f"/api/v1/namespaces/{namespace}/pods", bodies, concurrency=64)


async def _until(predicate: Any, *, within: float, interval: float = 0.05, what: str) -> float:
    """Poll ``predicate`` until true; the monotonic time it became true."""
    deadline = time.monotonic() + within
    while not predicate():
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what} not within {within:.0f}s")
        await asyncio.sleep(interval)
    return time.monotonic()


async def run(nodes: int, pods: int, lifetime: int | None, log_dir: Path) -> dict[str, Any]:
    apiserver_args = ["--delete-collection-workers=4"]
    compaction = os.environ.get("BENCH_TAKEOVER_ETCD_COMPACTION")  # e.g. 30s: a LIST's continue token expires sooner
    if compaction:
        apiserver_args.append(f"--etcd-compaction-interval={compaction}")
    cluster = LocalCluster("light", unlimited=True, apiserver_args=apiserver_args)
    with cluster:
        api = Api(cluster)
        try:
            await prepare_kopf(cluster)
            await ensure_nodes(api, 0, nodes)
            namespace = "takeover"
            await api.request(
                "POST",
                "/api/v1/namespaces",
                body={"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}},
            )
            watch = PodWatch(api, namespace)
            await watch.start()
            try:
                started = time.monotonic()
                await _create_backlog(api, namespace, pods)
                await _until(lambda: len(watch.created) >= pods, within=600, interval=0.2, what="the backlog")
                print(f"  created {pods} pods in {time.monotonic() - started:.1f}s", flush=True)
                measured = await measure_takeover(cluster, watch, pods, lifetime, log_dir)
            finally:
                await watch.stop()
        finally:
            await api.close()
    return {"nodes": nodes, "pods": pods, **measured}


async def measure_takeover(
    cluster: LocalCluster,
    watch: PodWatch,
    pods: int,
    lifetime: int | None,
    log_dir: Path,
    bind_all_within: float = 1800,
) -> dict[str, Any]:
    """Steps 1-3 of the method on a backlog of ``pods`` pending pods (named for kopf-scheduler's profile) that
    ``watch`` follows; the replicas are stopped when it returns. ``bench.scale`` measures the same at its sizes
    (and gives the standby longer than 30 min to bind them all at 150000)."""
    from tests.e2e.operator_process import OperatorProcess

    extra = ["--peering-lifetime", str(lifetime)] if lifetime else []
    active = OperatorProcess(cluster.kubeconfig, peering_priority=100, extra_args=extra, name="active", log_dir=log_dir)
    standby = OperatorProcess(
        cluster.kubeconfig, peering_priority=50, extra_args=extra, name="standby", log_dir=log_dir
    )
    try:
        spawned = time.monotonic()
        active.start(wait=False)
        await _until(active.in_peering, within=120, what="the active replica's peering entry")
        standby.start(wait=False)
        await _until(standby.in_peering, within=120, what="the standby's peering entry")
        first_bind = await _until(lambda: bool(watch.bound), within=600, what="the active's first bind")
        entry = active.peering_status().get(active.identity) or {}
        active.kill()
        killed = time.monotonic()
        backlog = pods - len(watch.bound)
        print(f"  active: first bind {first_bind - spawned:.1f}s after spawn; killed, {backlog} pending")
        expires = _expiry(entry, killed)
        resumed = await _until(
            lambda: standby.metric("leader_election_master_status") >= 1,
            within=600,
            what="the standby's resume",
        )
        took_over = await _until(lambda: standby.scheduled_count() > 0, within=600, what="the standby's first bind")
        reconciled = _log_times(standby, RECONCILED)
        error = ""
        try:
            await _until(
                lambda: len(watch.bound) >= pods or not standby.alive(),
                within=bind_all_within,
                interval=0.5,
                what="every pod bound",
            )
        except TimeoutError as exc:
            error = str(exc)
        done = time.monotonic()
        if standby.alive():
            peak_rss, cpu = proc_stats(standby.pid)
            standby_rss = standby.metric("process_resident_memory_bytes") / 2**20
        else:
            error = error or f"the standby exited: {_last_error(standby)}"
            peak_rss = cpu = standby_rss = math.nan
        bound_by_standby = len(watch.bound) - (pods - backlog)
    finally:
        active.kill()
        standby.stop()
    return {
        "peering_lifetime_s": lifetime or 15,
        "active_startup_s": round(first_bind - spawned, 2),
        "backlog_at_kill": backlog,
        "takeover_s": round(took_over - killed, 2),
        "dead_entry_expired_s": None if expires is None else round(expires - killed, 2),
        "standby_active_s": round(resumed - killed, 2),
        "cache_reconciled_s": [round(at - killed, 2) for at in reconciled],
        "resume_to_first_bind_s": round(took_over - resumed, 2),
        "standby_bound": bound_by_standby,
        "standby_all_bound_s": round(done - killed, 1) if not error else None,
        "error": error,
        "standby_cpu_s": None if math.isnan(cpu) else round(cpu, 1),
        "standby_peak_rss_mib": None if math.isnan(peak_rss) else round(peak_rss, 1),
        "standby_rss_at_end_mib": round(standby_rss, 1) if not math.isnan(standby_rss) else None,
    }


def _expiry(entry: dict[str, Any], killed: float) -> float | None:
    """When the dead replica's peering entry (``lastseen`` + ``lifetime``, wall clock) expires, as monotonic."""
    lastseen, lifetime = entry.get("lastseen"), entry.get("lifetime")
    if not lastseen or not lifetime:
        return None
    wall = datetime.datetime.fromisoformat(str(lastseen).replace("Z", "+00:00")).timestamp() + float(lifetime)
    return killed + (wall - time.time())


def _last_error(process: Any) -> str:
    """The last ERROR line of the process's log (why it exited)."""
    errors = process.log_lines(re.compile(r" ERROR "))
    return errors[-1][:300] if errors else "no ERROR line in its log"


def _log_times(process: Any, pattern: re.Pattern[str]) -> list[float]:
    """When the process logged ``pattern``, each time, on the monotonic clock (from its log's wall-clock stamps)."""
    times = []
    for line in process.log_lines(pattern):
        stamp = re.match(r"(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3})", line)
        if stamp is not None:
            wall = (
                time.mktime(time.strptime(stamp.group(1)[:19], "%Y-%m-%d %H:%M:%S")) + int(stamp.group(1)[20:]) / 1000
            )
            times.append(time.monotonic() - (time.time() - wall))
    return times


def main() -> int:
    nodes, pods = _size()
    raw_lifetime = os.environ.get("BENCH_TAKEOVER_LIFETIME")
    lifetime = int(raw_lifetime) if raw_lifetime else None
    log_dir = Path(tempfile.mkdtemp(prefix="kopf-scheduler-takeover-"))
    facts = machine_facts()
    print(f"takeover: {nodes} nodes, {pods} pods; load {load1():.2f}; logs {log_dir}", flush=True)
    with refuse_if_busy("bench.takeover"):
        result = asyncio.run(run(nodes, pods, lifetime, log_dir))
    result["meta"] = facts
    print(json.dumps(result, indent=1), flush=True)
    out = Path(os.environ.get("BENCH_RESULTS_DIR") or RESULTS_DIR) / "takeover.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=1) + "\n")
    print(f"wrote {out.relative_to(REPO_ROOT) if out.is_relative_to(REPO_ROOT) else out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
