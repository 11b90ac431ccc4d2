"""Workload-aware preemption (plugins/default_preemption/pod_group.py), restating upstream v1.36.3's
``framework/preemption/podgrouppreemption_test.go`` (TestPodGroupEvaluator_SelectVictimsOnDomain,
TestMoreImportantVictim) and the WorkloadAwarePreemption cases of ``defaultpreemption/default_preemption_test.go``
(PostFilter, PreEnqueue), with the executor's API calls for a podgroup preemptor.

As upstream's test, the group's scheduling function is a fake: each blocking rule says that a node gives
``capacity`` slots once none of its blocking victims runs there; the group fits when the slots cover its members.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import pytest

from kopf_scheduler.api.profile import SchedulerProfileSpec
from kopf_scheduler.framework import Code, Status
from kopf_scheduler.framework.builder import resolve_profile
from kopf_scheduler.framework.events import QUEUE, QUEUE_SKIP
from kopf_scheduler.framework.runtime import Framework
from kopf_scheduler.plugins.default_preemption import DefaultPreemption
from kopf_scheduler.plugins.default_preemption.dry_run import ClusterDryRun
from kopf_scheduler.plugins.default_preemption.evaluator import Budget
from kopf_scheduler.plugins.default_preemption.executor import PreemptionExecutor
from kopf_scheduler.plugins.default_preemption.plugin import (
    NOT_ELIGIBLE_PLACEMENT,
    NOT_ELIGIBLE_WORKLOAD_AWARE,
    POD_GROUP_NOT_FOUND,
    WAITING_FOR_POD_GROUP_PREEMPTION,
)
from kopf_scheduler.plugins.default_preemption.pod_group import (
    PodGroupEvaluator,
    PodGroupPreemptor,
    Victim,
    disrupted_as_group,
    domain_victims,
    more_important_victim,
)
from kopf_scheduler.plugins.registry import default_registry
from kopf_scheduler.state.cache import ClusterCache
from kopf_scheduler.state.objects import POD_DISRUPTION_BUDGET
from kopf_scheduler.state.pod_info import PodInfo
from tests.unit.factories import make_cache, make_node, make_pod, pod_info
from tests.unit.plugins.test_default_preemption import NOW, PreemptionHandle, cache_fingerprint, fail

LOW, MID, HIGH = 0, 100, 1000
POD_GROUP = "PodGroup"
WORKLOAD_AWARE = {"plugins": {"multiPoint": {"enabled": [{"name": "GangScheduling"}]}}}


# -- builders --------------------------------------------------------------------------------------------
def bound(
    name: str,
    node: str,
    priority: int,
    *,
    group: str | None = None,
    start: int | None = None,
    labels: dict[str, str] | None = None,
    cpu: str = "1",
) -> dict[str, Any]:
    spec: dict[str, Any] = {"priority": priority}
    if group is not None:
        spec["schedulingGroup"] = {"podGroupName": group}
    obj = make_pod(name, node_name=node, requests={"cpu": cpu}, spec=spec, uid=f"uid-{name}", labels=labels)
    if start is not None:
        obj["status"]["startTime"] = f"1970-01-01T00:00:{start:02d}Z"
    return obj


def pod_group(name: str, *, mode: str | None = None, priority: int | None = None, **spec: Any) -> dict[str, Any]:
    body: dict[str, Any] = {"schedulingPolicy": {"basic": {}}, **spec}
    if mode is not None:
        body["disruptionMode"] = mode
    if priority is not None:
        body["priority"] = priority
    return {
        "apiVersion": "scheduling.k8s.io/v1alpha2",
        "kind": "PodGroup",
        "metadata": {"name": name, "namespace": "default", "uid": f"pg-uid-{name}"},
        "spec": body,
    }


def member(name: str, priority: int, *, group: str = "preemptor-pg", never: bool = False, cpu: str = "1") -> PodInfo:
    spec: dict[str, Any] = {"priority": priority, "schedulingGroup": {"podGroupName": group}}
    if never:
        spec["preemptionPolicy"] = "Never"
    return pod_info(make_pod(name, requests={"cpu": cpu}, spec=spec, uid=f"uid-{name}"))


def budget_blocking(app: str) -> Budget:
    """A PDB selecting ``app=<app>`` that allows no disruption."""
    return Budget.from_obj(
        {
            "metadata": {"namespace": "default"},
            "spec": {"selector": {"matchLabels": {"app": app}}},
            "status": {"disruptionsAllowed": 0},
        }
    )


@dataclass(frozen=True)
class Rule:
    """Upstream's ``blockingRule``: ``node`` gives ``capacity`` slots once none of ``blocking`` runs on it."""

    node: str
    capacity: int
    blocking: frozenset[str]


@dataclass
class Case:
    nodes: list[str]
    pods: list[dict[str, Any]]
    preemptor: tuple[int, list[PodInfo]]
    rules: list[Rule]
    expected: set[str]
    code: Code = Code.SUCCESS
    groups: list[dict[str, Any]] = field(default_factory=list)
    budgets: list[Budget] = field(default_factory=list)


def rule(node: str, *blocking: str, capacity: int = 1) -> Rule:
    return Rule(node, capacity, frozenset(blocking))


def one(priority: int = HIGH) -> list[PodInfo]:
    return [member("p", priority)]


CASES: dict[str, Case] = {
    "Mix of no-group and single-pod-groups": Case(
        ["node1", "node2", "node3"],
        [bound("p1", "node1", LOW), bound("p2", "node2", LOW, group="pg1"), bound("p3", "node3", LOW, group="pg2")],
        (HIGH, one()),
        [rule("node1", "p1"), rule("node2", "p2"), rule("node3", "p3")],
        {"p1"},  # p1 is less important than p2 because it is not part of a pod group
        groups=[pod_group("pg1", mode="Pod"), pod_group("pg2", mode="Pod")],
    ),
    "Priority: Shared group vs no group": Case(
        ["node1", "node2", "node3"],
        [
            bound("p1", "node1", LOW, group="pg1", start=1),
            bound("p2", "node2", LOW, group="pg1", start=0),
            bound("p3", "node3", MID),
        ],
        (HIGH, one()),
        [rule("node1", "p1"), rule("node2", "p2"), rule("node3", "p3")],
        {"p1"},  # p1 is less important than p2 because of its later start time
        groups=[pod_group("pg1", mode="Pod")],
    ),
    "Shared Group: Preempt separately": Case(
        ["node1", "node2"],
        [bound("p1", "node1", LOW, group="pg1", start=1), bound("p2", "node2", LOW, group="pg1", start=0)],
        (HIGH, one()),
        [rule("node1", "p1"), rule("node2", "p2")],
        {"p1"},
        groups=[pod_group("pg1", mode="Pod")],
    ),
    "Complex Mixed: Shared, different, and no groups": Case(
        ["node1", "node2", "node3", "node4", "node5"],
        [
            bound("p1", "node1", LOW, group="pg1", start=2),
            bound("p2", "node2", LOW, group="pg1", start=1),
            bound("p3", "node3", LOW, group="pg2", start=0),
            bound("p4", "node4", MID),
            bound("p5", "node5", HIGH, group="pg3", start=0),
        ],
        (HIGH, [member("p-1", HIGH), member("p-2", HIGH), member("p-3", HIGH)]),
        [rule(f"node{i}", f"p{i}") for i in range(1, 6)],
        {"p1", "p2", "p3"},
        groups=[pod_group("pg1", mode="Pod"), pod_group("pg2", mode="Pod"), pod_group("pg3", mode="Pod")],
    ),
    "PDB: Mixed groups": Case(
        ["node1", "node2"],
        [
            bound("victim-pdb", "node1", LOW, group="pg1", labels={"app": "foo"}),
            bound("victim-no-pdb", "node2", LOW, group="pg1"),
        ],
        (HIGH, one()),
        [rule("node1", "victim-pdb"), rule("node2", "victim-no-pdb")],
        {"victim-no-pdb"},
        budgets=[budget_blocking("foo")],
    ),
    "PodGroup with PreemptNever does not perform preemption": Case(
        ["node1", "node2", "node3"],
        [bound("p1", "node1", LOW), bound("p2", "node2", LOW, group="pg1"), bound("p3", "node3", LOW, group="pg2")],
        (HIGH, [member("p-1", HIGH, never=True), member("p-2", HIGH)]),
        [rule("node1", "p1"), rule("node2", "p2"), rule("node3", "p3")],
        set(),
        Code.UNSCHEDULABLE,
    ),
    "PodGroup with PreemptNever does not perform preemption (groups with priorities)": Case(
        ["node1", "node2", "node3"],
        [bound("p1", "node1", LOW), bound("p2", "node2", LOW, group="pg1"), bound("p3", "node3", LOW, group="pg2")],
        (HIGH, [member("p-1", HIGH, never=True), member("p-2", HIGH)]),
        [rule("node1", "p1"), rule("node2", "p2"), rule("node3", "p3")],
        set(),
        Code.UNSCHEDULABLE,
        groups=[pod_group("pg1", mode="Pod", priority=LOW), pod_group("pg2", mode="Pod", priority=LOW)],
    ),
    "Preempt single lower priority pod": Case(
        ["node1"], [bound("p1", "node1", LOW)], (HIGH, one()), [rule("node1", "p1")], {"p1"}
    ),
    "Priority: Prefer lower priority victim": Case(
        ["node1"],
        [bound("p1", "node1", LOW), bound("p2", "node1", MID), bound("p3", "node1", HIGH)],
        (HIGH, one()),
        [rule("node1", "p1"), rule("node1", "p2"), rule("node1", "p3")],
        {"p1"},
    ),
    "Efficiency: Preempt minimum number of victims": Case(
        ["node1"],
        [bound(f"p{i}", "node1", LOW) for i in range(1, 5)],
        (HIGH, one()),
        [rule("node1", "p1", "p2"), rule("node1", "p1")],
        {"p1"},
    ),
    "PDB: Prefer non-violating victim": Case(
        ["node1"],
        [bound("victim-pdb", "node1", LOW, labels={"app": "foo"}), bound("victim-no-pdb", "node1", LOW)],
        (HIGH, one()),
        [rule("node1", "victim-pdb"), rule("node1", "victim-no-pdb")],
        {"victim-no-pdb"},
        budgets=[budget_blocking("foo")],
    ),
    "PDB: Prefer lower priority pod, when preemption without pdb violation is not possible": Case(
        ["node1"],
        [bound("p1", "node1", LOW, labels={"app": "foo"}), bound("p2", "node1", MID, labels={"app": "foo"})],
        (HIGH, one()),
        [rule("node1", "p1"), rule("node1", "p2")],
        {"p1"},
        budgets=[budget_blocking("foo")],
    ),
    "PodGroup: Preempt group as a whole": Case(
        ["node1", "node2"],
        [bound("p1", "node1", LOW, group="pg1"), bound("p2", "node2", LOW, group="pg1")],
        (HIGH, one()),
        [rule("node1", "p1")],
        {"p1", "p2"},
        groups=[pod_group("pg1", mode="PodGroup", priority=LOW)],
    ),
    "PodGroup: Prefer single pod over podGroup for preemption candidate": Case(
        ["node1"],
        [bound("p1", "node1", LOW), bound("g1-1", "node1", LOW, group="pg1"), bound("g1-2", "node1", LOW, group="pg1")],
        (HIGH, one()),
        [rule("node1", "g1-1", "g1-2"), rule("node1", "p1")],
        {"p1"},
        groups=[pod_group("pg1", mode="PodGroup", priority=LOW)],
    ),
    "PodGroup: Preempt group as a whole on single node": Case(
        ["node1"],
        [bound("g1-1", "node1", LOW, group="pg1"), bound("g1-2", "node1", LOW, group="pg1"), bound("p1", "node1", MID)],
        (HIGH, one()),
        [rule("node1", "g1-1")],  # only g1-1 blocks, but both must go
        {"g1-1", "g1-2"},
        groups=[pod_group("pg1", mode="PodGroup", priority=LOW)],
    ),
    "PDB: Unit violation if any member violates": Case(
        ["node1"],
        [
            bound("g1-1", "node1", LOW, group="pg1", labels={"app": "foo"}),
            bound("g1-2", "node1", LOW, group="pg1"),
            bound("p1", "node1", LOW),
        ],
        (HIGH, one()),
        [rule("node1", "g1-1"), rule("node1", "p1")],
        {"p1"},  # pg1 violates the PDB as a unit (through g1-1)
        groups=[pod_group("pg1", mode="PodGroup", priority=LOW)],
        budgets=[budget_blocking("foo")],
    ),
    "PodGroup: Prefer preempting single pod over group of same priority": Case(
        ["node1"],
        [bound("p1", "node1", LOW), bound("g1-1", "node1", LOW, group="pg1"), bound("g1-2", "node1", LOW, group="pg1")],
        (HIGH, one()),
        [rule("node1", "g1-1", "g1-2"), rule("node1", "p1")],
        {"p1"},
        groups=[pod_group("pg1", mode="PodGroup", priority=LOW)],
    ),
    "Failure: Cannot preempt the victim with higher priority": Case(
        ["node1"],
        [bound("p1", "node1", HIGH)],
        (MID, one(MID)),
        [rule("node1", "p1", capacity=0)],
        set(),
        Code.UNSCHEDULABLE_AND_UNRESOLVABLE,
    ),
    "Failure: Cannot preempt if node is empty": Case(
        ["node1"], [], (MID, one(MID)), [], set(), Code.UNSCHEDULABLE_AND_UNRESOLVABLE
    ),
    "Priority divergence: victim PodGroup has lower priority than its pods": Case(
        ["node1", "node2"],
        [bound("p1", "node1", HIGH, group="pg1"), bound("p2", "node2", HIGH, group="pg1")],
        (HIGH, one()),
        [rule("node1", "p1")],
        {"p1", "p2"},
        groups=[pod_group("pg1", mode="PodGroup", priority=MID)],
    ),
    "Priority divergence: victim PodGroup has higher priority than its pods": Case(
        ["node1", "node2"],
        [bound("p1", "node1", LOW, group="pg1"), bound("p2", "node2", LOW, group="pg1")],
        (MID, one(MID)),
        [rule("node1", "p1")],
        set(),
        Code.UNSCHEDULABLE_AND_UNRESOLVABLE,
        groups=[pod_group("pg1", mode="PodGroup", priority=MID)],
    ),
    "Priority divergence: preemptor PodGroup has higher priority than its pod": Case(
        ["node1", "node2"],
        [bound("p1", "node1", MID, group="pg1"), bound("p2", "node2", MID, group="pg1")],
        (HIGH, one(LOW)),
        [rule("node1", "p1")],
        {"p1", "p2"},
        groups=[pod_group("pg1", mode="PodGroup", priority=MID)],
    ),
    "Priority divergence: preemptor PodGroup has lower priority than its pod": Case(
        ["node1", "node2"],
        [bound("p1", "node1", MID, group="pg1"), bound("p2", "node2", MID, group="pg1")],
        (LOW, one(HIGH)),
        [rule("node1", "p1")],
        set(),
        Code.UNSCHEDULABLE_AND_UNRESOLVABLE,
        groups=[pod_group("pg1", mode="PodGroup", priority=MID)],
    ),
}


def fake_schedule(cache: ClusterCache, rules: list[Rule], needed: int) -> Any:
    """Upstream's ``mockSchedulingFunc``: the group fits when the unblocked rules give enough slots."""

    def schedule() -> Status:
        slots = 0
        for r in rules:
            node = cache.node(r.node)
            if node is None:
                continue
            if not any(pod.name in r.blocking for pod in node.pods.values()):
                slots += r.capacity
        return Status() if slots >= needed else Status.unschedulable()

    return schedule


@pytest.mark.parametrize("name", list(CASES))
def test_select_victims_on_domain(name: str) -> None:
    case = CASES[name]
    cache = make_cache([make_node(n, cpu="8") for n in case.nodes], case.pods)
    for group in case.groups:
        cache.objects.apply(POD_GROUP, "ADDED", group)
    before = cache_fingerprint(cache)
    victims = domain_victims(cache.snapshot().node_infos(), lambda pod: disrupted_as_group(pod, cache.objects), NOW)
    priority, pods = case.preemptor
    preemptor = PodGroupPreemptor.of(pod_group("preemptor-pg", priority=priority), pods)
    handle = PreemptionHandle(cache)
    evaluator = PodGroupEvaluator(handle, PreemptionExecutor(handle, "DefaultPreemption"), lambda: NOW)  # type: ignore[arg-type]
    with ClusterDryRun(cache) as dry_run:
        chosen, status = evaluator.select_victims_on_domain(
            preemptor, victims, case.budgets, fake_schedule(cache, case.rules, len(pods)), dry_run
        )
    assert status.code is case.code
    if case.code is Code.SUCCESS:
        assert {pod.name for pod in chosen} == case.expected
    assert cache_fingerprint(cache) == before  # every dry-run removal undone


def test_a_group_victim_keeps_its_members_together_most_important_first() -> None:
    """The chosen victims come most important first (upstream sorts ``victimsToPreempt``), a group's pods
    together: a PodGroup-mode group (priority LOW, two pods) before a single pod of the same priority."""
    cache = make_cache(
        [make_node("node1", cpu="8"), make_node("node2", cpu="8")],
        [bound("g-1", "node1", LOW, group="pg1"), bound("solo", "node1", LOW), bound("g-2", "node2", LOW, group="pg1")],
    )
    cache.objects.apply(POD_GROUP, "ADDED", pod_group("pg1", mode="PodGroup", priority=LOW))
    victims = domain_victims(cache.snapshot().node_infos(), lambda pod: disrupted_as_group(pod, cache.objects), NOW)
    assert [[p.name for p in v.pods] for v in victims] == [["g-1", "g-2"], ["solo"]]
    assert [v.priority for v in victims] == [LOW, LOW]
    assert set(victims[0].affected_nodes) == {"node1", "node2"}
    handle = PreemptionHandle(cache)
    evaluator = PodGroupEvaluator(handle, PreemptionExecutor(handle, "DefaultPreemption"), lambda: NOW)  # type: ignore[arg-type]
    preemptor = PodGroupPreemptor.of(pod_group("preemptor-pg", priority=HIGH), one())
    rules = [rule("node1", "g-1", "solo")]  # the group fits only once both go
    with ClusterDryRun(cache) as dry_run:
        chosen, status = evaluator.select_victims_on_domain(
            preemptor, victims, [], fake_schedule(cache, rules, 1), dry_run
        )
    assert status.is_success
    assert [p.name for p in chosen] == ["g-1", "g-2", "solo"]


def test_a_group_that_does_not_fit_without_every_victim_gets_that_status() -> None:
    """Upstream: the scheduling function's status after removing every potential victim is the answer."""
    cache = make_cache([make_node("node1", cpu="8")], [bound("p1", "node1", LOW)])
    handle = PreemptionHandle(cache)
    evaluator = PodGroupEvaluator(handle, PreemptionExecutor(handle, "DefaultPreemption"), lambda: NOW)  # type: ignore[arg-type]
    victims = domain_victims(cache.snapshot().node_infos(), lambda pod: None, NOW)
    preemptor = PodGroupPreemptor.of(pod_group("preemptor-pg", priority=HIGH), one())
    with ClusterDryRun(cache) as dry_run:
        chosen, status = evaluator.select_victims_on_domain(
            preemptor, victims, [], lambda: Status.unschedulable("still no room"), dry_run
        )
    assert (chosen, status) == ([], Status.unschedulable("still no room"))


# -- moreImportantVictim ---------------------------------------------------------------------------------
def victim(priority: int, *, groups: int = 0, singles: int = 0, start: float = 0.0) -> Victim:
    pods = [pod_info(make_pod("g", spec={"schedulingGroup": {"podGroupName": "pg"}})) for _ in range(groups)]
    pods += [pod_info(make_pod("s")) for _ in range(singles)]
    return Victim(pods or [pod_info(make_pod("s"))], priority, start)


@pytest.mark.parametrize(
    ("first", "second", "expected"),
    [
        pytest.param(victim(20), victim(10), True, id="vi1 has higher priority"),
        pytest.param(victim(10), victim(20), False, id="vi2 has higher priority"),
        pytest.param(victim(10, groups=1), victim(10, singles=1), True, id="vi1 is PG, vi2 is Pod, same priority"),
        pytest.param(victim(10, singles=1), victim(10, groups=1), False, id="vi1 is Pod, vi2 is PG, same priority"),
        pytest.param(
            victim(10, singles=1, start=500), victim(10, singles=1, start=1000), True, id="both Pods, vi1 older"
        ),
        pytest.param(
            victim(10, singles=1, start=1000), victim(10, singles=1, start=500), False, id="both Pods, vi2 older"
        ),
        pytest.param(victim(10, groups=2), victim(10, groups=1), True, id="both PGs, vi1 larger"),
        pytest.param(victim(10, groups=1), victim(10, groups=2), False, id="both PGs, vi2 larger"),
        pytest.param(victim(10, groups=2, start=500), victim(10, groups=2, start=1000), True, id="both PGs, vi1 older"),
        pytest.param(
            victim(10, groups=2, start=1000), victim(10, groups=2, start=500), False, id="both PGs, vi2 older"
        ),
    ],
)
def test_more_important_victim(first: Victim, second: Victim, expected: bool) -> None:
    assert more_important_victim(first, second) is expected


# -- DefaultPreemption's PostFilter, PreEnqueue and PodGroupPostFilter -----------------------------------
class Handle(PreemptionHandle):
    """The preemption handle, recording an event's ``related`` object whatever its kind."""

    def record_event(
        self,
        regarding: PodInfo,
        *,
        event_type: str,
        reason: str,
        action: str,
        note: str,
        related: PodInfo | Mapping[str, Any] | None = None,
    ) -> None:
        self.events.append((regarding.name, event_type, reason, action, note))
        if isinstance(related, PodInfo):
            self.related.append(f"Pod/{related.name}")
        else:
            meta = (related or {}).get("metadata") or {}
            self.related.append(None if related is None else f"{related.get('kind')}/{meta.get('name')}")


def setup(
    pods: list[dict[str, Any]], groups: list[dict[str, Any]], pending: list[PodInfo], *, workload_aware: bool = True
) -> tuple[Framework, DefaultPreemption, Handle]:
    cache = make_cache([make_node("node1", cpu="1")], pods)
    for group in groups:
        cache.objects.apply(POD_GROUP, "ADDED", group)
    handle = Handle(cache, pending)
    registry = default_registry()
    spec = SchedulerProfileSpec.model_validate(WORKLOAD_AWARE if workload_aware else {})
    framework = Framework(
        resolve_profile("default-scheduler", spec, registry),
        registry,
        handle,  # type: ignore[arg-type]  # the recorded seams preemption uses
        nominator=handle.nominator,
    )
    plugin = framework.plugins["DefaultPreemption"]
    assert isinstance(plugin, DefaultPreemption)
    plugin.clock = lambda: NOW
    return framework, plugin, handle


@pytest.mark.parametrize(
    ("groups", "workload_aware", "expected"),
    [
        pytest.param(
            [pod_group("foo", schedulingConstraints={"topology": [{"key": "rack"}]})],
            True,
            Status.unschedulable(NOT_ELIGIBLE_PLACEMENT),
            id="pod with SchedulingGroup with TAS with scheduling constraint should not preempt even with WAP",
        ),
        pytest.param(
            [pod_group("foo")],
            True,
            Status.unschedulable(NOT_ELIGIBLE_WORKLOAD_AWARE),
            id="pod with SchedulingGroup with TAS with WAP enabled should not preempt",
        ),
        pytest.param(
            [],
            True,
            Status.unschedulable(POD_GROUP_NOT_FOUND),
            id="pod with SchedulingGroup whose PodGroup is missing (TAS and WAP enabled)",
        ),
        pytest.param([], False, Status(), id="pod with SchedulingGroup with TAS and WAP disabled should preempt"),
    ],
)
def test_post_filter_of_a_pod_of_a_group(groups: list[dict[str, Any]], workload_aware: bool, expected: Status) -> None:
    """Upstream TestPostFilter's pod-group cases: in a workload-aware profile (all four gates on) a pod of a
    PodGroup never preempts on its own; in any other profile it preempts like every pod."""
    pod = member("p-with-podgroup", HIGH, group="foo")
    framework, plugin, handle = setup([bound("p1", "node1", LOW)], groups, [pod], workload_aware=workload_aware)
    state, fit = fail(framework, pod)
    result, status = plugin.post_filter(state, pod, fit.diagnosis.node_to_status)
    assert (status.code, status.message) == (expected.code, expected.message)
    assert (result is not None and result.nominated_node_name) == (False if workload_aware else "node1")
    assert handle.metrics.attempts == 1  # counted either way, as upstream's deferred PreemptionAttempts
    handle.run_jobs()


def test_a_single_pod_still_preempts_in_a_workload_aware_profile() -> None:
    """The gate changes nothing for a pod of no group: it preempts as in the default profile (and a group's
    members are ordinary victims for it)."""
    pod = pod_info(make_pod("single", requests={"cpu": "1"}, spec={"priority": HIGH}, uid="uid-single"))
    victim_pod = bound("g-1", "node1", LOW, group="pg1")
    framework, plugin, handle = setup([victim_pod], [pod_group("pg1", mode="PodGroup", priority=LOW)], [pod])
    state, fit = fail(framework, pod)
    result, status = plugin.post_filter(state, pod, fit.diagnosis.node_to_status)
    assert status.is_success
    assert result is not None
    assert result.nominated_node_name == "node1"
    handle.run_jobs()
    assert [c[:2] for c in handle.client.calls] == [("patch", "g-1"), ("delete", "g-1")]


@pytest.mark.parametrize(
    ("checked", "expected"),
    [
        pytest.param("pg1", Status.unschedulable(WAITING_FOR_POD_GROUP_PREEMPTION, unresolvable=True), id="same"),
        pytest.param("pg2", Status(), id="WAP enabled, pod in different PodGroup, returns nil"),
        pytest.param("pg_missing", Status(), id="WAP enabled, pod group not found, returns nil"),
    ],
)
def test_pre_enqueue_holds_the_members_of_a_preempting_group(checked: str, expected: Status) -> None:
    """Upstream TestPreEnqueue's WAP cases: while a group's preemption runs, its members wait at PreEnqueue."""
    preemptor = member("p", HIGH, group="pg1")
    groups = [pod_group("pg1", priority=HIGH), pod_group("pg2", priority=HIGH)]
    _, plugin, handle = setup([bound("p1", "node1", LOW)], groups, [preemptor])

    def schedule() -> Status:
        node = handle.cache.node("node1")
        assert node is not None
        return Status() if not node.pods else Status.unschedulable("need to preempt")

    assert plugin.pod_group_post_filter(groups[0], [preemptor], schedule).is_success
    other = member("p_other", HIGH, group=checked)
    status = plugin.pre_enqueue(other)
    assert (status.code, status.message) == (expected.code, expected.message)
    handle.run_jobs()


def test_pre_enqueue_in_a_profile_that_is_not_workload_aware() -> None:
    """Upstream "WAP disabled, pod in same PodGroup, returns nil": the pod preempted on its own; another member
    of its group is not held."""
    preemptor = member("p", HIGH, group="pg1")
    framework, plugin, handle = setup(
        [bound("p1", "node1", LOW)], [pod_group("pg1")], [preemptor], workload_aware=False
    )
    state, fit = fail(framework, preemptor)
    _, status = plugin.post_filter(state, preemptor, fit.diagnosis.node_to_status)
    assert status.is_success
    assert plugin.pre_enqueue(member("p_other", HIGH, group="pg1")).is_success
    assert not plugin.pre_enqueue(preemptor).is_success
    handle.run_jobs()


def test_pod_group_post_filter_evicts_a_whole_group_as_a_podgroup_preemptor() -> None:
    """The executor for a podgroup preemptor (upstream actuatePodGroupPreemption): every pod of the victim group,
    each with the DisruptionTarget condition naming a podgroup, deleted, a Preempted event related to the
    preemptor's PodGroup; the members are held until the victims are watched gone."""
    victims = [bound("v-1", "node1", LOW, group="low"), bound("v-2", "node1", LOW, group="low")]
    groups = [pod_group("low", mode="PodGroup", priority=LOW), pod_group("high", priority=HIGH)]
    members = [member("m-1", MID, group="high"), member("m-2", MID, group="high")]
    _, plugin, handle = setup(victims, groups, members)
    before = cache_fingerprint(handle.cache)

    def schedule() -> Status:  # fits once v-1 is gone (only v-1 blocks)
        node = handle.cache.node("node1")
        assert node is not None
        return Status() if "v-1" not in {p.name for p in node.pods.values()} else Status.unschedulable()

    assert plugin.pod_group_post_filter(groups[1], members, schedule).is_success
    assert cache_fingerprint(handle.cache) == before
    last = plugin.last_preemption("default", "high")
    assert last is not None
    assert last.victims == (("default/v-1", "uid-v-1"), ("default/v-2", "uid-v-2"))
    assert plugin.pre_enqueue(members[0]).message == WAITING_FOR_POD_GROUP_PREEMPTION
    handle.run_jobs()
    assert [c[:2] for c in handle.client.calls] == [
        ("patch", "v-1"),
        ("delete", "v-1"),
        ("patch", "v-2"),
        ("delete", "v-2"),
    ]
    patch = handle.client.calls[0][2]
    [condition] = patch["status"]["conditions"]
    assert (condition["type"], condition["reason"], condition["message"]) == (
        "DisruptionTarget",
        "PreemptionByScheduler",
        "default-scheduler: preempting to accommodate a higher priority podgroup",
    )
    note = "Preempted by podgroup pg-uid-high on node cluster"
    assert handle.events == [(v, "Normal", "Preempted", "Preempting", note) for v in ("v-1", "v-2")]
    assert handle.related == ["PodGroup/high", "PodGroup/high"]
    assert handle.metrics.victims == [2]
    # Still held until the victims are watched gone from their nodes.
    assert not plugin.pre_enqueue(members[1]).is_success
    handle.cache.remove_pod("uid-v-1")
    handle.cache.remove_pod("uid-v-2")
    assert plugin.pre_enqueue(members[1]).is_success


def test_a_failed_eviction_activates_every_member() -> None:
    """Upstream: when an API call fails, the preemptor's pods (every member) go back to the active queue."""
    victims = [bound("v-1", "node1", LOW)]
    groups = [pod_group("high", priority=HIGH)]
    members = [member("m-1", MID, group="high"), member("m-2", MID, group="high")]
    _, plugin, handle = setup(victims, groups, members)
    handle.client.fail = {"v-1": 500}

    def schedule() -> Status:
        node = handle.cache.node("node1")
        assert node is not None
        return Status() if not node.pods else Status.unschedulable()

    assert plugin.pod_group_post_filter(groups[0], members, schedule).is_success
    handle.run_jobs()
    assert handle.activated == ["m-1", "m-2"]
    assert plugin.pre_enqueue(members[0]).is_success


def test_preemption_budgets_are_read_from_the_cluster() -> None:
    """The PodDisruptionBudgets come from the cache (upstream's PDB lister): a protected pod is reprieved first."""
    victims = [bound("protected", "node1", LOW, labels={"app": "foo"}), bound("free", "node1", LOW)]
    groups = [pod_group("high", priority=HIGH)]
    _, plugin, handle = setup(victims, groups, [member("m", HIGH, group="high")])
    handle.cache.objects.apply(
        POD_DISRUPTION_BUDGET,
        "ADDED",
        {
            "metadata": {"name": "pdb", "namespace": "default"},
            "spec": {"selector": {"matchLabels": {"app": "foo"}}},
            "status": {"disruptionsAllowed": 0},
        },
    )

    def schedule() -> Status:  # any one of the two leaving makes room
        node = handle.cache.node("node1")
        assert node is not None
        return Status() if len(node.pods) < 2 else Status.unschedulable()

    assert plugin.pod_group_post_filter(groups[0], [member("m", HIGH, group="high")], schedule).is_success
    last = plugin.last_preemption("default", "high")
    assert last is not None
    assert [key for key, _ in last.victims] == ["default/free"]
    handle.run_jobs()


def test_executor_records_nothing_without_victims_to_delete() -> None:
    """Upstream prepareCandidateAsync: victims already terminating need no API call; nothing is held."""
    obj = bound("v-1", "node1", LOW)
    obj["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    _, plugin, handle = setup([obj], [pod_group("high", priority=HIGH)], [])

    def schedule() -> Status:
        node = handle.cache.node("node1")
        assert node is not None
        return Status() if not node.pods else Status.unschedulable()

    assert plugin.pod_group_post_filter(
        pod_group("high", priority=HIGH), [member("m", HIGH, group="high")], schedule
    ).is_success
    assert handle.jobs == []
    assert plugin.pre_enqueue(member("m", HIGH, group="high")).is_success
    asyncio.run(asyncio.sleep(0))


def test_the_last_victims_deletion_queues_the_members() -> None:
    """DefaultPreemption's Pod/Delete hint (ours, see ``after_victim_deletion``) for a member of a preempting
    group: Skip while a victim of its group is still on its node, Queue for the deletion that ends the hold; a
    pod that was no victim of the group is Skip."""
    victims = [bound("v-1", "node1", LOW), bound("v-2", "node1", LOW)]
    groups = [pod_group("high", priority=HIGH)]
    members = [member("m-1", MID, group="high"), member("m-2", MID, group="high")]
    _, plugin, handle = setup([*victims, bound("other", "node1", HIGH)], groups, members)

    def schedule() -> Status:
        node = handle.cache.node("node1")
        assert node is not None
        return Status() if len(node.pods) <= 1 else Status.unschedulable()

    assert plugin.pod_group_post_filter(groups[0], members, schedule).is_success
    handle.run_jobs()
    first, second = (pod_info(v) for v in victims)
    handle.cache.remove_pod(first.uid)
    assert plugin.after_victim_deletion(members[0], first, None) == QUEUE_SKIP  # v-2 is still there
    handle.cache.remove_pod(second.uid)
    assert plugin.after_victim_deletion(members[0], second, None) == QUEUE
    assert plugin.after_victim_deletion(members[1], pod_info(bound("other", "node1", HIGH)), None) == QUEUE_SKIP
