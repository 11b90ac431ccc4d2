"""What must hold of a SchedulerApp after any sequence of events: the cache, the queues, the assumed pods.

Each check returns the violations it found as readable lines (empty when all holds), so a failing example
says every broken rule at once. They read the parts' private structures on purpose: a pod counted in two
sub-queues, or a node whose column disagrees with its pods, is invisible through the public API until it
costs a lost pod or a double booking.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from kopf_scheduler.app import SchedulerApp
from kopf_scheduler.queue import SchedulingQueue
from kopf_scheduler.state.cache import TERMINAL_PHASES, ClusterCache
from kopf_scheduler.state.pod_info import PodInfo
from tests.unit.fuzz.cluster import ApiModel


def queue_partition(queue: SchedulingQueue) -> list[str]:
    """Every pod the queue knows is in exactly one of activeQ, backoffQ, unschedulablePods, in flight."""
    places: dict[str, list[str]] = {}
    for where, uids in (
        ("active", [q.uid for q in queue._active.values()]),
        ("backoff", [q.uid for q in queue._backoff.values()]),
        ("unschedulable", [q.uid for q in queue._unschedulable.values()]),
        ("in-flight", queue._in_flight.uids()),
    ):
        counted = Counter(uids)
        problems = [f"{uid} {n} times in {where}" for uid, n in counted.items() if n > 1]
        if problems:
            return problems
        for uid in counted:
            places.setdefault(uid, []).append(where)
    wrong = [f"{uid} in {', '.join(where)}" for uid, where in places.items() if len(where) > 1]
    gated = queue._unschedulable._gated - set(queue._unschedulable._pods)
    return wrong + [f"{uid} gated but not in unschedulablePods" for uid in gated]


def queues(app: SchedulerApp) -> list[str]:
    """Each profile's queue is a partition; no pod of one profile sits in another's queue; no pod known to the
    cache as bound or assumed waits in a sub-queue (a bound pod is never re-queued)."""
    problems: list[str] = []
    for name, runtime in app.profiles.items():
        problems += [f"{name}: {p}" for p in queue_partition(runtime.queue)]
        for uid in _queued(runtime.queue):
            pod = app.unassigned.get(uid)
            if pod is not None and pod.scheduler_name != name:
                problems.append(f"{name}: queues {uid} of profile {pod.scheduler_name}")
            if app.cache.pod(uid) is not None:
                problems.append(f"{name}: {uid} waits in a sub-queue while the cache holds it on a node")
    return problems


def _queued(queue: SchedulingQueue) -> list[str]:
    return [
        *(q.uid for q in queue._active.values()),
        *(q.uid for q in queue._backoff.values()),
        *(q.uid for q in queue._unschedulable.values()),
    ]


def cache_totals(cache: ClusterCache) -> list[str]:
    """Each node's columns (requested, non-zero requested, pod count) equal the sums over the pods it holds, each
    pod's parse equals a fresh parse of its object, and every cached pod is on its node or an orphan."""
    problems: list[str] = []
    table = cache.table
    for name in list(cache.node_names()):
        info = cache.node(name)
        assert info is not None
        slot = info.slot
        expected = Counter[str]()
        cpu = memory = 0
        for pod in info.pods.values():
            expected.update(pod.requests)
            cpu += pod.non_zero_cpu
            memory += pod.non_zero_memory
            if pod.node_name != name:
                problems.append(f"{pod.key} on {name} says node {pod.node_name!r}")
        for resource, column in table.resource_index.items():
            got = int(table.requested[slot, column])
            if got != expected.get(resource, 0):
                problems.append(f"{name}: requested {resource} {got} != {expected.get(resource, 0)} from its pods")
        if int(table.pod_count[slot]) != len(info.pods):
            problems.append(f"{name}: pod count {int(table.pod_count[slot])} != {len(info.pods)} pods")
        if [int(v) for v in table.non_zero_requested[slot]] != [cpu, memory]:
            problems.append(f"{name}: non-zero requested {table.non_zero_requested[slot]} != {[cpu, memory]}")
        if info.allocatable != _allocatable(info.obj, table, slot):
            problems.append(f"{name}: allocatable column differs from the node's")
    for pod in cache.pods():
        problems += _parse_matches(pod)
        info = cache.node(pod.node_name)
        if info is not None and pod.uid not in info.pods:
            problems.append(f"{pod.key} cached but not on its node {pod.node_name}")
    return problems


def _allocatable(obj: dict[str, Any], table: Any, slot: int) -> dict[str, int]:
    return {name: int(table.allocatable[slot, table.resource_index[name]]) for name in obj["status"]["allocatable"]}


def _parse_matches(pod: PodInfo) -> list[str]:
    fresh = PodInfo.from_obj(pod.obj)
    fields = ("requests", "non_zero_cpu", "non_zero_memory", "host_ports", "labels", "node_name", "scheduling_group")
    return [f"{pod.key}: kept {f} differs from a fresh parse" for f in fields if getattr(pod, f) != getattr(fresh, f)]


def bindings(app: SchedulerApp, api: ApiModel) -> list[str]:
    """No pod bound twice (a second Binding after one acknowledged); a pod whose Binding the API server
    acknowledged is never back in a sub-queue (that the cache holds no bound pod in a sub-queue: :func:`queues`)."""
    problems = [f"{uid} bound a second time (to {node})" for uid, node in api.double_binds]
    for uid, node in api.bound_by_us.items():
        if uid in api.unacknowledged:
            continue  # the app was told the Binding failed: it requeues the pod until the watch says otherwise
        for name, runtime in app.profiles.items():
            if uid in runtime.queue:
                problems.append(f"{uid}, bound to {node}, re-queued in {name} ({runtime.queue.location(uid)})")
    return problems


def assumed_after_binding(app: SchedulerApp, api: ApiModel) -> list[str]:
    """With no binding cycle running, each pod the cache still assumes is one the API server holds bound by us, to
    the node assumed (its watch event not delivered yet): a failed binding forgot its pod."""
    problems = []
    for uid in sorted(app.cache._assumed):
        pod = app.cache.pod(uid)
        node = api.bound_by_us.get(uid)
        if pod is None or node is None or pod.node_name != node:
            problems.append(f"{uid} assumed on {pod.node_name if pod else None} with no Binding there (API: {node})")
    return problems


def quiescent(app: SchedulerApp, api: ApiModel) -> list[str]:
    """Once every task has finished and every watch event is delivered: the cache is the API server's view
    (nodes; bound, live pods on their nodes), nothing is assumed any more, and every pending pod of a live profile
    waits in exactly one sub-queue (none in flight)."""
    problems: list[str] = []
    cache = app.cache
    if set(cache.node_names()) != set(api.nodes):
        problems.append(f"cache nodes {sorted(cache.node_names())} != API nodes {sorted(api.nodes)}")
    assumed = sorted(cache._assumed)
    if assumed:
        problems.append(f"still assumed after every Binding's event came: {assumed}")
    want = {
        uid: pod["spec"]["nodeName"]
        for uid, pod in api.pods.items()
        if pod["spec"].get("nodeName") and pod.get("status", {}).get("phase") not in TERMINAL_PHASES
    }
    have = {pod.uid: pod.node_name for pod in cache.pods()}
    if want != have:
        problems.append(f"cached pods {have} != the API server's bound pods {want}")
    for name, runtime in app.profiles.items():
        in_flight = runtime.queue._in_flight.uids()
        if in_flight:
            problems.append(f"{name}: still in flight at rest: {in_flight}")
        for uid, pod in api.pods.items():
            if _pending_for(pod, name) and uid not in runtime.queue:
                problems.append(f"{name}: pending pod {pod['metadata']['name']} ({uid}) is in no sub-queue")
    return problems


def _pending_for(pod: dict[str, Any], profile: str) -> bool:
    spec, meta = pod["spec"], pod["metadata"]
    return (
        spec.get("schedulerName") == profile
        and not spec.get("nodeName")
        and "deletionTimestamp" not in meta
        and pod.get("status", {}).get("phase") not in TERMINAL_PHASES
    )
