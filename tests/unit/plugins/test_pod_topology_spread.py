"""PodTopologySpread: verdicts, reasons, counts and score math pinned against upstream v1.36 behaviour."""

from __future__ import annotations

import itertools
import math
from typing import Any

import numpy as np
import pytest

from kopf_scheduler.api.args import PodTopologySpreadArgs
from kopf_scheduler.framework import (
    QUEUE,
    QUEUE_SKIP,
    ActionType,
    ClusterEvent,
    Code,
    CycleState,
    EventResource,
    ExtensionPoint,
    QueueingHint,
)
from kopf_scheduler.plugins.pod_topology_spread import (
    ERR_REASON_CONSTRAINTS_NOT_MATCH,
    ERR_REASON_NODE_LABEL_NOT_MATCH,
    PRE_FILTER_STATE_KEY,
    PodTopologySpread,
    _go_round,
)
from kopf_scheduler.state.cache import ClusterCache
from kopf_scheduler.state.pod_info import PodInfo
from kopf_scheduler.state.selectors import LabelSelector
from tests.unit.factories import FakeHandle, hint_for, make_cache, make_node, make_pod, pod_info, slots

ZONE = "topology.kubernetes.io/zone"
RACK = "example.com/rack"
HOST = "kubernetes.io/hostname"
WEB = {"matchLabels": {"app": "web"}}

U = (Code.UNSCHEDULABLE, ERR_REASON_CONSTRAINTS_NOT_MATCH)
UUR = (Code.UNSCHEDULABLE_AND_UNRESOLVABLE, ERR_REASON_NODE_LABEL_NOT_MATCH)
OK = None


def constraint(
    key: str = ZONE, max_skew: int = 1, when: str = "DoNotSchedule", selector: Any = WEB, **extra: Any
) -> dict[str, Any]:
    body: dict[str, Any] = {"maxSkew": max_skew, "topologyKey": key, "whenUnsatisfiable": when, **extra}
    if selector is not None:
        body["labelSelector"] = selector
    return body


def zone_node(name: str, zone: str | None, **kwargs: Any) -> dict[str, Any]:
    labels = dict(kwargs.pop("labels", {}))
    if zone is not None:
        labels[ZONE] = zone
    return make_node(name, labels=labels, **kwargs)


_names = itertools.count()


def pods_on(node: str, count: int, labels: dict[str, str] | None = None, **kwargs: Any) -> list[dict[str, Any]]:
    """``count`` pods bound to ``node`` (labelled app=web unless told otherwise)."""
    return [
        make_pod(f"{node}-{next(_names)}", node_name=node, labels=labels or {"app": "web"}, **kwargs)
        for _ in range(count)
    ]


def incoming(constraints: list[dict[str, Any]] | None = None, labels: dict[str, str] | None = None, **spec: Any):
    body = dict(spec)
    if constraints is not None:
        body["topologySpreadConstraints"] = constraints
    return make_pod("incoming", labels={"app": "web"} if labels is None else labels, spec=body)


def plugin(cache: ClusterCache, args: PodTopologySpreadArgs | None = None) -> PodTopologySpread:
    return PodTopologySpread(handle=FakeHandle(cache), args=args)


def run_filter(
    cache: ClusterCache, pod_obj: dict[str, Any], args: PodTopologySpreadArgs | None = None
) -> dict[str, tuple[Code, str] | None] | str:
    """Node name → (code, reason) or None; "skip" when PreFilter skipped."""
    pl = plugin(cache, args)
    state = CycleState()
    snapshot = cache.snapshot()
    pod = pod_info(pod_obj)
    result, status = pl.pre_filter(state, pod, snapshot)
    assert result is None
    if status.is_skip:
        return "skip"
    assert status.is_success
    return _filter_verdicts(pl, state, pod, cache)


def _filter_verdicts(pl: PodTopologySpread, state: CycleState, pod: Any, cache: ClusterCache) -> dict[str, Any]:
    snapshot = cache.snapshot()
    nodes = slots(snapshot)
    found = pl.filter(state, pod, nodes, snapshot)
    verdicts: dict[str, tuple[Code, str] | None] = {}
    for position, slot in enumerate(nodes):
        name = snapshot.node_info(int(slot)).name
        if found is None or not found.rejected[position]:
            verdicts[name] = None
        else:
            status = found.status_at(position)
            verdicts[name] = (status.code, status.message)
    return verdicts


def run_score(
    cache: ClusterCache,
    pod_obj: dict[str, Any],
    filtered: list[str] | None = None,
    args: PodTopologySpreadArgs | None = None,
) -> tuple[dict[str, int], dict[str, int]] | str:
    """(raw, normalized) per filtered node name, or "skip" when PreScore skipped."""
    pl = plugin(cache, args)
    state = CycleState()
    snapshot = cache.snapshot()
    pod = pod_info(pod_obj)
    nodes = slots(snapshot, filtered)
    status = pl.pre_score(state, pod, nodes, snapshot)
    if status.is_skip:
        return "skip"
    assert status.is_success
    raw = pl.score(state, pod, nodes, snapshot)
    assert raw.dtype == np.int64
    final = pl.normalize_score(state, pod, nodes, raw)
    names = [snapshot.node_info(int(s)).name for s in nodes]
    return dict(zip(names, raw.tolist(), strict=True)), dict(zip(names, final.tolist(), strict=True))


def terminating(pods: list[dict[str, Any]]) -> list[dict[str, Any]]:
    for pod in pods:
        pod["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    return pods


def owned_by(pod: dict[str, Any], kind: str, name: str, api_version: str = "apps/v1") -> dict[str, Any]:
    pod["metadata"]["ownerReferences"] = [
        {"apiVersion": api_version, "kind": kind, "name": name, "uid": "u", "controller": True}
    ]
    return pod


TWO_ZONES = [zone_node("a", "z1"), zone_node("b", "z1"), zone_node("x", "z2"), zone_node("y", "z2")]
ZONES_1_2 = {
    "nodeAffinity": {
        "requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": [{"matchExpressions": [{"key": ZONE, "operator": "In", "values": ["z1", "z2"]}]}]
        }
    }
}
NO_TOLERATION_TAINT = [{"key": "dedicated", "value": "infra", "effect": "NoSchedule"}]


# -- Filter --------------------------------------------------------------------------------------------
FILTER_CASES = [
    pytest.param(
        TWO_ZONES,
        pods_on("a", 1),
        incoming([constraint()]),
        None,
        {"a": U, "b": U, "x": OK, "y": OK},
        id="skew: zone1 has 1, zone2 0, self-match → zone1 would reach skew 2",
    ),
    pytest.param(
        TWO_ZONES,
        [*pods_on("a", 1), *pods_on("b", 1), *pods_on("x", 1)],
        incoming([constraint(key=HOST)]),
        None,
        {"a": U, "b": U, "x": U, "y": OK},
        id="hostname DoNotSchedule: one per node until every node has one",
    ),
    pytest.param(
        TWO_ZONES,
        pods_on("a", 1),
        incoming([constraint(max_skew=2)]),
        None,
        {"a": OK, "b": OK, "x": OK, "y": OK},
        id="skew exactly maxSkew passes",
    ),
    pytest.param(
        TWO_ZONES,
        pods_on("a", 1),
        incoming([constraint()], labels={"app": "other"}),
        None,
        {"a": OK, "b": OK, "x": OK, "y": OK},
        id="pod does not match its own selector: selfMatch 0",
    ),
    pytest.param(
        [*TWO_ZONES, zone_node("c", None)],
        [],
        incoming([constraint()]),
        None,
        {"a": OK, "b": OK, "x": OK, "y": OK, "c": UUR},
        id="node without the topology key: UUR missing required label",
    ),
    pytest.param(
        [zone_node("c", None), zone_node("d", None)],
        [],
        incoming([constraint()]),
        None,
        {"c": UUR, "d": UUR},
        id="no node has the key at all",
    ),
    pytest.param(
        [
            zone_node("a", "z1", labels={RACK: "r1"}),
            zone_node("b", "z1"),
            zone_node("x", "z2", labels={RACK: "r2"}),
        ],
        pods_on("a", 2),
        incoming([constraint(), constraint(key=RACK)]),
        None,
        {"a": U, "b": U, "x": OK},
        id="constraints judged in order: skew failure on the 1st wins over the 2nd key missing",
    ),
    pytest.param(
        [zone_node("a", "z1"), zone_node("x", "z2", labels={RACK: "r2"})],
        [],
        incoming([constraint(key=RACK), constraint()]),
        None,
        {"a": UUR, "x": OK},
        id="a node lacking a key is not counted for any constraint",
    ),
    pytest.param(
        TWO_ZONES,
        [*pods_on("a", 1), *pods_on("x", 1)],
        incoming([constraint()]),
        None,
        {"a": OK, "b": OK, "x": OK, "y": OK},
        id="balanced zones: min 1, 1+1-1 = 1",
    ),
    pytest.param(
        TWO_ZONES,
        [*pods_on("a", 1), *pods_on("x", 1)],
        incoming([constraint(minDomains=3)]),
        None,
        {"a": U, "b": U, "x": U, "y": U},
        id="minDomains 3 > 2 domains: global minimum treated as 0",
    ),
    pytest.param(
        TWO_ZONES,
        [*pods_on("a", 1), *pods_on("x", 1)],
        incoming([constraint(minDomains=2)]),
        None,
        {"a": OK, "b": OK, "x": OK, "y": OK},
        id="minDomains met: real minimum",
    ),
    pytest.param(
        [*TWO_ZONES, zone_node("z", "z3")],
        [*pods_on("a", 1), *pods_on("x", 1)],
        incoming([constraint()], affinity=ZONES_1_2),
        None,
        {"a": OK, "b": OK, "x": OK, "y": OK, "z": OK},
        id="nodeAffinityPolicy Honor (default): zone3 is not a domain",
    ),
    pytest.param(
        [*TWO_ZONES, zone_node("z", "z3")],
        [*pods_on("a", 1), *pods_on("x", 1)],
        incoming([constraint(nodeAffinityPolicy="Ignore")], affinity=ZONES_1_2),
        None,
        {"a": U, "b": U, "x": U, "y": U, "z": OK},
        id="nodeAffinityPolicy Ignore: empty zone3 counts, minimum 0",
    ),
    pytest.param(
        [*TWO_ZONES, zone_node("z", "z3")],
        [*pods_on("a", 1), *pods_on("x", 2)],
        incoming([constraint()], nodeSelector={ZONE: "z1"}),
        None,
        {"a": OK, "b": OK, "x": OK, "y": OK, "z": OK},
        id="nodeSelector honored: only zone1 is a domain (min 1); pods on other zones are not counted",
    ),
    pytest.param(
        [*TWO_ZONES, zone_node("z", "z3")],
        [*pods_on("a", 1), *pods_on("x", 2)],
        incoming([constraint(nodeAffinityPolicy="Ignore")], nodeSelector={ZONE: "z1"}),
        None,
        {"a": U, "b": U, "x": U, "y": U, "z": OK},
        id="nodeSelector ignored: zone3 (0) is the minimum",
    ),
    pytest.param(
        [*TWO_ZONES, zone_node("z", "z3", taints=NO_TOLERATION_TAINT)],
        [*pods_on("a", 1), *pods_on("x", 1)],
        incoming([constraint()]),
        None,
        {"a": U, "b": U, "x": U, "y": U, "z": OK},
        id="nodeTaintsPolicy Ignore (default): tainted empty zone3 counts",
    ),
    pytest.param(
        [*TWO_ZONES, zone_node("z", "z3", taints=NO_TOLERATION_TAINT)],
        [*pods_on("a", 1), *pods_on("x", 1)],
        incoming([constraint(nodeTaintsPolicy="Honor")]),
        None,
        {"a": OK, "b": OK, "x": OK, "y": OK, "z": OK},
        id="nodeTaintsPolicy Honor: untolerated NoSchedule node excluded",
    ),
    pytest.param(
        [*TWO_ZONES, zone_node("z", "z3", taints=NO_TOLERATION_TAINT)],
        [*pods_on("a", 1), *pods_on("x", 1)],
        incoming(
            [constraint(nodeTaintsPolicy="Honor")],
            tolerations=[{"key": "dedicated", "operator": "Equal", "value": "infra", "effect": "NoSchedule"}],
        ),
        None,
        {"a": U, "b": U, "x": U, "y": U, "z": OK},
        id="nodeTaintsPolicy Honor: tolerated taint keeps the node",
    ),
    pytest.param(
        [*TWO_ZONES, zone_node("z", "z3", taints=[{"key": "k", "effect": "PreferNoSchedule"}])],
        [*pods_on("a", 1), *pods_on("x", 1)],
        incoming([constraint(nodeTaintsPolicy="Honor")]),
        None,
        {"a": U, "b": U, "x": U, "y": U, "z": OK},
        id="nodeTaintsPolicy Honor: PreferNoSchedule taints do not exclude",
    ),
    pytest.param(
        TWO_ZONES,
        pods_on("a", 2, labels={"app": "web", "pod-template-hash": "v1"}),
        incoming([constraint()], labels={"app": "web", "pod-template-hash": "v2"}),
        None,
        {"a": U, "b": U, "x": OK, "y": OK},
        id="without matchLabelKeys old revision pods count",
    ),
    pytest.param(
        TWO_ZONES,
        pods_on("a", 2, labels={"app": "web", "pod-template-hash": "v1"}),
        incoming([constraint(matchLabelKeys=["pod-template-hash"])], labels={"app": "web", "pod-template-hash": "v2"}),
        None,
        {"a": OK, "b": OK, "x": OK, "y": OK},
        id="matchLabelKeys: only the pod's revision counts",
    ),
    pytest.param(
        TWO_ZONES,
        [
            *pods_on("a", 2, labels={"app": "web", "pod-template-hash": "v1"}),
            *pods_on("b", 1, labels={"app": "web", "pod-template-hash": "v2"}),
        ],
        incoming([constraint(matchLabelKeys=["pod-template-hash"])], labels={"app": "web", "pod-template-hash": "v2"}),
        None,
        {"a": U, "b": U, "x": OK, "y": OK},
        id="matchLabelKeys: same-revision pods still count",
    ),
    pytest.param(
        TWO_ZONES,
        pods_on("a", 2, labels={"app": "web", "pod-template-hash": "v1"}),
        incoming([constraint(matchLabelKeys=["missing-key"])], labels={"app": "web"}),
        None,
        {"a": U, "b": U, "x": OK, "y": OK},
        id="matchLabelKeys the pod lacks are ignored",
    ),
    pytest.param(
        TWO_ZONES,
        pods_on("a", 3, labels={"app": "web", "pod-template-hash": "v1"}),
        incoming([constraint(selector=None, matchLabelKeys=["app"])]),
        None,
        {"a": OK, "b": OK, "x": OK, "y": OK},
        id="nil labelSelector stays nil with matchLabelKeys: matches nothing, selfMatch 0",
    ),
    pytest.param(
        TWO_ZONES,
        terminating(pods_on("a", 2)),
        incoming([constraint()]),
        None,
        {"a": OK, "b": OK, "x": OK, "y": OK},
        id="terminating pods are not counted",
    ),
    pytest.param(
        TWO_ZONES,
        pods_on("a", 2, namespace="other"),
        incoming([constraint()]),
        None,
        {"a": OK, "b": OK, "x": OK, "y": OK},
        id="pods of other namespaces are not counted",
    ),
    pytest.param(
        TWO_ZONES,
        pods_on("a", 3),
        incoming([constraint(selector={})]),
        None,
        {"a": OK, "b": OK, "x": OK, "y": OK},
        id="empty selector counts no pods (upstream quirk) but self-matches",
    ),
    pytest.param(
        TWO_ZONES,
        pods_on("a", 3),
        incoming([constraint(when="ScheduleAnyway")]),
        None,
        "skip",
        id="only ScheduleAnyway constraints: PreFilter Skip",
    ),
    pytest.param(
        TWO_ZONES,
        pods_on("a", 3),
        incoming(),
        None,
        "skip",
        id="no constraints, System defaults are all ScheduleAnyway: Skip",
    ),
    pytest.param(
        TWO_ZONES,
        pods_on("a", 1),
        incoming(),
        PodTopologySpreadArgs(
            defaulting_type="List",
            default_constraints=[{"maxSkew": 1, "topologyKey": ZONE, "whenUnsatisfiable": "DoNotSchedule"}],
        ),
        "skip",
        id="List DoNotSchedule default but nothing selects the pod: Skip",
    ),
]


@pytest.mark.parametrize(("nodes", "pods", "pod", "args", "expected"), FILTER_CASES)
def test_filter(nodes, pods, pod, args, expected) -> None:
    assert run_filter(make_cache(nodes, pods), pod, args) == expected


def test_filter_list_defaults_with_service_selector() -> None:
    cache = make_cache(TWO_ZONES, pods_on("a", 1))
    cache.set_workload_selector("Service", "default", "web", LabelSelector.parse({"matchLabels": {"app": "web"}}))
    args = PodTopologySpreadArgs(
        defaulting_type="List",
        default_constraints=[{"maxSkew": 1, "topologyKey": ZONE, "whenUnsatisfiable": "DoNotSchedule"}],
    )
    assert run_filter(cache, incoming(), args) == {"a": U, "b": U, "x": OK, "y": OK}


# -- AddPod / RemovePod / clone ------------------------------------------------------------------------
def _prefiltered(cache: ClusterCache, pod_obj: dict[str, Any]):
    pl = plugin(cache)
    state = CycleState()
    pod = pod_info(pod_obj)
    _, status = pl.pre_filter(state, pod, cache.snapshot())
    assert status.is_success
    return pl, state, pod


def test_add_pod_updates_counts_for_nominated_pods() -> None:
    cache = make_cache(TWO_ZONES, [*pods_on("a", 1), *pods_on("x", 1)])
    pl, state, pod = _prefiltered(cache, incoming([constraint()]))
    assert set(_filter_verdicts(pl, state, pod, cache).values()) == {None}
    extensions = pl.pre_filter_extensions()
    assert extensions is pl
    nominated = pod_info(make_pod("nominated", labels={"app": "web"}))
    assert extensions.add_pod(state, pod, nominated, cache.node("x")).is_success
    # zone2 now 2, zone1 1 (min): zone2 nodes reach skew 2.
    assert _filter_verdicts(pl, state, pod, cache) == {"a": OK, "b": OK, "x": U, "y": U}
    assert extensions.remove_pod(state, pod, nominated, cache.node("x")).is_success
    assert set(_filter_verdicts(pl, state, pod, cache).values()) == {None}


def test_remove_pod_lowers_minimum_for_preemption_dry_run() -> None:
    cache = make_cache(TWO_ZONES, [*pods_on("a", 1), *pods_on("x", 1)])
    pl, state, pod = _prefiltered(cache, incoming([constraint()]))
    victim = next(p for p in cache.pods() if p.node_name == "a")
    dry_run = state.clone()
    assert pl.remove_pod(dry_run, pod, victim, cache.node("a")).is_success
    # zone1 0 (new min): zone2 nodes 1+1-0 = 2 > 1.
    assert _filter_verdicts(pl, dry_run, pod, cache) == {"a": OK, "b": OK, "x": U, "y": U}
    # The original state is untouched by the clone's update.
    assert set(_filter_verdicts(pl, state, pod, cache).values()) == {None}
    assert state.read(PRE_FILTER_STATE_KEY).match_num[0] is not dry_run.read(PRE_FILTER_STATE_KEY).match_num[0]


@pytest.mark.parametrize(
    ("added", "node", "pod_spec"),
    [
        pytest.param(make_pod("o", namespace="other", labels={"app": "web"}), "x", {}, id="other namespace"),
        pytest.param(make_pod("o", labels={"app": "db"}), "x", {}, id="selector does not match"),
        pytest.param(make_pod("o", labels={"app": "web"}), "c", {}, id="node lacks the key"),
        pytest.param(
            make_pod("o", labels={"app": "web"}), "x", {"nodeSelector": {ZONE: "z1"}}, id="node not in affinity"
        ),
    ],
)
def test_add_pod_ignored(added: dict[str, Any], node: str, pod_spec: dict[str, Any]) -> None:
    cache = make_cache([*TWO_ZONES, zone_node("c", None)], [*pods_on("a", 1), *pods_on("x", 1)])
    pl, state, pod = _prefiltered(cache, incoming([constraint()], **pod_spec))
    before = [a.copy() for a in state.read(PRE_FILTER_STATE_KEY).match_num]
    assert pl.add_pod(state, pod, pod_info(added), cache.node(node)).is_success
    after = state.read(PRE_FILTER_STATE_KEY).match_num
    assert all(np.array_equal(b, a) for b, a in zip(before, after, strict=True))


def test_add_pod_without_prefilter_state_is_an_error() -> None:
    cache = make_cache(TWO_ZONES)
    status = plugin(cache).add_pod(CycleState(), pod_info(incoming()), pod_info(make_pod("o")), cache.node("a"))
    assert status.code is Code.ERROR


# -- Score ---------------------------------------------------------------------------------------------
THREE_ZONES = [zone_node("a", "za"), zone_node("b", "zb"), zone_node("c", "zc")]


def test_worked_example_2_22() -> None:
    """§2.22: zones a/b/c one filtered node each, 2/1/0 matching pods, maxSkew 1 → raw 3, 2, 0 → 0, 33, 100."""
    cache = make_cache(THREE_ZONES, [*pods_on("a", 2), *pods_on("b", 1)])
    raw, final = run_score(cache, incoming([constraint(when="ScheduleAnyway")]))
    assert raw == {"a": 3, "b": 2, "c": 0}
    assert final == {"a": 0, "b": 33, "c": 100}


def test_hostname_constraint_counts_the_node_itself() -> None:
    # weight ln(3 + 2); n1: round(2·1.609) = 3, n2: 0, n3: round(1.609) = 2; pods on unfiltered n4 don't matter
    # for the others but n4 still is no domain: size is the number of filtered nodes.
    nodes = [make_node("n1"), make_node("n2"), make_node("n3"), make_node("n4")]
    cache = make_cache(nodes, [*pods_on("n1", 2), *pods_on("n3", 1), *pods_on("n4", 5)])
    raw, final = run_score(cache, incoming([constraint(key=HOST, when="ScheduleAnyway")]), ["n1", "n2", "n3"])
    assert raw == {"n1": 3, "n2": 0, "n3": 2}
    assert final == {"n1": 0, "n2": 100, "n3": 33}


def test_max_skew_shifts_raw_scores_and_all_zero_gives_100() -> None:
    cache = make_cache(THREE_ZONES)
    raw, final = run_score(cache, incoming([constraint(when="ScheduleAnyway", max_skew=3)]))
    assert raw == {"a": 2, "b": 2, "c": 2}
    assert final == {"a": 100, "b": 100, "c": 100}
    raw, final = run_score(cache, incoming([constraint(when="ScheduleAnyway")]))
    assert raw == {"a": 0, "b": 0, "c": 0}
    assert final == {"a": 100, "b": 100, "c": 100}


def test_explicit_constraints_ignore_nodes_lacking_a_key() -> None:
    nodes = [*THREE_ZONES, zone_node("d", None)]
    cache = make_cache(nodes, [*pods_on("a", 2), *pods_on("b", 1), *pods_on("d", 7)])
    raw, final = run_score(cache, incoming([constraint(when="ScheduleAnyway")]))
    assert raw == {"a": 3, "b": 2, "c": 0, "d": 0}
    assert final == {"a": 0, "b": 33, "c": 100, "d": 0}


def test_counts_come_from_all_nodes_but_only_for_filtered_domains() -> None:
    # Zone za has a filtered node (a) and an unfiltered one (a2) with pods: both count. Zone zd has no
    # filtered node: not a domain (size 2 → weight ln 4).
    nodes = [zone_node("a", "za"), zone_node("a2", "za"), zone_node("b", "zb"), zone_node("d", "zd")]
    cache = make_cache(nodes, [*pods_on("a2", 2), *pods_on("b", 1), *pods_on("d", 4)])
    raw, final = run_score(cache, incoming([constraint(when="ScheduleAnyway")]), ["a", "b"])
    w = math.log(4)
    assert raw == {"a": round(2 * w), "b": round(w)}
    assert final == {"a": 100 * (3 + 1 - 3) // 3, "b": 100}


def test_score_node_taints_policy_honor_drops_pods_on_excluded_nodes() -> None:
    nodes = [zone_node("a", "za"), zone_node("a2", "za", taints=NO_TOLERATION_TAINT), zone_node("b", "zb")]
    pods = [*pods_on("a2", 3), *pods_on("b", 1)]
    soft = constraint(when="ScheduleAnyway", nodeTaintsPolicy="Honor")
    raw, _ = run_score(make_cache(nodes, pods), incoming([soft]), ["a", "b"])
    w = math.log(4)
    assert raw == {"a": 0, "b": round(w)}
    raw, _ = run_score(make_cache(nodes, pods), incoming([constraint(when="ScheduleAnyway")]), ["a", "b"])
    assert raw == {"a": round(3 * w), "b": round(w)}


def test_score_ignores_terminating_and_other_namespace_pods() -> None:
    pods = [*terminating(pods_on("a", 2)), *pods_on("b", 2, namespace="other"), *pods_on("c", 1)]
    raw, final = run_score(make_cache(THREE_ZONES, pods), incoming([constraint(when="ScheduleAnyway")]))
    assert raw == {"a": 0, "b": 0, "c": 2}
    assert final == {"a": 100, "b": 100, "c": 0}


def test_two_soft_constraints_sum_before_rounding() -> None:
    # zone weight ln(2+2), host weight ln(3+2); a: 2·ln4 + (1-1) + 2·ln5 + (2-1) = 6.99 → 7;
    # b: 2·ln4 + 0 + 0 + 1 = 3.77 → 4; c: 0 + 0 + 0 + 1 = 1.
    nodes = [zone_node("a", "z1"), zone_node("b", "z1"), zone_node("c", "z2")]
    cache = make_cache(nodes, pods_on("a", 2))
    pod = incoming([constraint(when="ScheduleAnyway"), constraint(key=HOST, when="ScheduleAnyway", max_skew=2)])
    raw, final = run_score(cache, pod)
    assert raw == {"a": 7, "b": 4, "c": 1}
    assert final == {"a": 14, "b": 57, "c": 100}


# -- System and List defaulting ------------------------------------------------------------------------
SERVICE_NODES = [zone_node("n1", "z1"), zone_node("n2", "z1"), zone_node("n3", "z2")]
SERVICE_PODS = [*pods_on("n1", 2), *pods_on("n2", 1)]
# hostname weight ln 5, zone weight ln 4; zone counts z1 = 3, z2 = 0:
# n1: 2·ln5 + 2 + 3·ln4 + 4 = 13.38 → 13; n2: ln5 + 2 + 3·ln4 + 4 = 11.77 → 12; n3: 2 + 4 = 6.
SERVICE_RAW = {"n1": 13, "n2": 12, "n3": 6}
SERVICE_FINAL = {"n1": 100 * 6 // 13, "n2": 100 * 7 // 13, "n3": 100}


def test_system_defaults_from_service() -> None:
    cache = make_cache(SERVICE_NODES, SERVICE_PODS)
    cache.set_workload_selector("Service", "default", "web", LabelSelector.parse({"matchLabels": {"app": "web"}}))
    cache.set_workload_selector("Service", "default", "db", LabelSelector.parse({"matchLabels": {"app": "db"}}))
    cache.set_workload_selector("Service", "other", "all", LabelSelector.parse({"matchLabels": {"tier": "x"}}))
    assert run_score(cache, incoming()) == (SERVICE_RAW, SERVICE_FINAL)


@pytest.mark.parametrize(
    ("kind", "api_version", "selector", "expected"),
    [
        pytest.param("ReplicaSet", "apps/v1", {"matchLabels": {"app": "web"}}, (SERVICE_RAW, SERVICE_FINAL), id="rs"),
        pytest.param(
            "StatefulSet",
            "apps/v1",
            {"matchExpressions": [{"key": "app", "operator": "In", "values": ["web"]}]},
            (SERVICE_RAW, SERVICE_FINAL),
            id="statefulset",
        ),
        pytest.param("ReplicaSet", "extensions/v1beta1", {"matchLabels": {"app": "web"}}, "skip", id="rs old group"),
        pytest.param("Deployment", "apps/v1", {"matchLabels": {"app": "web"}}, "skip", id="unsupported kind"),
    ],
)
def test_system_defaults_from_controller(kind: str, api_version: str, selector: dict[str, Any], expected: Any) -> None:
    cache = make_cache(SERVICE_NODES, SERVICE_PODS)
    cache.set_workload_selector(kind, "default", "web-1", LabelSelector.parse(selector))
    pod = owned_by(incoming(), kind, "web-1", api_version)
    assert run_score(cache, pod) == expected


def test_system_defaults_from_replication_controller() -> None:
    cache = make_cache(SERVICE_NODES, SERVICE_PODS)
    cache.set_workload_selector(
        "ReplicationController", "default", "rc", LabelSelector.parse({"matchLabels": {"app": "web"}})
    )
    assert run_score(cache, owned_by(incoming(), "ReplicationController", "rc", "v1")) == (SERVICE_RAW, SERVICE_FINAL)


def test_default_selector_combines_service_and_replica_set() -> None:
    # Service selects app=web, the ReplicaSet adds tier=fe: only pods with both count (n2's pod lacks tier).
    pods = [*pods_on("n1", 2, labels={"app": "web", "tier": "fe"}), *pods_on("n2", 1)]
    cache = make_cache(SERVICE_NODES, pods)
    cache.set_workload_selector("Service", "default", "web", LabelSelector.parse({"matchLabels": {"app": "web"}}))
    cache.set_workload_selector("ReplicaSet", "default", "rs", LabelSelector.parse({"matchLabels": {"tier": "fe"}}))
    pod = owned_by(incoming(labels={"app": "web", "tier": "fe"}), "ReplicaSet", "rs")
    raw, _ = run_score(cache, pod)
    # n1: 2·ln5 + 2 + 2·ln4 + 4 = 11.99 → 12; n2: 2 + 2·ln4 + 4 = 8.77 → 9; n3: 6.
    assert raw == {"n1": 12, "n2": 9, "n3": 6}


@pytest.mark.parametrize(
    "service",
    [
        pytest.param(("default", {"app": "db"}), id="service selects other pods"),
        pytest.param(("other", {"app": "web"}), id="service in another namespace"),
        pytest.param(None, id="nothing selects the pod"),
    ],
)
def test_system_defaults_skip_without_selector(service: tuple[str, dict[str, str]] | None) -> None:
    cache = make_cache(SERVICE_NODES, SERVICE_PODS)
    if service is not None:
        cache.set_workload_selector("Service", service[0], "s", LabelSelector.parse({"matchLabels": service[1]}))
    assert run_score(cache, incoming()) == "skip"


def test_system_defaults_score_nodes_without_zone_by_hostname() -> None:
    # System defaulting does not require all keys: n2 (no zone) is scored by hostname only, and the zone
    # constraint sees two values among filtered nodes ("z1" and the absent label read as "") → weight ln 4.
    cache = make_cache([zone_node("n1", "z1"), zone_node("n2", None)], [*pods_on("n1", 1), *pods_on("n2", 1)])
    cache.set_workload_selector("Service", "default", "web", LabelSelector.parse({"matchLabels": {"app": "web"}}))
    raw, final = run_score(cache, incoming())
    w = math.log(4)
    assert raw == {"n1": round(w + 2 + w + 4), "n2": round(w + 2)}
    assert raw == {"n1": 9, "n2": 3}
    assert final == {"n1": 100 * 3 // 9, "n2": 100}


def test_list_defaults_require_all_keys() -> None:
    cache = make_cache([*THREE_ZONES, zone_node("d", None)], [*pods_on("a", 2), *pods_on("b", 1)])
    cache.set_workload_selector("Service", "default", "web", LabelSelector.parse({"matchLabels": {"app": "web"}}))
    args = PodTopologySpreadArgs(
        defaulting_type="List",
        default_constraints=[{"maxSkew": 1, "topologyKey": ZONE, "whenUnsatisfiable": "ScheduleAnyway"}],
    )
    raw, final = run_score(cache, incoming(), args=args)
    assert raw == {"a": 3, "b": 2, "c": 0, "d": 0}
    assert final == {"a": 0, "b": 33, "c": 100, "d": 0}


def test_list_defaults_empty_means_no_defaults() -> None:
    cache = make_cache(SERVICE_NODES, SERVICE_PODS)
    cache.set_workload_selector("Service", "default", "web", LabelSelector.parse({"matchLabels": {"app": "web"}}))
    assert run_score(cache, incoming(), args=PodTopologySpreadArgs(defaulting_type="List")) == "skip"


def test_explicit_constraints_win_over_defaults() -> None:
    cache = make_cache(THREE_ZONES, [*pods_on("a", 2), *pods_on("b", 1)])
    cache.set_workload_selector("Service", "default", "web", LabelSelector.parse({"matchLabels": {"app": "web"}}))
    # Only a DoNotSchedule constraint: no soft constraint, and no defaults either.
    assert run_score(cache, incoming([constraint()])) == "skip"


def test_pre_score_skips_without_nodes() -> None:
    assert run_score(ClusterCache(), incoming([constraint(when="ScheduleAnyway")]), []) == "skip"


# -- helpers, args, wiring -----------------------------------------------------------------------------
def test_go_round_is_half_away_from_zero() -> None:
    values = np.asarray([0.5, 1.5, 2.5, -0.5, -2.5, 0.49999999999999994, 2.4999999, 3.0])
    assert _go_round(values).tolist() == [1, 2, 3, -1, -3, 0, 2, 3]


def test_plugin_wiring() -> None:
    assert PodTopologySpread.name == "PodTopologySpread"
    assert PodTopologySpread.args_model is PodTopologySpreadArgs
    assert PodTopologySpread.has_normalize
    assert PodTopologySpread.extension_points() == {
        ExtensionPoint.PRE_FILTER,
        ExtensionPoint.FILTER,
        ExtensionPoint.PRE_SCORE,
        ExtensionPoint.SCORE,
    }


# -- cross-checked against upstream's own expectations (scoring_test.go, v1.36.3) ------------------------
FOO = {"matchExpressions": [{"key": "foo", "operator": "Exists"}]}
BAR = {"matchExpressions": [{"key": "bar", "operator": "Exists"}]}


def test_upstream_vector_hostname_max_skew_3() -> None:
    nodes = [make_node(n) for n in ("node-a", "node-b", "node-c", "node-d")]
    pods = [
        *pods_on("node-a", 4, labels={"foo": ""}),
        *pods_on("node-b", 3, labels={"foo": ""}),
        *pods_on("node-c", 2, labels={"foo": ""}),
        *pods_on("node-d", 1, labels={"foo": ""}),
    ]
    pod = incoming([constraint(key=HOST, max_skew=3, when="ScheduleAnyway", selector=FOO)], labels={"foo": ""})
    _, final = run_score(make_cache(nodes, pods), pod)
    assert final == {"node-a": 44, "node-b": 66, "node-c": 77, "node-d": 100}


def test_upstream_vector_system_defaults_service_nodes_without_zone() -> None:
    """Same spread, no explicit constraints: a Service selects the pods; no node has a zone label."""
    nodes = [make_node(n) for n in ("node-a", "node-b", "node-c", "node-d")]
    pods = [
        *pods_on("node-a", 4, labels={"foo": ""}),
        *pods_on("node-b", 3, labels={"foo": ""}),
        *pods_on("node-c", 2, labels={"foo": ""}),
        *pods_on("node-d", 1, labels={"foo": ""}),
    ]
    cache = make_cache(nodes, pods)
    cache.set_workload_selector("Service", "default", "svc", LabelSelector.parse({"matchLabels": {"foo": ""}}))
    _, final = run_score(cache, incoming(labels={"foo": ""}))
    assert final == {"node-a": 44, "node-b": 66, "node-c": 77, "node-d": 100}


def test_upstream_vector_zone_and_hostname_with_different_selectors() -> None:
    # zone1: node-a P{foo}, node-b P{foo, bar}; zone2: node-x -, node-y P{foo} P{bar}.
    nodes = [zone_node("node-a", "zone1"), zone_node("node-b", "zone1"), zone_node("node-x", "zone2")]
    nodes.append(zone_node("node-y", "zone2"))
    pods = [
        *pods_on("node-a", 1, labels={"foo": ""}),
        *pods_on("node-b", 1, labels={"foo": "", "bar": ""}),
        *pods_on("node-y", 1, labels={"foo": ""}),
        *pods_on("node-y", 1, labels={"bar": ""}),
    ]
    pod = incoming(
        [constraint(when="ScheduleAnyway", selector=FOO), constraint(key=HOST, when="ScheduleAnyway", selector=BAR)],
        labels={"foo": "", "bar": ""},
    )
    _, final = run_score(make_cache(nodes, pods), pod)
    assert final == {"node-a": 60, "node-b": 20, "node-x": 100, "node-y": 60}


# -- EnqueueExtensions: registrations and QueueingHints ----------------------------------------------------------
NODE_ADD = ClusterEvent(EventResource.NODE, ActionType.ADD)
NODE_LABEL = ClusterEvent(EventResource.NODE, ActionType.UPDATE_NODE_LABEL)
NODE_DELETE = ClusterEvent(EventResource.NODE, ActionType.DELETE)
POD_DELETE = ClusterEvent(EventResource.ASSIGNED_POD, ActionType.DELETE)
POD_ADD = ClusterEvent(EventResource.ASSIGNED_POD, ActionType.ADD)
POD_LABEL = ClusterEvent(EventResource.ASSIGNED_POD, ActionType.UPDATE_POD_LABEL)


def hint(pod: PodInfo, old: Any, new: Any, *, event: ClusterEvent, args: dict[str, Any] | None = None) -> QueueingHint:
    """Run the hint PodTopologySpread registered for ``event`` (exactly one registration matches)."""
    return hint_for(
        PodTopologySpread(handle=FakeHandle(), args=PodTopologySpreadArgs.model_validate(args) if args else None), event
    )(pod, old, new)


def test_events_to_register() -> None:
    assert [r.event for r in PodTopologySpread(handle=FakeHandle()).events_to_register()] == [
        ClusterEvent(
            EventResource.POD,
            ActionType.ADD | ActionType.UPDATE_POD_LABEL | ActionType.UPDATE_POD_TOLERATION | ActionType.DELETE,
        ),
        ClusterEvent(
            EventResource.NODE,
            ActionType.ADD | ActionType.DELETE | ActionType.UPDATE_NODE_LABEL | ActionType.UPDATE_NODE_TAINT,
        ),
    ]


TAINT = {"key": "k", "value": "v", "effect": "NoSchedule"}


SPREAD = {
    "maxSkew": 1,
    "topologyKey": "zone",
    "whenUnsatisfiable": "DoNotSchedule",
    "labelSelector": {"matchLabels": {"app": "web"}},
}
SPREAD_POD = pod_info(make_pod("s", uid="s", labels={"app": "web"}, spec={"topologySpreadConstraints": [SPREAD]}))


def _web(labels: dict[str, str], *, node_name: str = "n1", namespace: str = "default") -> dict[str, Any]:
    return make_pod("w", uid="w", node_name=node_name, namespace=namespace, labels=labels)


@pytest.mark.parametrize(
    ("old", "new", "expected"),
    [
        (None, _web({"app": "web"}), QUEUE),
        (None, _web({"app": "db"}), QUEUE_SKIP),
        (None, _web({"app": "web"}, node_name=""), QUEUE_SKIP),  # not placed: does not count
        (None, _web({"app": "web"}, namespace="other"), QUEUE_SKIP),
        (_web({"app": "web"}), None, QUEUE),
        (_web({"app": "web"}), _web({"app": "db"}), QUEUE),
        (_web({"app": "web", "x": "1"}), _web({"app": "web", "x": "2"}), QUEUE_SKIP),  # selector unaffected
        (_web({"app": "db", "x": "1"}), _web({"app": "db", "x": "1"}), QUEUE_SKIP),
    ],
    ids=[
        "add-match",
        "add-other",
        "add-unbound",
        "add-other-ns",
        "delete",
        "relabel-out",
        "relabel-irrelevant",
        "same",
    ],
)
def test_pod_topology_spread_pod_hint(old: Any, new: Any, expected: QueueingHint) -> None:
    event = POD_ADD if old is None else POD_DELETE if new is None else POD_LABEL
    assert hint(SPREAD_POD, old, new, event=event) is expected


def test_pod_topology_spread_match_label_keys_and_own_toleration() -> None:
    constraint = dict(SPREAD, matchLabelKeys=["rev"], nodeTaintsPolicy="Honor")
    pod = pod_info(
        make_pod("s", uid="s", labels={"app": "web", "rev": "1"}, spec={"topologySpreadConstraints": [constraint]})
    )
    assert hint(pod, None, _web({"app": "web", "rev": "1"}), event=POD_ADD) is QUEUE
    assert hint(pod, None, _web({"app": "web", "rev": "2"}), event=POD_ADD) is QUEUE_SKIP
    tolerating = make_pod(
        "s", uid="s", labels={"app": "web", "rev": "1"}, spec={"tolerations": [{"operator": "Exists"}]}
    )
    assert (
        hint(pod, pod, tolerating, event=ClusterEvent(EventResource.UNSCHEDULED_POD, ActionType.UPDATE_POD_TOLERATION))
        is QUEUE
    )


@pytest.mark.parametrize(
    ("old", "new", "expected"),
    [
        (None, make_node("n", labels={"zone": "a"}), QUEUE),
        (None, make_node("n"), QUEUE_SKIP),
        (make_node("n", labels={"zone": "a"}), None, QUEUE),
        (make_node("n"), make_node("n", labels={"zone": "a"}), QUEUE),
        (make_node("n", labels={"zone": "a"}), make_node("n", labels={"zone": "b"}), QUEUE),
        (make_node("n", labels={"zone": "a"}), make_node("n", labels={"zone": "a", "x": "y"}), QUEUE_SKIP),
        (make_node("n", labels={"zone": "a"}), make_node("n", labels={"zone": "a"}, taints=[TAINT]), QUEUE),
    ],
    ids=["add-keyed", "add-unkeyed", "delete-keyed", "gains-key", "zone-moves", "other-label", "taints"],
)
def test_pod_topology_spread_node_hint(old: Any, new: Any, expected: QueueingHint) -> None:
    event = NODE_ADD if old is None else NODE_DELETE if new is None else NODE_LABEL
    assert hint(SPREAD_POD, old, new, event=event) is expected


def test_pod_topology_spread_defaulted_constraints_queue_conservatively() -> None:
    args = {
        "defaulting_type": "List",
        "default_constraints": [{"maxSkew": 1, "topologyKey": "zone", "whenUnsatisfiable": "DoNotSchedule"}],
    }
    plain = pod_info(make_pod("d", uid="d", labels={"app": "x"}))
    assert hint(plain, None, _web({"anything": "1"}), event=POD_ADD, args=args) is QUEUE
    assert hint(plain, None, make_node("n"), event=NODE_ADD, args=args) is QUEUE_SKIP
