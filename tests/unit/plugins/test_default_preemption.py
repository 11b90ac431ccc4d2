"""DefaultPreemption (upstream v1.36.3 ``defaultpreemption`` + ``framework/preemption``), step by step.

The dry run uses the real default profile (NodeResourcesFit decides who fits) over a fake Handle; the
executor runs its spawned coroutine against a recording API client.
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine, Iterable, Sequence
from typing import Any, NamedTuple

import numpy as np
import pytest

from kopf_scheduler.algorithm import FitError, run_post_filter, run_post_filter_with_extenders, schedule_pod
from kopf_scheduler.api.profile import Extender as ExtenderSpec
from kopf_scheduler.api.profile import SchedulerProfileSpec
from kopf_scheduler.framework import ActionType, ClusterEvent, Code, CycleState, EventResource, Status
from kopf_scheduler.framework.builder import resolve_profile
from kopf_scheduler.framework.events import QUEUE, QUEUE_SKIP
from kopf_scheduler.framework.extender import Extender, PendingPostFilterResult, build_extenders
from kopf_scheduler.framework.interface import APIError, PluginsRunner, PostFilterResult
from kopf_scheduler.framework.runtime import Framework
from kopf_scheduler.framework.verdicts import NodeToStatusMap
from kopf_scheduler.plugins.default_preemption import (
    EXPLAIN_DROPPED_BY_EXTENDER,
    NO_VICTIMS,
    NOT_ELIGIBLE_NEVER,
    NOT_ELIGIBLE_TERMINATING,
    NOT_HELPFUL,
    WAITING_FOR_PREEMPTION,
    Candidate,
    DefaultPreemption,
    potential_nodes,
)
from kopf_scheduler.plugins.default_preemption.dry_run import DryRunRemoval, NodesDryRun
from kopf_scheduler.plugins.default_preemption.evaluator import Budget, pick_one_node_for_preemption
from kopf_scheduler.plugins.default_preemption.plugin import (
    calculate_num_candidates,
    pod_terminating_by_preemption,
    split_by_pdb_violation,
)
from kopf_scheduler.plugins.default_preemption.victims import Victims, sort_by_importance
from kopf_scheduler.plugins.registry import default_registry
from kopf_scheduler.state.cache import ClusterCache
from kopf_scheduler.state.objects import POD_DISRUPTION_BUDGET
from kopf_scheduler.state.pod_info import PodInfo
from kopf_scheduler.state.selectors import LabelSelector
from tests.unit.factories import make_cache, make_node, make_pod, pod_info
from tests.unit.test_extenders import FakeTransport

NOW = 1_800_000_000.0
#: DynamicResources' PostFilter runs first in the default profile and says this for a pod without claims.
NO_CLAIMS = "no new claims to deallocate, "


# -- fakes -----------------------------------------------------------------------------------------------
class Recorder:
    def __init__(self) -> None:
        self.attempts = 0
        self.victims: list[int] = []

    def preemption_attempt(self) -> None:
        self.attempts += 1

    def preemption_victims(self, count: int) -> None:
        self.victims.append(count)


class FakeNominator:
    def __init__(self) -> None:
        self.nominated: dict[str, list[PodInfo]] = {}
        self.deleted: list[str] = []

    def nodes_with_nominated_pods(self) -> list[str]:
        return [n for n, pods in self.nominated.items() if pods]

    def nominated_pods_for_node(self, node_name: str) -> list[PodInfo]:
        return list(self.nominated.get(node_name, []))

    def add_nominated_pod(self, pod: PodInfo, node_name: str) -> None:
        self.nominated.setdefault(node_name, []).append(pod)

    def delete_nominated_pod_if_exists(self, pod: PodInfo) -> None:
        self.deleted.append(pod.name)
        for pods in self.nominated.values():
            pods[:] = [p for p in pods if p.uid != pod.uid]


class FakeClient:
    def __init__(self, fail: dict[str, int] | None = None) -> None:
        self.calls: list[tuple[str, str, Any]] = []
        self.fail = fail or {}

    async def patch_pod_status(self, *, namespace: str, name: str, patch: dict[str, Any]) -> None:
        self.calls.append(("patch", name, patch))
        await asyncio.sleep(0)
        if name in self.fail:
            raise APIError(self.fail[name], "boom")

    async def delete_pod(self, *, namespace: str, name: str, uid: str) -> None:
        self.calls.append(("delete", name, uid))
        await asyncio.sleep(0)


class PreemptionHandle:
    """The Handle seams preemption uses, recorded."""

    def __init__(self, cache: ClusterCache, pending: Iterable[PodInfo] = ()) -> None:
        self.cache = cache
        self.pending = {p.uid: p for p in pending}
        self.client = FakeClient()
        self.nominator = FakeNominator()
        self.metrics = Recorder()
        self.waiting: set[str] = set()
        #: (uid, plugin) of each pod preempted while waiting at Permit.
        self.preempted_waiting: list[tuple[str, str]] = []
        self.activated: list[str] = []
        self.events: list[tuple[str, str, str, str, str]] = []
        #: The ``related`` pod of each event, by name.
        self.related: list[str | None] = []
        self.jobs: list[Coroutine[Any, Any, None]] = []
        #: Uids whose pending status writes the executor waited for, in order.
        self.settled: list[str] = []
        self.plugins_runner: PluginsRunner | None = None
        self.extenders: tuple[Extender, ...] = ()

    def attach_pipeline(self, runner: PluginsRunner, extenders: Sequence[Extender]) -> None:
        self.plugins_runner = runner
        self.extenders = tuple(extenders)

    @property
    def profile_name(self) -> str:
        return "default-scheduler"

    def snapshot(self) -> Any:
        return self.cache.snapshot()

    def pod_exists(self, pod: PodInfo) -> bool:
        return True

    def get_pod(self, uid: str) -> PodInfo | None:
        return self.pending.get(uid) or self.cache.pod(uid)

    def activate(self, pods: Iterable[PodInfo]) -> None:
        self.activated += [p.name for p in pods]

    def reject_waiting_pod(self, uid: str) -> bool:
        raise AssertionError("preemption preempts waiting pods (upstream Preempt), it does not reject them")

    def preempt_waiting_pod(self, uid: str, plugin: str) -> bool:
        if uid in self.waiting:
            self.preempted_waiting.append((uid, plugin))
            return True
        return False

    def record_event(
        self,
        regarding: PodInfo,
        *,
        event_type: str,
        reason: str,
        action: str,
        note: str,
        related: PodInfo | None = None,
    ) -> None:
        self.events.append((regarding.name, event_type, reason, action, note))
        self.related.append(None if related is None else related.name)

    def spawn(self, job: Coroutine[Any, Any, None], *, name: str) -> None:
        self.jobs.append(job)

    async def pod_status_settled(self, uid: str) -> None:
        self.settled.append(uid)

    def __del__(self) -> None:
        for job in self.jobs:  # spawned but not run by the test
            job.close()

    def run_jobs(self) -> None:
        jobs, self.jobs = self.jobs, []
        for job in jobs:
            asyncio.run(job)


# -- builders --------------------------------------------------------------------------------------------
def running(name: str, node: str, *, priority: int = 0, cpu: str = "1", start: str | None = None, **kw: Any) -> dict:
    obj = make_pod(name, node_name=node, requests={"cpu": cpu}, spec={"priority": priority}, uid=f"uid-{name}", **kw)
    if start:
        obj["status"]["startTime"] = start
    return obj


def preemptor(name: str = "high", *, priority: int = 100, cpu: str = "2", **spec: Any) -> PodInfo:
    return pod_info(make_pod(name, requests={"cpu": cpu}, spec={"priority": priority, **spec}, uid=f"uid-{name}"))


def setup(
    nodes: list[dict], pods: list[dict], pod: PodInfo, *, extenders: Sequence[Extender] = (), **args: Any
) -> tuple[Framework, DefaultPreemption, PreemptionHandle]:
    cache = make_cache(nodes, pods)
    handle = PreemptionHandle(cache, [pod])
    registry = default_registry()
    spec = SchedulerProfileSpec.model_validate(
        {"pluginConfig": [{"name": "DefaultPreemption", "args": args}]} if args else {}
    )
    profile = resolve_profile("default-scheduler", spec, registry)
    framework = Framework(
        profile,
        registry,
        handle,  # type: ignore[arg-type]  # the recorded seams preemption uses, not the whole Handle
        nominator=handle.nominator,
        extenders=extenders,
    )
    plugin = framework.plugins["DefaultPreemption"]
    assert isinstance(plugin, DefaultPreemption)
    assert handle.plugins_runner is framework
    plugin.clock = lambda: NOW
    plugin.rng.seed(0)
    return framework, plugin, handle


def fail(framework: Framework, pod: PodInfo) -> tuple[CycleState, FitError]:
    state = CycleState()
    with pytest.raises(FitError) as caught:
        schedule_pod(framework, state, pod, framework.handle.snapshot())
    return state, caught.value


def cache_fingerprint(cache: ClusterCache) -> Any:
    table = cache.table
    nodes = {name: (list(cache.node(name).pods), dict(cache.node(name).used_ports)) for name in cache.node_names()}
    return (
        nodes,
        table.pod_count.copy().tolist(),
        np.asarray(table.non_zero_requested).copy().tolist(),
        sorted(cache._assumed),
        sorted(p.uid for p in cache.pods()),
    )


# -- pure helpers ----------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("nodes", "percentage", "absolute", "expected"),
    [
        (50, 10, 100, 50),  # never more than there are
        (1000, 10, 100, 100),  # the absolute floor
        (5000, 10, 100, 500),  # the percentage
        (10, 0, 3, 3),
        (10, 100, 0, 10),
        (7, 50, 1, 3),  # floor of 3.5
        (1, 10, 100, 1),
    ],
)
def test_num_candidates_is_clamped(nodes: int, percentage: int, absolute: int, expected: int) -> None:
    assert calculate_num_candidates(nodes, percentage, absolute) == expected


def pdb(name: str, selector: dict | None, allowed: int, *, namespace: str = "default", disrupted: Iterable[str] = ()):
    spec = {} if selector is None else {"selector": selector}
    return {
        "metadata": {"name": name, "namespace": namespace},
        "spec": spec,
        "status": {"disruptionsAllowed": allowed, "disruptedPods": {p: "2026-01-01T00:00:00Z" for p in disrupted}},
    }


APP = {"matchLabels": {"app": "a"}}


@pytest.mark.parametrize(
    ("budgets", "violating"),
    [
        ([], []),
        ([pdb("p", APP, 1)], ["b", "c"]),  # the first match uses the one allowed disruption
        ([pdb("p", APP, 2)], ["c"]),
        ([pdb("p", APP, 0)], ["a", "b", "c"]),
        ([pdb("p", APP, 0, namespace="other")], []),  # another namespace
        ([pdb("p", APP, 0, disrupted=["a", "b"])], ["c"]),  # already counted by the API server
        ([pdb("p", {}, 0)], []),  # an empty selector matches nothing
        ([pdb("p", None, 0)], []),  # so does a nil one
        ([pdb("p", {"matchExpressions": [{"key": "app", "operator": "Bad"}]}, 0)], []),  # invalid: nothing
        ([pdb("p", {"matchExpressions": [{"key": "app", "operator": "Exists"}]}, 1)], ["b", "c"]),
        ([pdb("p", APP, 1), pdb("q", APP, 5)], ["b", "c"]),  # any budget below zero makes it violating
    ],
)
def test_pdb_split_counts_each_budget(budgets: list[dict], violating: list[str]) -> None:
    pods = [pod_info(running(n, "n1", labels={"app": "a"})) for n in "abc"]
    unlabelled = pod_info(running("d", "n1"))
    bad, good = split_by_pdb_violation([*pods, unlabelled], [Budget.from_obj(b) for b in budgets])
    assert [p.name for p in bad] == violating
    assert [p.name for p in good] == [p for p in "abcd" if p not in violating]  # stable


def test_importance_is_priority_then_earlier_start() -> None:
    pods = [
        pod_info(running("young", "n", priority=5, start="2026-01-02T00:00:00Z")),
        pod_info(running("old", "n", priority=5, start="2026-01-01T00:00:00Z")),
        pod_info(running("unstarted", "n", priority=5)),  # counts as starting now
        pod_info(running("top", "n", priority=9, start="2026-01-03T00:00:00Z")),
    ]
    assert [p.name for p in sort_by_importance(pods, NOW)] == ["top", "old", "young", "unstarted"]
    # Sorted again with another "now" (the start times are parsed once): an unstarted pod starts at that now.
    assert [p.name for p in sort_by_importance(pods, 0.0)] == ["top", "unstarted", "old", "young"]


def test_importance_reads_compact_pods_without_decoding_them() -> None:
    """Every dry run orders the node's victims: a kept (compact) pod's object stays compact, as decoding it
    would keep ≈ 6.6 KB of dicts per pod on every node a dry run ever visits."""
    pods = [
        pod_info(running("young", "n", priority=5, start="2026-01-02T00:00:00Z")),
        pod_info(running("old", "n", priority=5, start="2026-01-01T00:00:00Z")),
    ]
    for pod in pods:
        pod.compact()
    assert [p.name for p in sort_by_importance(pods, NOW)] == ["old", "young"]
    assert all(isinstance(p.raw, bytes) for p in pods)
    assert not any(pod_terminating_by_preemption(p) for p in pods)
    assert all(isinstance(p.raw, bytes) for p in pods)


def test_importance_follows_a_pod_that_started_since_it_was_parsed() -> None:
    unstarted = pod_info(running("p", "n", priority=5))
    started = running("p", "n", priority=5, start="2026-01-01T00:00:00Z")
    assert sort_by_importance([unstarted], NOW) == [unstarted]  # parsed (and memoised) as "now"
    newer = unstarted.with_obj(started)
    older = pod_info(running("q", "n", priority=5, start="2026-01-01T00:00:01Z"))
    assert [p.name for p in sort_by_importance([older, newer], NOW)] == ["p", "q"]


def terminating(condition: dict | None, *, deleting: bool = True) -> PodInfo:
    obj = running("t", "n1")
    if deleting:
        obj["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    if condition:
        obj["status"]["conditions"] = [condition]
    return pod_info(obj)


BY_SCHEDULER = {"type": "DisruptionTarget", "status": "True", "reason": "PreemptionByScheduler"}


@pytest.mark.parametrize(
    ("pod", "expected"),
    [
        (terminating(BY_SCHEDULER), True),
        (terminating(BY_SCHEDULER, deleting=False), False),
        (terminating(None), False),
        (terminating({**BY_SCHEDULER, "reason": "EvictionByEvictionAPI"}), False),
        (terminating({**BY_SCHEDULER, "status": "False"}), False),
    ],
)
def test_terminating_by_preemption(pod: PodInfo, expected: bool) -> None:
    assert pod_terminating_by_preemption(pod) is expected


def victims(*priorities: int, pdb: int = 0, starts: Iterable[str] | None = None) -> Victims:
    starts = list(starts or [])
    pods = []
    for i, priority in enumerate(priorities):
        obj = running(f"v{i}-{priority}", "n", priority=priority, start=starts[i] if i < len(starts) else None)
        pods.append(pod_info(obj))
    return Victims(tuple(pods), pdb)


MIN_INT32 = -(2**31)


@pytest.mark.parametrize(
    ("candidates", "expected"),
    [
        ({"a": victims(1, pdb=1), "b": victims(50)}, "b"),  # 1. fewest PDB violations
        ({"a": victims(10), "b": victims(5, 4, 3)}, "b"),  # 2. lowest highest priority
        ({"a": victims(5, 5), "b": victims(5, 1)}, "b"),  # 3. smallest sum
        ({"a": victims(-5, -5), "b": victims(-5)}, "b"),  # 3. the 2^31 offset: more negative pods cost more
        ({"b": victims(0, MIN_INT32), "a": victims(0)}, "a"),  # 4. equal sums: fewer victims
        (
            {
                "a": victims(5, 1, starts=["2026-01-01T00:00:00Z"]),
                "b": victims(5, 1, starts=["2026-01-05T00:00:00Z"]),
            },
            "b",  # 5. the latest start among the highest-priority victims
        ),
        ({"x": victims(5), "y": victims(5)}, "x"),  # 6. the first left
        ({"only": victims(7)}, "only"),
        ({}, ""),
    ],
)
def test_pick_one_node_tie_breaks_in_order(candidates: dict[str, Victims], expected: str) -> None:
    assert pick_one_node_for_preemption(candidates, NOW) == expected


def test_dry_run_removal_restores_the_cache_exactly_even_on_errors() -> None:
    pods = [running(n, "n1") for n in "abc"]
    cache = make_cache([make_node("n1")], pods)
    assumed = cache.assume(pod_info(make_pod("x", requests={"cpu": "1"}, uid="uid-x")), "n1")
    before = cache_fingerprint(cache)
    generation = cache.generation
    node = cache.node("n1")

    def dry_run_that_fails() -> None:
        with DryRunRemoval(cache, node) as dry_run:
            dry_run.remove(cache.pod("uid-a"))
            dry_run.remove(assumed)
            dry_run.remove(cache.pod("uid-c"))
            dry_run.restore("uid-c")
            assert cache.table.pod_count[node.slot] == 2
            raise RuntimeError("mid-dry-run")

    with pytest.raises(RuntimeError):
        dry_run_that_fails()
    assert cache_fingerprint(cache) == before
    assert cache.is_assumed("uid-x")
    assert cache.pod("uid-a") is not None
    assert cache.generation > generation


def test_a_nodes_dry_run_changes_the_nodes_accounting_alone_and_restores_it_exactly() -> None:
    """The batched dry run's victims leave their nodes' pods, ports and columns; the cluster-wide indexes
    (pods by uid and label, selector counts) are not touched, and everything is as before on exit."""
    pods = [running(n, "n1", labels={"app": "web"}) for n in "abc"] + [running("d", "n2", labels={"app": "web"})]
    pods[0]["spec"]["containers"][0]["ports"] = [{"containerPort": 80, "hostPort": 8080}]
    cache = make_cache([make_node("n1"), make_node("n2")], pods)
    web = LabelSelector.parse({"matchLabels": {"app": "web"}})
    counts_before = cache.matching_pod_counts("default", web).copy()
    before = cache_fingerprint(cache)
    n1, n2 = cache.node("n1"), cache.node("n2")
    with NodesDryRun(cache, [n1, n2]) as dry_run:
        dry_run.remove([cache.pod(uid) for uid in ("uid-a", "uid-d", "uid-b")])
        assert list(n1.pods) == ["uid-c"]
        assert not n2.pods
        assert cache.table.pod_count[[n1.slot, n2.slot]].tolist() == [1, 0]
        assert cache.table.requested[n2.slot].sum() == 0
        assert not n1.used_ports  # node-local: what Filter plugins read
        assert cache.pod("uid-a") is not None  # cluster-wide: left alone
        assert cache.matching_pod_counts("default", web).tolist() == counts_before.tolist()
        dry_run.restore([cache.pod("uid-a")])
        assert cache.table.pod_count[n1.slot] == 2
        assert n1.used_ports
    assert cache_fingerprint(cache) == before
    assert list(n1.pods) == ["uid-a", "uid-b", "uid-c"]  # the original order


def test_many_pods_taken_off_at_once_are_accounted_as_one_by_one() -> None:
    """take_off_nodes / put_on_nodes leave the node table exactly as take_off_node / put_on_node do, with pods
    of several shapes on one node (a repeated slot) and a resource the table has no column for yet."""

    def pod(name: str, node: str, requests: dict[str, str]) -> dict:
        return make_pod(name, node_name=node, requests=requests, uid=f"uid-{name}")

    pods = [
        pod("a", "n1", {"cpu": "300m"}),
        pod("b", "n1", {"memory": "1Gi"}),
        pod("g", "n1", {"cpu": "1", "example.com/gpu": "2"}),
        pod("c", "n2", {"cpu": "1"}),
    ]
    one_by_one, batched = (make_cache([make_node("n1"), make_node("n2")], []) for _ in range(2))
    for cache in (one_by_one, batched):
        for obj in pods:
            cache.add_or_update_pod(obj)

    def accounting(cache: ClusterCache) -> Any:
        return cache_fingerprint(cache), list(cache.table.resources), cache.table.requested.tolist()

    full = accounting(batched)
    off = ["uid-a", "uid-b", "uid-g", "uid-c"]
    for uid in off:
        one_by_one.take_off_node(one_by_one.pod(uid))
    batched.take_off_nodes([batched.pod(uid) for uid in off])
    assert accounting(batched) == accounting(one_by_one)
    assert batched.table.pod_count.sum() == 0
    assert not batched.table.requested.any()
    for uid in off:
        one_by_one.put_on_node(one_by_one.pod(uid))
    batched.put_on_nodes([batched.pod(uid) for uid in off])
    assert accounting(batched) == accounting(one_by_one) == full
    assert batched.table.requested[batched.node("n1").slot, batched.table.resource_index["example.com/gpu"]] == 2


def test_a_pod_not_on_its_node_cannot_be_taken_off_or_put_back_twice() -> None:
    cache = make_cache([make_node("n1")], [running("a", "n1"), running("b", "n1")])
    pod, other = cache.pod("uid-a"), cache.pod("uid-b")
    before = cache_fingerprint(cache)
    with pytest.raises(ValueError, match="cannot be taken off"):
        cache.take_off_nodes([other, pod, pod])
    assert cache_fingerprint(cache) == before  # checked before anything changed
    cache.take_off_node(pod)
    with pytest.raises(ValueError, match="not on a node"):
        cache.take_off_node(pod)
    with pytest.raises(ValueError, match="cannot be taken off"):
        cache.take_off_nodes([pod])
    cache.put_on_node(pod)
    with pytest.raises(ValueError, match="cannot be put back"):
        cache.put_on_node(pod)
    with pytest.raises(ValueError, match="cannot be put back"):
        cache.put_on_nodes([pod])


# -- eligibility and potential nodes -----------------------------------------------------------------
def test_preemption_policy_never_is_not_eligible() -> None:
    pod = preemptor(preemptionPolicy="Never")
    framework, _plugin, handle = setup([make_node("n1", cpu="2")], [running("low", "n1", cpu="2")], pod)
    state, error = fail(framework, pod)
    result = run_post_filter(framework, state, pod, error)
    assert result is not None
    assert result.nominated_node_name is None
    assert not result.clear_nomination  # upstream's nil result: the nomination stays as it is
    assert dict(result.node_messages or {}) == {"n1": "preemption not attempted: " + NOT_ELIGIBLE_NEVER}
    assert error.diagnosis.post_filter_msg == NO_CLAIMS + "preemption: " + NOT_ELIGIBLE_NEVER
    assert error.message == (
        "0/1 nodes are available: 1 Insufficient cpu. "
        "no new claims to deallocate, preemption: not eligible due to preemptionPolicy=Never."
    )
    assert handle.metrics.attempts == 1
    assert handle.jobs == []


def nominated(pod: PodInfo, node: str) -> PodInfo:
    obj = dict(pod.obj)
    obj["status"] = {**obj["status"], "nominatedNodeName": node}
    return pod_info(obj)


@pytest.mark.parametrize(
    ("victim_priority", "condition", "nominated_code", "eligible"),
    [
        (1, BY_SCHEDULER, Code.UNSCHEDULABLE, False),
        (1, None, Code.UNSCHEDULABLE, True),  # terminating for another reason
        (200, BY_SCHEDULER, Code.UNSCHEDULABLE, True),  # not a pod this preemptor could have preempted
        (1, BY_SCHEDULER, Code.UNSCHEDULABLE_AND_UNRESOLVABLE, True),  # the nominated node cannot work anyway
    ],
)
def test_a_terminating_victim_on_the_nominated_node(
    victim_priority: int, condition: dict | None, nominated_code: Code, eligible: bool
) -> None:
    obj = running("dying", "n1", priority=victim_priority)
    obj["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    if condition:
        obj["status"]["conditions"] = [condition]
    pod = nominated(preemptor(), "n1")
    _, plugin, _ = setup([make_node("n1")], [obj], pod)
    ok, message = plugin.eligible(pod, Status(nominated_code, ("x",)))
    assert (ok, message) == (eligible, "" if eligible else NOT_ELIGIBLE_TERMINATING)


def test_potential_nodes_are_the_unschedulable_ones_including_absent() -> None:
    from kopf_scheduler.framework.verdicts import FilterStatuses

    statuses = FilterStatuses()
    names = ["n0", "n1", "n2", "n3"]
    statuses.set(0, Status.unschedulable("x"))
    statuses.set(1, Status.unschedulable("y", unresolvable=True))
    absent_u = NodeToStatusMap(statuses, names, Status.unschedulable("from PreFilter"))
    absent_uur = NodeToStatusMap(statuses, names)
    assert potential_nodes(absent_u, names) == ["n0", "n2", "n3"]
    assert potential_nodes(absent_uur, names) == ["n0"]
    assert potential_nodes({"n1": Status.unschedulable("x")}, names) == ["n1"]  # a plain mapping: absent is UUR


# -- the whole PostFilter --------------------------------------------------------------------------------
def test_no_unschedulable_node_clears_the_nomination() -> None:
    pod = preemptor(cpu="8")  # more than any node has: NodeResourcesFit says UUR
    framework, _plugin, _handle = setup([make_node("n1", cpu="2"), make_node("n2", cpu="2")], [], pod)
    state, error = fail(framework, pod)
    result = run_post_filter(framework, state, pod, error)
    assert isinstance(result, PostFilterResult)
    assert result.clear_nomination
    assert result.nominated_node_name is None
    assert error.message == (
        f"0/2 nodes are available: 2 Insufficient cpu. {NO_CLAIMS}preemption: 0/2 nodes are available: 2 {NOT_HELPFUL}."
    )
    assert dict(result.node_messages or {}) == {
        "n1": "UnschedulableAndUnresolvable: preemption cannot help",
        "n2": "UnschedulableAndUnresolvable: preemption cannot help",
    }


def test_no_victims_anywhere_is_upstreams_histogram() -> None:
    pod = preemptor(priority=5)
    nodes = [make_node("n1", cpu="2"), make_node("n2", cpu="2"), make_node("n3", cpu="1")]
    pods = [running("peer1", "n1", priority=5, cpu="2"), running("peer2", "n2", priority=9, cpu="2")]
    framework, _plugin, handle = setup(nodes, pods, pod)
    state, error = fail(framework, pod)
    result = run_post_filter(framework, state, pod, error)
    assert result is not None
    assert result.clear_nomination
    assert error.diagnosis.post_filter_msg == (
        f"{NO_CLAIMS}preemption: 0/3 nodes are available: 1 {NOT_HELPFUL}, 2 {NO_VICTIMS}."
    )
    messages = result.node_messages or {}
    assert messages["n1"] == "not a candidate: no lower-priority pods"
    assert messages["n3"] == "UnschedulableAndUnresolvable: preemption cannot help"
    assert handle.jobs == []
    assert handle.metrics.victims == []


def test_nodes_without_lower_priority_pods_are_settled_without_a_dry_run(monkeypatch: pytest.MonkeyPatch) -> None:
    """The usual failing pod is of the lowest priority: no node gets a cloned state or a dry run for it."""
    pod = preemptor(priority=5)
    nodes = [make_node(f"n{i}", cpu="2") for i in range(4)]
    pods = [running(f"peer{i}", f"n{i}", priority=5 + i % 2, cpu="2") for i in range(4)]
    framework, plugin, _handle = setup(nodes, pods, pod)
    dry_runs: list[str] = []
    real = plugin.select_victims_on_node

    def counting(state: CycleState, pod: PodInfo, node: Any, *args: Any) -> Any:
        dry_runs.append(node.name)
        return real(state, pod, node, *args)

    monkeypatch.setattr(plugin, "select_victims_on_node", counting)
    state, error = fail(framework, pod)
    assert run_post_filter(framework, state, pod, error) is not None
    assert dry_runs == []
    assert error.diagnosis.post_filter_msg == f"{NO_CLAIMS}preemption: 0/4 nodes are available: 4 {NO_VICTIMS}."


def test_a_node_where_even_evicting_everything_does_not_help() -> None:
    pod = preemptor(cpu="2", nodeSelector={"disk": "ssd"})
    nodes = [make_node("n1", cpu="2"), make_node("n2", cpu="2", labels={"disk": "ssd"})]
    pods = [running("low", "n2"), running("hi", "n2", priority=500)]
    framework, _plugin, _handle = setup(nodes, pods, pod)
    state, error = fail(framework, pod)
    result = run_post_filter(framework, state, pod, error)
    assert result is not None
    assert result.clear_nomination
    assert error.diagnosis.post_filter_msg == (
        f"{NO_CLAIMS}preemption: 0/2 nodes are available: 1 Insufficient cpu, 1 {NOT_HELPFUL}."
    )
    assert (result.node_messages or {})["n2"] == "not a candidate: Unschedulable: Insufficient cpu"


def test_minimal_victims_on_the_best_node_and_the_cache_untouched() -> None:
    pod = preemptor(cpu="2")
    nodes = [make_node("n1", cpu="3"), make_node("n2", cpu="3")]
    pods = [
        running("a1", "n1", priority=1),
        running("a2", "n1", priority=2),
        running("a3", "n1", priority=3),
        running("b1", "n2", priority=1, cpu="2"),
        running("b2", "n2", priority=50),
    ]
    framework, _plugin, handle = setup(nodes, pods, pod)
    before = cache_fingerprint(handle.cache)
    state, error = fail(framework, pod)
    result = run_post_filter(framework, state, pod, error)
    assert cache_fingerprint(handle.cache) == before
    # n1 needs a2 and a1 gone (priority ≤ 2); n2 only b1 (priority 1): lower highest priority wins.
    assert result is not None
    assert result.nominated_node_name == "n2"
    assert error.diagnosis.post_filter_msg == ""
    messages = result.node_messages or {}
    assert messages["n2"] == "chosen: evicting 1 pod of priority ≤ 1 would fit the pod"
    assert messages["n1"] == "evicting 2 pods of priority ≤ 2 would fit the pod"
    assert handle.metrics.attempts == 1
    assert handle.metrics.victims == [1]
    assert len(handle.jobs) == 1


def select(plugin: DefaultPreemption, handle: PreemptionHandle, pod: PodInfo, node: str, budgets=()) -> Any:
    snapshot = handle.snapshot()
    state = CycleState()
    framework = handle.plugins_runner
    assert isinstance(framework, Framework)
    assert framework.run_pre_filter_plugins(state, pod, snapshot)[1].is_success
    victims, violations, status = plugin.select_victims_on_node(
        state, pod, handle.cache.node(node), snapshot, [Budget.from_obj(b) for b in budgets], NOW
    )
    return [v.name for v in victims], violations, status


THREE = [running("p1", "n1", priority=1), running("p2", "n1", priority=2), running("p3", "n1", priority=3)]


@pytest.mark.parametrize(
    ("cpu", "budgets", "expected"),
    [
        ("1", [], (["p1"], 0)),  # reprieve from the most important: only the least important goes
        ("2", [], (["p2", "p1"], 0)),
        ("3", [], (["p3", "p2", "p1"], 0)),
        # p1 is protected: violating pods are reprieved first, so p1 stays and p3, p2 go.
        ("2", [pdb("p", {"matchLabels": {"keep": "1"}}, 0)], (["p3", "p2"], 0)),
        # everything protected and everything must go: three violations
        ("3", [pdb("p", {"matchLabels": {"app": "x"}}, 0)], (["p3", "p2", "p1"], 3)),
        # one disruption allowed: the first (most important) uses it, the others violate
        ("3", [pdb("p", {"matchLabels": {"app": "x"}}, 1)], (["p3", "p2", "p1"], 2)),
    ],
)
def test_select_victims_reprieve_and_pdbs(cpu: str, budgets: list[dict], expected: tuple) -> None:
    pods = [dict(p, metadata={**p["metadata"], "labels": {"app": "x"}}) for p in THREE]
    pods[0]["metadata"]["labels"]["keep"] = "1"
    pod = preemptor(cpu=cpu)
    _, plugin, handle = setup([make_node("n1", cpu="3")], pods, pod)
    before = cache_fingerprint(handle.cache)
    names, violations, status = select(plugin, handle, pod, "n1", budgets)
    assert status.is_success
    assert (names, violations) == expected
    assert cache_fingerprint(handle.cache) == before


def test_select_victims_when_removing_all_is_not_enough() -> None:
    pod = preemptor(cpu="3")
    _, plugin, handle = setup([make_node("n1", cpu="3")], [*THREE[:2], running("hi", "n1", priority=500)], pod)
    names, _, status = select(plugin, handle, pod, "n1")
    assert names == []
    assert status.code is Code.UNSCHEDULABLE
    assert status.reasons == ("Insufficient cpu",)


def test_select_victims_with_no_lower_priority_pod() -> None:
    pod = preemptor(priority=3)
    _, plugin, handle = setup([make_node("n1", cpu="3")], [running("same", "n1", priority=3, cpu="3")], pod)
    assert select(plugin, handle, pod, "n1") == ([], 0, Status.unschedulable(NO_VICTIMS, unresolvable=True))


def test_nominated_higher_priority_pods_take_their_room_in_the_dry_run() -> None:
    pod = preemptor(cpu="2", priority=100)
    _, plugin, handle = setup([make_node("n1", cpu="3")], THREE, pod)
    handle.nominator.add_nominated_pod(preemptor("other", priority=200, cpu="1"), "n1")
    names, _, status = select(plugin, handle, pod, "n1")
    assert status.is_success
    assert names == ["p3", "p2", "p1"]


def test_pdb_violating_candidates_come_after_the_others() -> None:
    pod = preemptor(cpu="1")
    nodes = [make_node("n1", cpu="1"), make_node("n2", cpu="1")]
    pods = [running("guarded", "n1", labels={"app": "g"}), running("free", "n2", priority=7)]
    framework, plugin, handle = setup(nodes, pods, pod)
    handle.cache.objects.apply(POD_DISRUPTION_BUDGET, "ADDED", pdb("p", {"matchLabels": {"app": "g"}}, 0))
    state, error = fail(framework, pod)
    search = plugin.find_candidates(state, pod, error.diagnosis.node_to_status, handle.snapshot(), NOW)
    assert [(c.name, c.victims.num_pdb_violations) for c in search.candidates] == [("n2", 0), ("n1", 1)]
    # n1's victim has the lower priority, but its PDB comes first.
    assert plugin.select_candidate(search.candidates, NOW).name == "n2"


class FixedOffset:
    def __init__(self, offset: int) -> None:
        self.offset = offset
        self.asked: list[int] = []

    def randrange(self, n: int) -> int:
        self.asked.append(n)
        return self.offset


@pytest.mark.parametrize(("offset", "examined"), [(0, ["n0", "n1"]), (3, ["n3", "n4"]), (4, ["n4", "n0"])])
def test_sampling_stops_after_enough_candidates_from_the_offset(offset: int, examined: list[str]) -> None:
    pod = preemptor(cpu="1")
    nodes = [make_node(f"n{i}", cpu="1") for i in range(5)]
    pods = [running(f"low{i}", f"n{i}") for i in range(5)]
    framework, plugin, handle = setup(nodes, pods, pod, minCandidateNodesPercentage=0, minCandidateNodesAbsolute=2)
    plugin.rng = FixedOffset(offset)  # type: ignore[assignment]
    state, error = fail(framework, pod)
    search = plugin.find_candidates(state, pod, error.diagnosis.node_to_status, handle.snapshot(), NOW)
    assert plugin.rng.asked == [5]
    assert search.examined == examined
    assert [c.name for c in search.candidates] == examined


def test_sampling_goes_on_until_a_non_violating_candidate() -> None:
    pod = preemptor(cpu="1")
    nodes = [make_node(f"n{i}", cpu="1") for i in range(3)]
    pods = [running("g0", "n0", labels={"app": "g"}), running("g1", "n1", labels={"app": "g"}), running("f", "n2")]
    framework, plugin, handle = setup(nodes, pods, pod, minCandidateNodesPercentage=0, minCandidateNodesAbsolute=1)
    handle.cache.objects.apply(POD_DISRUPTION_BUDGET, "ADDED", pdb("p", {"matchLabels": {"app": "g"}}, 0))
    plugin.rng = FixedOffset(0)  # type: ignore[assignment]
    state, error = fail(framework, pod)
    search = plugin.find_candidates(state, pod, error.diagnosis.node_to_status, handle.snapshot(), NOW)
    assert search.examined == ["n0", "n1", "n2"]
    assert [c.name for c in search.candidates] == ["n2", "n0", "n1"]


def test_missing_preemptor_is_an_error() -> None:
    pod = preemptor()
    framework, plugin, handle = setup([make_node("n1", cpu="1")], [running("low", "n1")], pod)
    state, error = fail(framework, pod)
    handle.pending.clear()
    result, status = plugin.post_filter(state, pod, error.diagnosis.node_to_status)
    assert result is None
    assert status.code is Code.ERROR
    assert status.message == 'preemption: pod "high" not found'
    assert handle.metrics.attempts == 1


# -- execution -------------------------------------------------------------------------------------------
def candidate(handle: PreemptionHandle, node: str, *names: str) -> Candidate:
    return Candidate(node, Victims(tuple(handle.cache.pod(f"uid-{n}") for n in names)))


def executor_setup(*victim_objs: dict) -> tuple[DefaultPreemption, PreemptionHandle, PodInfo]:
    pod = preemptor()
    _, plugin, handle = setup([make_node("n1", cpu="4")], list(victim_objs), pod)
    return plugin, handle, pod


def test_execution_sequence() -> None:
    plugin, handle, pod = executor_setup(running("v1", "n1"), running("v2", "n1"), running("v3", "n1"))
    lower = nominated(preemptor("nominee", priority=5, cpu="1"), "n1")
    higher = nominated(preemptor("vip", priority=500, cpu="1"), "n1")
    handle.nominator.add_nominated_pod(lower, "n1")
    handle.nominator.add_nominated_pod(higher, "n1")
    plugin.executor.start(candidate(handle, "n1", "v1", "v2", "v3"), pod)
    assert plugin.pre_enqueue(pod) == Status.unschedulable(
        WAITING_FOR_PREEMPTION, plugin="DefaultPreemption", unresolvable=True
    )
    assert handle.metrics.victims == [3]
    handle.run_jobs()
    assert handle.settled == ["uid-high"]  # the preemptor's nomination is written first (test_preemption_order.py)
    calls = handle.client.calls
    assert calls[0] == ("patch", "nominee", {"status": {"nominatedNodeName": None}})
    assert handle.nominator.deleted == ["nominee"]
    # v1 and v2 concurrently (patch, patch, delete, delete), then v3.
    assert [(c[0], c[1]) for c in calls[1:]] == [
        ("patch", "v1"),
        ("patch", "v2"),
        ("delete", "v1"),
        ("delete", "v2"),
        ("patch", "v3"),
        ("delete", "v3"),
    ]
    condition = calls[1][2]["status"]["conditions"][0]
    assert {k: condition[k] for k in ("type", "status", "reason", "message")} == {
        "type": "DisruptionTarget",
        "status": "True",
        "reason": "PreemptionByScheduler",
        "message": "default-scheduler: preempting to accommodate a higher priority pod",
    }
    assert calls[3][2] == "uid-v1"
    assert handle.events == [
        (v, "Normal", "Preempted", "Preempting", "Preempted by pod uid-high on node n1") for v in ("v1", "v2", "v3")
    ]
    assert handle.related == ["high", "high", "high"]  # upstream's Eventf(victim, preemptor, ...)
    assert not plugin.pre_enqueue(pod).is_success  # the API work is done, the deletions not watched yet
    assert handle.activated == []  # success: the victims' deletions requeue it


def test_the_hold_lasts_until_every_victim_is_watched_gone_in_any_order() -> None:
    """kopf delivers each pod's events from its own worker: the last victim's deletion may be watched first."""
    plugin, handle, pod = executor_setup(running("v1", "n1"), running("v2", "n1"), running("v3", "n1"))
    plugin.executor.start(candidate(handle, "n1", "v1", "v2", "v3"), pod)
    handle.run_jobs()
    handle.cache.remove_pod("uid-v3")  # the last one deleted, watched first
    assert not plugin.pre_enqueue(pod).is_success
    dying = running("v1", "n1")
    dying["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    handle.cache.add_or_update_pod(dying)  # terminating counts as gone
    assert not plugin.pre_enqueue(pod).is_success
    handle.cache.remove_pod("uid-v2")
    assert plugin.pre_enqueue(pod).is_success
    assert not plugin.executor.is_pod_running_preemption(pod.uid)


def test_a_victim_waiting_at_permit_is_preempted_not_deleted() -> None:
    plugin, handle, pod = executor_setup(running("waiter", "n1"), running("v2", "n1"))
    handle.waiting.add("uid-waiter")
    plugin.executor.start(candidate(handle, "n1", "waiter", "v2"), pod)
    handle.run_jobs()
    assert handle.preempted_waiting == [("uid-waiter", "DefaultPreemption")]
    assert [(c[0], c[1]) for c in handle.client.calls] == [("patch", "v2"), ("delete", "v2")]
    assert handle.events[0][4] == "Preempted by pod uid-high on node n1 (in kube-scheduler memory)."


def test_an_api_error_skips_the_last_victim_and_reactivates_the_preemptor() -> None:
    plugin, handle, pod = executor_setup(running("v1", "n1"), running("bad", "n1"), running("last", "n1"))
    handle.client.fail = {"bad": 500}
    plugin.executor.start(candidate(handle, "n1", "v1", "bad", "last"), pod)
    handle.run_jobs()
    assert "last" not in {c[1] for c in handle.client.calls}
    assert [e[0] for e in handle.events] == ["v1"]
    assert handle.activated == ["high"]
    assert plugin.pre_enqueue(pod).is_success


def test_a_victim_already_gone_is_no_error() -> None:
    plugin, handle, pod = executor_setup(running("gone", "n1"))
    handle.client.fail = {"gone": 404}
    plugin.executor.start(candidate(handle, "n1", "gone"), pod)
    handle.run_jobs()
    assert handle.activated == []
    assert handle.events == []


def test_victims_already_terminating_need_no_api_call() -> None:
    obj = running("dying", "n1")
    obj["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    plugin, handle, pod = executor_setup(obj)
    plugin.executor.start(candidate(handle, "n1", "dying"), pod)
    assert handle.jobs == []
    assert handle.metrics.victims == []
    assert plugin.pre_enqueue(pod).is_success


def test_pre_enqueue_holds_while_the_api_work_has_not_reached_the_last_victim() -> None:
    plugin, handle, pod = executor_setup(running("v1", "n1"))
    plugin.executor.start(candidate(handle, "n1", "v1"), pod)  # the job is spawned, not run yet
    assert not plugin.pre_enqueue(pod).is_success
    handle.cache.remove_pod("uid-v1")  # deleted by someone else meanwhile: the job has still to run
    assert not plugin.pre_enqueue(pod).is_success
    handle.run_jobs()
    assert plugin.pre_enqueue(pod).is_success


def test_the_existing_disruption_condition_is_not_patched_again() -> None:
    obj = running("v1", "n1")
    obj["status"]["conditions"] = [
        {
            "type": "DisruptionTarget",
            "status": "True",
            "reason": "PreemptionByScheduler",
            "message": "default-scheduler: preempting to accommodate a higher priority pod",
        }
    ]
    plugin, handle, pod = executor_setup(obj)
    plugin.executor.start(candidate(handle, "n1", "v1"), pod)
    handle.run_jobs()
    assert [(c[0], c[1]) for c in handle.client.calls] == [("delete", "v1")]


def test_pod_delete_queues_the_preemptor_only_when_it_takes_its_last_victim_off_the_node() -> None:
    """Ours holds until every victim is watched gone, so the deletion that ends the hold must requeue the pod
    even when no rejecting plugin cares about that victim (upstream's hint always skips; conformance seed 81)."""
    pod = preemptor()
    v1, v2 = running("v1", "n1"), running("v2", "n1")
    _, plugin, handle = setup([make_node("n1", cpu="2")], [v1, v2], pod)
    [registration] = plugin.events_to_register()
    assert registration.event == ClusterEvent(EventResource.POD, ActionType.DELETE)
    hint = registration.hint
    assert hint is not None
    assert hint(pod, v1, None) is QUEUE_SKIP  # not preempting: other plugins decide
    plugin.executor.start(candidate(handle, "n1", "v1", "v2"), pod)
    handle.run_jobs()  # the API work is done; the watch has not delivered the deletions yet
    handle.cache.remove_pod("uid-v1")
    assert hint(pod, v1, None) is QUEUE_SKIP  # v2 is still on the node: the hold stays
    assert hint(pod, running("other", "n1"), None) is QUEUE_SKIP  # not a victim of this pod
    handle.cache.remove_pod("uid-v2")
    assert hint(pod, v2, None) is QUEUE


def test_the_default_profile_runs_it_after_dynamic_resources() -> None:
    profile = resolve_profile("default-scheduler", SchedulerProfileSpec(), default_registry())
    assert "DefaultPreemption" not in profile.omitted_defaults
    from kopf_scheduler.framework.extension_points import ExtensionPoint

    assert [r.name for r in profile.enabled(ExtensionPoint.POST_FILTER)][-1] == "DefaultPreemption"


def test_the_plugin_reaches_its_framework_through_the_handle_and_a_clearing_result_is_kept() -> None:
    pod = preemptor(cpu="8")
    framework, plugin, _ = setup([make_node("n1", cpu="2")], [], pod)
    assert plugin.handle.plugins_runner is framework  # set when the framework was built
    state, error = fail(framework, pod)
    result, status = framework.run_post_filter_plugins(state, pod, error.diagnosis.node_to_status)
    assert status.code is Code.UNSCHEDULABLE
    assert status.plugin == "DynamicResources"  # upstream's rejector: the first PostFilter plugin that said no
    assert status.reasons == ("no new claims to deallocate", f"preemption: 0/1 nodes are available: 1 {NOT_HELPFUL}.")
    assert result is not None
    assert result.clear_nomination


# -- HTTP extenders' preempt verb (upstream callExtenders) ---------------------------------------------------
EXT = "http://ext/scheduler"
REFUSED = f'preemption: Post "{EXT}/preempt": dial tcp: connect: connection refused'


def meta_answer(**nodes: tuple[list[str], int]) -> Any:
    """A preempt handler answering ``NodeNameToMetaVictims``: node → (victim names, PDB violations)."""
    victims = {
        node: {"Pods": [{"UID": f"uid-{name}"} for name in names], "NumPDBViolations": violations}
        for node, (names, violations) in nodes.items()
    }
    return lambda _verb, _body: {"NodeNameToMetaVictims": victims}


class Pipeline(NamedTuple):
    """A profile's framework and its HTTP extenders."""

    framework: Framework
    extenders: tuple[Extender, ...]


def preempt_setup(
    extenders: list[dict[str, Any]], handlers: dict[tuple[str, str], Any]
) -> tuple[Pipeline, DefaultPreemption, PreemptionHandle, PodInfo, FakeTransport]:
    """Two full nodes: n1 holds ``a`` (priority 1), n2 ``b1`` (1) and ``b2`` (2). Without extenders the dry run
    finds n1 (victim a) and n2 (victims b2, b1), and n1 wins (its highest victim priority is lower)."""
    pod = preemptor(cpu="2")
    nodes = [make_node("n1", cpu="2"), make_node("n2", cpu="2")]
    pods = [running("a", "n1", priority=1, cpu="2"), running("b1", "n2", priority=1), running("b2", "n2", priority=2)]
    transport = FakeTransport(handlers)
    specs = [ExtenderSpec.model_validate({"urlPrefix": EXT, **e}) for e in extenders]
    built = build_extenders(specs, transport)
    framework, plugin, handle = setup(nodes, pods, pod, extenders=built)
    return Pipeline(framework, built), plugin, handle, pod, transport


def post_filter_with_extenders(scheduler: Pipeline, pod: PodInfo) -> tuple[PostFilterResult | None, FitError]:
    state, error = fail(scheduler.framework, pod)
    return asyncio.run(run_post_filter_with_extenders(scheduler.framework, state, pod, error)), error


def deleted(handle: PreemptionHandle) -> set[str]:
    handle.run_jobs()
    return {name for call, name, _ in handle.client.calls if call == "delete"}


PREEMPT = {"preemptVerb": "preempt"}


@pytest.mark.parametrize(
    ("extenders", "handlers", "nominated", "evicted", "message", "calls"),
    [
        pytest.param([], {}, "n1", {"a"}, "", 0, id="no-extender"),
        pytest.param(
            [PREEMPT], {(EXT, "preempt"): meta_answer(n2=(["b1", "b2"], 0))}, "n2", {"b1", "b2"}, "", 1, id="drops-n1"
        ),
        pytest.param(
            [PREEMPT],
            # n1 now violates a PDB (pickOneNode prefers fewer violations) and n2 needs b1 only.
            {(EXT, "preempt"): meta_answer(n1=(["a"], 1), n2=(["b1"], 0))},
            "n2",
            {"b1"},
            "",
            1,
            id="changes-victims",
        ),
        pytest.param([PREEMPT], {}, None, set(), REFUSED, 1, id="error-not-ignorable"),
        pytest.param([{**PREEMPT, "ignorable": True}], {}, "n1", {"a"}, "", 1, id="ignorable-down-skipped"),
        pytest.param(
            [{**PREEMPT, "managedResources": [{"name": "example.com/gpu"}]}],
            {(EXT, "preempt"): meta_answer()},
            "n1",
            {"a"},
            "",
            0,
            id="not-interested-not-called",
        ),
        pytest.param([{"filterVerb": "filter"}], {}, "n1", {"a"}, "", 0, id="no-preempt-verb-not-called"),
        pytest.param(
            [PREEMPT],
            {(EXT, "preempt"): meta_answer()},
            None,
            set(),
            NO_CLAIMS + "preemption: no candidate node for preemption",  # U: joined with DynamicResources' part
            1,
            id="empty-answer-no-candidate",
        ),
        pytest.param(
            [PREEMPT],
            {(EXT, "preempt"): meta_answer(n2=([], 0))},
            None,
            set(),
            'preemption: expected at least one victim pod on node "n2"',
            1,
            id="node-without-victims-not-ignorable",
        ),
        pytest.param(
            [{**PREEMPT, "ignorable": True}],
            {(EXT, "preempt"): meta_answer(n1=([], 0), n2=(["b1", "b2"], 0))},
            "n2",
            {"b1", "b2"},
            "",
            1,
            id="node-without-victims-ignorable-dropped",
        ),
        pytest.param(
            [PREEMPT, {**PREEMPT, "urlPrefix": "http://down", "ignorable": True}],
            {(EXT, "preempt"): meta_answer(n2=(["b1", "b2"], 0))},
            "n2",
            {"b1", "b2"},
            "",
            2,
            id="second-ignorable-down-keeps-the-first-answer",
        ),
    ],
)
def test_preempt_extenders_decide_the_candidates(
    extenders: list[dict[str, Any]],
    handlers: dict[tuple[str, str], Any],
    nominated: str | None,
    evicted: set[str],
    message: str,
    calls: int,
) -> None:
    scheduler, _plugin, handle, pod, transport = preempt_setup(extenders, handlers)
    result, error = post_filter_with_extenders(scheduler, pod)
    assert len(transport.calls) == calls
    assert error.diagnosis.post_filter_msg == message
    assert (result.nominated_node_name if result is not None else None) == nominated
    assert deleted(handle) == evicted
    assert handle.metrics.attempts == 1


def test_the_candidates_are_sent_as_full_pods_or_uids_when_node_cache_capable() -> None:
    keep_all = meta_answer(n1=(["a"], 0), n2=(["b2", "b1"], 0))
    scheduler, _plugin, _handle, pod, transport = preempt_setup([PREEMPT], {(EXT, "preempt"): keep_all})
    post_filter_with_extenders(scheduler, pod)
    body = transport.calls[0][2]
    assert body["NodeNameToMetaVictims"] is None
    assert body["Pod"]["metadata"]["name"] == "high"
    full = body["NodeNameToVictims"]
    assert {n: [p["metadata"]["name"] for p in v["Pods"]] for n, v in full.items()} == {"n1": ["a"], "n2": ["b2", "b1"]}
    assert full["n1"]["NumPDBViolations"] == 0

    cache_capable = {**PREEMPT, "nodeCacheCapable": True}
    scheduler, _plugin, _handle, pod, transport = preempt_setup([cache_capable], {(EXT, "preempt"): keep_all})
    post_filter_with_extenders(scheduler, pod)
    body = transport.calls[0][2]
    assert body["NodeNameToVictims"] is None
    assert body["NodeNameToMetaVictims"] == {
        "n1": {"Pods": [{"UID": "uid-a"}], "NumPDBViolations": 0},
        "n2": {"Pods": [{"UID": "uid-b2"}, {"UID": "uid-b1"}], "NumPDBViolations": 0},
    }


def test_without_preempt_extenders_post_filter_stays_synchronous() -> None:
    scheduler, plugin, _handle, pod, _ = preempt_setup([{"filterVerb": "filter"}], {})
    assert (
        plugin.handle.extenders == scheduler.extenders
    )  # the framework's, on the handle (upstream Handle.Extenders())
    state, error = fail(scheduler.framework, pod)
    result = run_post_filter(scheduler.framework, state, pod, error)
    assert type(result) is PostFilterResult
    assert result.nominated_node_name == "n1"


def test_with_a_preempt_extender_post_filter_is_pending_until_awaited() -> None:
    scheduler, _plugin, handle, pod, transport = preempt_setup(
        [PREEMPT], {(EXT, "preempt"): meta_answer(n2=(["b1", "b2"], 0))}
    )
    state, error = fail(scheduler.framework, pod)
    result = run_post_filter(scheduler.framework, state, pod, error)
    assert isinstance(result, PendingPostFilterResult)
    assert result.nominated_node_name is None  # nothing decided, nothing evicted, nothing called yet
    assert (handle.jobs, transport.calls) == ([], [])
    assert result.finish is not None
    final, status = asyncio.run(result.finish())
    assert status.is_success
    assert final is not None
    assert final.nominated_node_name == "n2"
    messages = final.node_messages or {}
    assert messages["n1"] == EXPLAIN_DROPPED_BY_EXTENDER
    assert messages["n2"] == "chosen: evicting 2 pods of priority ≤ 2 would fit the pod"


def test_a_preemptor_deleted_during_the_call_evicts_nobody() -> None:
    def answer_and_delete(verb: str, body: Any) -> Any:
        handle.pending.clear()
        return meta_answer(n1=(["a"], 0))(verb, body)

    scheduler, _plugin, handle, pod, _ = preempt_setup([PREEMPT], {(EXT, "preempt"): answer_and_delete})
    result, error = post_filter_with_extenders(scheduler, pod)
    assert result is None
    assert error.diagnosis.post_filter_msg == 'preemption: pod "high" not found'
    assert handle.jobs == []


def test_a_victim_deleted_during_the_call_is_still_found_by_its_uid() -> None:
    def answer_after_deletion(verb: str, body: Any) -> Any:
        handle.cache.remove_pod("uid-a")
        return meta_answer(n1=(["a"], 0))(verb, body)

    scheduler, _plugin, handle, pod, _ = preempt_setup([PREEMPT], {(EXT, "preempt"): answer_after_deletion})
    result, error = post_filter_with_extenders(scheduler, pod)
    assert error.diagnosis.post_filter_msg == ""
    assert result is not None
    assert result.nominated_node_name == "n1"


def random_cluster(seed: int) -> tuple[list[dict], list[dict], list[dict], list[tuple[str, PodInfo]]]:
    """Nodes of 2–4 CPUs full of pods of mixed priorities, some guarded by PDBs, some nodes with nominated pods
    (above and below the preemptor's priority 100), some with room for too few pods."""
    rng = np.random.default_rng(seed)
    nodes, pods, nominated = [], [], []
    for i in range(12):
        cpu = int(rng.integers(2, 5))
        nodes.append(make_node(f"n{i}", cpu=str(cpu), pods=int(rng.choice([3, 8]))))
        used, j = 0, 0
        while cpu * 1000 - used >= 250:
            request = min(int(rng.choice([250, 500, 1000])), cpu * 1000 - used)
            used += request
            priority = int(rng.choice([1, 5, 50, 100, 500]))
            start = f"2026-01-01T00:0{int(rng.integers(0, 10))}:00Z"
            labels = {"app": str(rng.choice(["a", "b", "c"]))}
            pods.append(running(f"p{i}-{j}", f"n{i}", priority=priority, cpu=f"{request}m", start=start, labels=labels))
            j += 1
        if rng.random() < 0.3:
            priority = int(rng.choice([50, 200]))
            nominated.append((f"n{i}", preemptor(f"nom{i}", priority=priority, cpu=f"{int(rng.choice([500, 1000]))}m")))
    budgets = [
        pdb("pa", {"matchLabels": {"app": "a"}}, int(rng.integers(0, 3))),
        pdb("pb", {"matchLabels": {"app": "b"}}, 0),
    ]
    return nodes, pods, budgets, nominated


def candidate_search(seed: int, *, together: bool) -> tuple[Any, list[int]]:
    nodes, pods, budgets, nominated = random_cluster(seed)
    pod = preemptor(cpu=str(1 + seed % 3))
    framework, plugin, handle = setup(nodes, pods, pod, minCandidateNodesPercentage=0, minCandidateNodesAbsolute=5)
    for budget in budgets:
        handle.cache.objects.apply(POD_DISRUPTION_BUDGET, "ADDED", budget)
    for node, nominee in nominated:
        handle.nominator.add_nominated_pod(nominee, node)
    batches: list[int] = []
    real = plugin.select_victims_on_nodes

    def recording(state: CycleState, pod: PodInfo, nodes: Any, *args: Any) -> Any:
        batches.append(len(nodes))
        return real(state, pod, nodes, *args) if together else None  # None: redone one by one

    plugin.select_victims_on_nodes = recording  # type: ignore[method-assign]
    plugin.rng = FixedOffset(seed % 12)  # type: ignore[assignment]
    before = cache_fingerprint(handle.cache)
    state, error = fail(framework, pod)
    search = plugin.find_candidates(state, pod, error.diagnosis.node_to_status, handle.snapshot(), NOW)
    assert cache_fingerprint(handle.cache) == before
    assert batches  # the batched dry run was reached
    found = (
        search.examined,
        [(c.name, [p.name for p in c.victims.pods], c.victims.num_pdb_violations) for c in search.candidates],
        {name: (status.code, status.reasons) for name, status in search.statuses.items()},
    )
    return found, batches


@pytest.mark.parametrize("seed", range(40))
def test_dry_runs_of_many_nodes_together_find_what_one_by_one_finds(seed: int) -> None:
    together, _ = candidate_search(seed, together=True)
    one_by_one, _ = candidate_search(seed, together=False)
    assert together == one_by_one
