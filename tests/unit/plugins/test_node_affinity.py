"""NodeAffinity: PreFilter skip/node-name sets, Filter verdicts and reasons, addedAffinity, scoring (§2.6)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from kopf_scheduler.api.args import NodeAffinityArgs
from kopf_scheduler.framework import (
    QUEUE,
    QUEUE_SKIP,
    ActionType,
    ClusterEvent,
    Code,
    CycleState,
    EventResource,
    QueueingHint,
    object_labels,
)
from kopf_scheduler.plugins.node_affinity import (
    ERR_REASON_CONFLICT,
    ERR_REASON_ENFORCED,
    ERR_REASON_POD,
    NodeAffinity,
)
from kopf_scheduler.state.node_affinity import (
    NodeSelector,
    is_label_value,
    is_qualified_name,
    parse_go_int64,
    required_node_affinity_mask,
)
from kopf_scheduler.state.pod_info import PodInfo
from tests.unit.factories import FakeHandle, hint_for, make_cache, make_node, make_pod, pod_info, slots

#: Node name → extra labels; every test cluster is these nodes, in this order.
NODES: dict[str, dict[str, str]] = {
    "n1": {"zone": "a", "disk": "ssd", "gen": "5"},
    "n2": {"zone": "b", "disk": "hdd", "gen": "10"},
    "n3": {"zone": "c", "gen": "x5"},
    "n4": {"gen": "9007199254740993"},  # 2**53 + 1: a float would round it to 2**53
    "n5": {"gen": "1_0"},  # a valid label value, but not a Go integer
}
NAMES = list(NODES)


def expr(key: str, operator: str, *values: str) -> dict[str, Any]:
    return {"key": key, "operator": operator, "values": list(values)}


def term(*expressions: dict[str, Any], fields: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    body: dict[str, Any] = {}
    if expressions:
        body["matchExpressions"] = list(expressions)
    if fields:
        body["matchFields"] = fields
    return body


def name_field(operator: str, *names: str) -> dict[str, Any]:
    return {"key": "metadata.name", "operator": operator, "values": list(names)}


def required(*terms: dict[str, Any]) -> dict[str, Any]:
    return {"nodeSelectorTerms": list(terms)}


def pod_with(
    *,
    node_selector: dict[str, str] | None = None,
    required_terms: list[dict[str, Any]] | None = None,
    preferred: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    spec: dict[str, Any] = {}
    if node_selector is not None:
        spec["nodeSelector"] = node_selector
    node_affinity: dict[str, Any] = {}
    if required_terms is not None:
        node_affinity["requiredDuringSchedulingIgnoredDuringExecution"] = required(*required_terms)
    if preferred is not None:
        node_affinity["preferredDuringSchedulingIgnoredDuringExecution"] = preferred
    if node_affinity:
        spec["affinity"] = {"nodeAffinity": node_affinity}
    return make_pod(spec=spec)


def setup(added: dict[str, Any] | None = None) -> tuple[NodeAffinity, Any, np.ndarray]:
    cache = make_cache([make_node(name, labels=labels) for name, labels in NODES.items()])
    snapshot = cache.snapshot()
    args = NodeAffinityArgs(added_affinity=added) if added is not None else None
    return NodeAffinity(handle=FakeHandle(cache), args=args), snapshot, slots(snapshot, NAMES)


def filter_verdicts(pod_obj: dict[str, Any], added: dict[str, Any] | None = None) -> dict[str, str]:
    """Node name → "" (passes) or the rejection reason; PreFilter must not Skip or reject."""
    plugin, snapshot, nodes = setup(added)
    pod = pod_info(pod_obj)
    state = CycleState()
    _, status = plugin.pre_filter(state, pod, snapshot)
    assert status.is_success, status
    result = plugin.filter(state, pod, nodes, snapshot)
    verdicts = dict.fromkeys(NAMES, "")
    if result is not None:
        for position in np.flatnonzero(result.rejected):
            found = result.status_at(int(position))
            assert found.code is Code.UNSCHEDULABLE_AND_UNRESOLVABLE
            (verdicts[NAMES[position]],) = found.reasons
    return verdicts


def passing(pod_obj: dict[str, Any], added: dict[str, Any] | None = None) -> list[str]:
    return [name for name, reason in filter_verdicts(pod_obj, added).items() if not reason]


# -- Filter: the pod's own nodeSelector and required terms ----------------------------------------------
@pytest.mark.parametrize(
    ("pod_obj", "expected"),
    [
        pytest.param(pod_with(node_selector={"zone": "a"}), ["n1"], id="node-selector"),
        pytest.param(pod_with(node_selector={"zone": "a", "disk": "hdd"}), [], id="node-selector-all-pairs"),
        pytest.param(pod_with(node_selector={"missing": ""}), [], id="node-selector-absent-key"),
        pytest.param(pod_with(node_selector={"zone": "z"}), [], id="node-selector-unknown-value"),
        pytest.param(pod_with(required_terms=[term(expr("zone", "In", "a", "b"))]), ["n1", "n2"], id="in"),
        pytest.param(
            pod_with(required_terms=[term(expr("zone", "NotIn", "a"))]), ["n2", "n3", "n4", "n5"], id="notin-absent"
        ),
        pytest.param(pod_with(required_terms=[term(expr("disk", "Exists"))]), ["n1", "n2"], id="exists"),
        pytest.param(
            pod_with(required_terms=[term(expr("disk", "DoesNotExist"))]), ["n3", "n4", "n5"], id="does-not-exist"
        ),
        pytest.param(pod_with(required_terms=[term(expr("gen", "Gt", "6"))]), ["n2", "n4"], id="gt-integers"),
        pytest.param(pod_with(required_terms=[term(expr("gen", "Lt", "6"))]), ["n1"], id="lt-skips-non-integers"),
        pytest.param(
            pod_with(required_terms=[term(expr("gen", "Gt", "9007199254740992"))]), ["n4"], id="gt-exact-int64"
        ),
        pytest.param(
            pod_with(required_terms=[term(expr("gen", "Lt", "+11"))]), [], id="signed-value-is-not-a-label-value"
        ),
        pytest.param(pod_with(required_terms=[term(expr("gen", "Lt", "011"))]), ["n1", "n2"], id="lt-leading-zero"),
        pytest.param(
            pod_with(required_terms=[term(expr("zone", "In", "a")), term(expr("zone", "In", "c"))]),
            ["n1", "n3"],
            id="terms-ored",
        ),
        pytest.param(
            pod_with(required_terms=[term(expr("zone", "In", "a", "b"), expr("disk", "In", "hdd"))]),
            ["n2"],
            id="expressions-anded",
        ),
        pytest.param(
            pod_with(node_selector={"disk": "ssd"}, required_terms=[term(expr("zone", "In", "b"))]),
            [],
            id="selector-and-affinity-anded",
        ),
        pytest.param(pod_with(required_terms=[{}]), [], id="empty-term-matches-nothing"),
        pytest.param(pod_with(required_terms=[]), [], id="no-terms-matches-nothing"),
        pytest.param(
            pod_with(required_terms=[{}, term(expr("zone", "In", "b"))]), ["n2"], id="empty-term-skipped-among-others"
        ),
        pytest.param(
            pod_with(required_terms=[term(expr("zone", "In")), term(expr("zone", "In", "b"))]),
            ["n2"],
            id="in-without-values-term-matches-nothing",
        ),
        pytest.param(
            pod_with(required_terms=[term(expr("zone", "In", "a b")), term(expr("zone", "In", "c"))]),
            ["n3"],
            id="invalid-label-value-term-matches-nothing",
        ),
        pytest.param(
            pod_with(required_terms=[term(expr("zone", "In", "a"), expr("gen", "Gt", "abc"))]),
            [],
            id="gt-non-integer-value-poisons-term",
        ),
        pytest.param(
            pod_with(required_terms=[term(expr("gen", "Gt", "1", "2"))]), [], id="gt-two-values-matches-nothing"
        ),
        pytest.param(
            pod_with(required_terms=[term(expr("disk", "Exists", "ssd"))]), [], id="exists-with-values-matches-nothing"
        ),
        pytest.param(pod_with(required_terms=[term(expr("zone", "Like", "a"))]), [], id="unknown-operator"),
        pytest.param(pod_with(required_terms=[term(expr("bad key!", "Exists"))]), [], id="invalid-key"),
        pytest.param(pod_with(required_terms=[term(fields=[name_field("In", "n2")])]), ["n2"], id="field-in"),
        pytest.param(
            pod_with(required_terms=[term(fields=[name_field("NotIn", "n2")])]),
            ["n1", "n3", "n4", "n5"],
            id="field-notin",
        ),
        pytest.param(
            pod_with(required_terms=[term(fields=[name_field("In", "n1", "n2")])]),
            [],
            id="field-in-needs-exactly-one-value",
        ),
        pytest.param(pod_with(required_terms=[term(fields=[name_field("Exists")])]), [], id="field-exists-unsupported"),
        pytest.param(
            pod_with(required_terms=[term(expr("zone", "In", "a", "b"), fields=[name_field("In", "n2")])]),
            ["n2"],
            id="fields-and-expressions-anded",
        ),
    ],
)
def test_filter_pod_affinity(pod_obj: dict[str, Any], expected: list[str]) -> None:
    verdicts = filter_verdicts(pod_obj)
    assert [name for name, reason in verdicts.items() if not reason] == expected
    assert {reason for reason in verdicts.values() if reason} <= {ERR_REASON_POD}


# -- Filter: addedAffinity -------------------------------------------------------------------------------
ADDED_ZONE_AB = {"requiredDuringSchedulingIgnoredDuringExecution": required(term(expr("zone", "In", "a", "b")))}


def test_added_affinity_reason_first() -> None:
    verdicts = filter_verdicts(pod_with(node_selector={"disk": "ssd"}), ADDED_ZONE_AB)
    assert verdicts == {
        "n1": "",
        "n2": ERR_REASON_POD,  # passes the enforced selector, fails the pod's
        "n3": ERR_REASON_ENFORCED,  # fails both: the enforced reason wins
        "n4": ERR_REASON_ENFORCED,
        "n5": ERR_REASON_ENFORCED,
    }


def test_added_affinity_applies_to_pods_without_affinity() -> None:
    plugin, snapshot, _ = setup(ADDED_ZONE_AB)
    _, status = plugin.pre_filter(CycleState(), pod_info(make_pod()), snapshot)
    assert status.is_success  # no Skip: the enforced selector must be checked
    assert passing(make_pod(), ADDED_ZONE_AB) == ["n1", "n2"]


def test_added_affinity_with_only_preferred_terms_keeps_prefilter_skip() -> None:
    plugin, snapshot, _ = setup({"preferredDuringSchedulingIgnoredDuringExecution": []})
    _, status = plugin.pre_filter(CycleState(), pod_info(make_pod()), snapshot)
    assert status.is_skip


@pytest.mark.parametrize(
    "added",
    [
        pytest.param({"requiredDuringSchedulingIgnoredDuringExecution": required(term(expr("zone", "In")))}, id="req"),
        pytest.param(
            {
                "preferredDuringSchedulingIgnoredDuringExecution": [
                    {"weight": 1, "preference": term(expr("gen", "Gt", "x"))}
                ]
            },
            id="preferred",
        ),
    ],
)
def test_invalid_added_affinity_fails_construction(added: dict[str, Any]) -> None:
    # The args model refuses it already (upstream validates addedAffinity at config load), field path first.
    with pytest.raises(ValueError, match=r"addedAffinity\.\w+DuringExecution.*(can't be empty|must be an integer)"):
        setup(added)


# -- PreFilter ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "pod_obj",
    [
        pytest.param(make_pod(), id="nothing"),
        pytest.param(pod_with(node_selector={}), id="empty-node-selector"),
        pytest.param(pod_with(preferred=[{"weight": 1, "preference": term(expr("zone", "In", "a"))}]), id="only-pref"),
        pytest.param(make_pod(spec={"affinity": {"nodeAffinity": {}}}), id="empty-node-affinity"),
    ],
)
def test_pre_filter_skip(pod_obj: dict[str, Any]) -> None:
    plugin, snapshot, _ = setup()
    result, status = plugin.pre_filter(CycleState(), pod_info(pod_obj), snapshot)
    assert result is None
    assert status.is_skip


@pytest.mark.parametrize(
    ("terms", "names", "code"),
    [
        pytest.param([term(expr("zone", "In", "a"))], None, Code.SUCCESS, id="no-fields"),
        pytest.param([term(fields=[name_field("In", "n1")])], {"n1"}, Code.SUCCESS, id="one-name"),
        pytest.param(
            [term(fields=[name_field("In", "n1")]), term(fields=[name_field("In", "n2")])],
            {"n1", "n2"},
            Code.SUCCESS,
            id="union-over-terms",
        ),
        pytest.param(
            [term(fields=[name_field("In", "n1", "n2"), name_field("In", "n2", "n3")])],
            {"n2"},
            Code.SUCCESS,
            id="intersection-within-term",
        ),
        pytest.param(
            [term(fields=[name_field("In", "n1")]), term(expr("zone", "In", "b"))],
            None,
            Code.SUCCESS,
            id="one-unpinned-term-means-all",
        ),
        pytest.param([term(fields=[name_field("NotIn", "n1")])], None, Code.SUCCESS, id="notin-does-not-pin"),
        pytest.param(
            [term(fields=[name_field("In", "n1"), name_field("In", "n2")])],
            None,
            Code.UNSCHEDULABLE_AND_UNRESOLVABLE,
            id="conflict",
        ),
        pytest.param(
            [term(expr("zone", "In", "a"), fields=[name_field("In", "n1"), name_field("NotIn", "n1")])],
            {"n1"},
            Code.SUCCESS,
            id="only-in-fields-pin",
        ),
        pytest.param(
            [term(fields=[name_field("In", "ghost")])], {"ghost"}, Code.SUCCESS, id="unknown-name-still-returned"
        ),
    ],
)
def test_pre_filter_node_names(terms: list[dict[str, Any]], names: set[str] | None, code: Code) -> None:
    plugin, snapshot, _ = setup()
    result, status = plugin.pre_filter(CycleState(), pod_info(pod_with(required_terms=terms)), snapshot)
    assert status.code is code
    if code is Code.UNSCHEDULABLE_AND_UNRESOLVABLE:
        assert status.reasons == (ERR_REASON_CONFLICT,)
        assert result is None
    elif names is None:
        assert result is None or result.all_nodes
    else:
        assert result is not None
        assert result.node_names == frozenset(names)


def test_filter_without_pre_filter_state_computes_it() -> None:
    plugin, snapshot, nodes = setup()
    result = plugin.filter(CycleState(), pod_info(pod_with(node_selector={"zone": "b"})), nodes, snapshot)
    assert result is not None
    assert result.rejected.tolist() == [True, False, True, True, True]


def test_reason_strings() -> None:
    assert ERR_REASON_POD == "node(s) didn't match Pod's node affinity/selector"
    assert ERR_REASON_ENFORCED == "node(s) didn't match scheduler-enforced node affinity"
    assert ERR_REASON_CONFLICT == "pod affinity terms conflict"


# -- Score -------------------------------------------------------------------------------------------------
def pref(weight: int, *expressions: dict[str, Any], fields: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    return {"weight": weight, "preference": term(*expressions, fields=fields)}


def run_score(pod_obj: dict[str, Any], added: dict[str, Any] | None = None) -> tuple[list[int], list[int]] | None:
    """(raw, normalised) scores in NAMES order, or None when PreScore skips."""
    plugin, snapshot, nodes = setup(added)
    pod = pod_info(pod_obj)
    state = CycleState()
    status = plugin.pre_score(state, pod, nodes, snapshot)
    if status.is_skip:
        return None
    assert status.is_success, status
    raw = plugin.score(state, pod, nodes, snapshot)
    return raw.tolist(), plugin.normalize_score(state, pod, nodes, raw).tolist()


@pytest.mark.parametrize(
    ("pod_obj", "added", "expected"),
    [
        pytest.param(make_pod(), None, None, id="skip-nothing-to-score"),
        pytest.param(pod_with(required_terms=[term(expr("zone", "In", "a"))]), None, None, id="skip-required-only"),
        pytest.param(pod_with(preferred=[]), None, None, id="skip-empty-preferred"),
        pytest.param(
            pod_with(preferred=[pref(10, expr("zone", "In", "a")), pref(30, expr("disk", "Exists"))]),
            None,
            ([40, 30, 0, 0, 0], [100, 75, 0, 0, 0]),
            id="weights-summed",
        ),
        pytest.param(
            pod_with(preferred=[pref(0, expr("zone", "In", "a")), pref(5, expr("zone", "In", "b"))]),
            None,
            ([0, 5, 0, 0, 0], [0, 100, 0, 0, 0]),
            id="weight-zero-term-ignored",
        ),
        pytest.param(
            pod_with(preferred=[pref(7), pref(3, expr("zone", "In", "c"))]),
            None,
            ([0, 0, 3, 0, 0], [0, 0, 100, 0, 0]),
            id="empty-preference-ignored",
        ),
        pytest.param(
            pod_with(preferred=[pref(9, expr("zone", "In", "nowhere"))]),
            None,
            ([0, 0, 0, 0, 0], [0, 0, 0, 0, 0]),
            id="all-zero-stays-zero",
        ),
        pytest.param(
            pod_with(preferred=[pref(2, fields=[name_field("In", "n5")]), pref(1, expr("gen", "Gt", "4"))]),
            None,
            ([1, 1, 0, 1, 2], [50, 50, 0, 50, 100]),
            id="fields-and-gt",
        ),
        pytest.param(
            make_pod(),
            {"preferredDuringSchedulingIgnoredDuringExecution": [pref(4, expr("zone", "In", "b"))]},
            ([0, 4, 0, 0, 0], [0, 100, 0, 0, 0]),
            id="added-preferred-only",
        ),
        pytest.param(
            pod_with(preferred=[pref(1, expr("zone", "In", "a")), pref(1, expr("zone", "In", "b"))]),
            {"preferredDuringSchedulingIgnoredDuringExecution": [pref(2, expr("zone", "In", "b"))]},
            ([1, 3, 0, 0, 0], [33, 100, 0, 0, 0]),
            id="added-plus-pod",
        ),
    ],
)
def test_score(
    pod_obj: dict[str, Any], added: dict[str, Any] | None, expected: tuple[list[int], list[int]] | None
) -> None:
    assert run_score(pod_obj, added) == expected


def test_pre_score_error_on_unparsable_pod_preference() -> None:
    plugin, snapshot, nodes = setup()
    pod = pod_info(pod_with(preferred=[pref(1, expr("gen", "Lt", "ten"))]))
    status = plugin.pre_score(CycleState(), pod, nodes, snapshot)
    assert status.code is Code.ERROR


def test_score_without_pre_score_falls_back() -> None:
    plugin, snapshot, nodes = setup()
    pod = pod_info(pod_with(preferred=[pref(6, expr("disk", "In", "hdd"))]))
    assert plugin.score(CycleState(), pod, nodes, snapshot).tolist() == [0, 6, 0, 0, 0]


# -- shared state helpers ----------------------------------------------------------------------------------
def test_required_node_affinity_mask_ignores_added_affinity_and_preferred() -> None:
    _, snapshot, nodes = setup()
    pod = pod_info(
        pod_with(
            node_selector={"disk": "hdd"},
            required_terms=[term(expr("gen", "Gt", "1"))],
            preferred=[pref(1, expr("zone", "In", "a"))],
        )
    )
    assert required_node_affinity_mask(snapshot.table, nodes, pod).tolist() == [False, True, False, False, False]
    assert required_node_affinity_mask(snapshot.table, nodes, pod_info(make_pod())).all()


@pytest.mark.parametrize(
    ("text", "value"),
    [("0", 0), ("+5", 5), ("-5", -5), ("1_0", None), (" 1", None), ("1\n", None), ("9223372036854775808", None)],
)
def test_parse_go_int64(text: str, value: int | None) -> None:
    assert parse_go_int64(text) == value


@pytest.mark.parametrize(
    ("key", "valid"),
    [
        ("zone", True),
        ("topology.kubernetes.io/zone", True),
        ("a/b/c", False),
        ("/zone", False),
        ("Upper.Case/zone", False),
        ("x" * 63, True),
        ("x" * 64, False),
        ("-bad", False),
        ("zone\n", False),
    ],
)
def test_label_key_validation(key: str, valid: bool) -> None:
    assert is_qualified_name(key) is valid


@pytest.mark.parametrize(("value", "valid"), [("", True), ("a-b_c.d", True), ("a b", False), ("-a", False)])
def test_label_value_validation(value: str, valid: bool) -> None:
    assert is_label_value(value) is valid


def test_gt_verdicts_follow_label_values_added_later() -> None:
    # Gt/Lt verdicts are cached per interned label value; values interned after a first match must be judged too.
    cache = make_cache([make_node("a", labels={"gen": "3"}), make_node("b", labels={"gen": "7"})])
    pod = pod_info(pod_with(required_terms=[term(expr("gen", "Gt", "5"))]))
    snapshot = cache.snapshot()
    assert required_node_affinity_mask(snapshot.table, slots(snapshot, ["a", "b"]), pod).tolist() == [False, True]
    cache.add_or_update_node(make_node("c", labels={"gen": "12"}))
    cache.add_or_update_node(make_node("a", labels={"gen": "6"}))
    snapshot = cache.snapshot()
    mask = required_node_affinity_mask(snapshot.table, slots(snapshot, ["a", "b", "c"]), pod)
    assert mask.tolist() == [True, True, True]


# -- one-node matching (the hint's path) agrees with the vectorised mask ---------------------------------------
@pytest.mark.parametrize(
    "selector",
    [
        required(term(expr("zone", "In", "a", "b"))),
        required(term(expr("disk", "NotIn", "ssd"))),
        required(term(expr("disk", "Exists")), term(expr("zone", "DoesNotExist"))),
        required(term(expr("gen", "Gt", "6"))),
        required(term(expr("gen", "Lt", "9007199254740993"))),
        required(term(expr("gen", "Gt", "x"))),  # does not parse: the term matches nothing
        required(term(fields=[name_field("In", "n2")])),
        required(term(expr("zone", "Exists"), fields=[name_field("NotIn", "n2")])),
        required(term(fields=[{"key": "spec.unschedulable", "operator": "In", "values": [""]}])),
    ],
    ids=["in", "not-in", "or-terms", "gt", "lt-big", "bad-gt", "name-in", "label-and-name", "other-field"],
)
def test_one_node_matching_agrees_with_the_mask(selector: dict[str, Any]) -> None:
    _, snapshot, nodes = setup()
    parsed = NodeSelector.parse(selector)
    by_mask = parsed.mask(snapshot.table, nodes).tolist()
    one_by_one = [parsed.matches(object_labels(make_node(name, labels=labels)), name) for name, labels in NODES.items()]
    assert one_by_one == by_mask


# -- EnqueueExtensions: registrations and QueueingHints ----------------------------------------------------------
NODE_ADD = ClusterEvent(EventResource.NODE, ActionType.ADD)
NODE_LABEL = ClusterEvent(EventResource.NODE, ActionType.UPDATE_NODE_LABEL)


def hint(pod: PodInfo, old: Any, new: Any, *, event: ClusterEvent, args: dict[str, Any] | None = None) -> QueueingHint:
    """Run the hint NodeAffinity registered for ``event`` (exactly one registration matches)."""
    return hint_for(
        NodeAffinity(handle=FakeHandle(), args=NodeAffinityArgs.model_validate(args) if args else None), event
    )(pod, old, new)


def test_events_to_register() -> None:
    assert [r.event for r in NodeAffinity(handle=FakeHandle()).events_to_register()] == [
        ClusterEvent(EventResource.NODE, ActionType.ADD | ActionType.UPDATE_NODE_LABEL)
    ]


AFFINITY_POD = pod_info(
    make_pod(
        "a",
        spec={
            "nodeSelector": {"disk": "ssd"},
            "affinity": {
                "nodeAffinity": {
                    "requiredDuringSchedulingIgnoredDuringExecution": {
                        "nodeSelectorTerms": [
                            {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a", "b"]}]},
                            {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["special"]}]},
                        ]
                    }
                }
            },
        },
    )
)


@pytest.mark.parametrize(
    ("old", "new", "expected"),
    [
        (None, make_node("n", labels={"disk": "ssd", "zone": "a"}), QUEUE),
        (None, make_node("n", labels={"disk": "ssd", "zone": "c"}), QUEUE_SKIP),
        (None, make_node("n", labels={"zone": "a"}), QUEUE_SKIP),  # nodeSelector unmet
        (None, make_node("special", labels={"disk": "ssd"}), QUEUE),  # matchFields term
        (make_node("n", labels={"disk": "ssd"}), make_node("n", labels={"disk": "ssd", "zone": "b"}), QUEUE),
        (
            make_node("n", labels={"disk": "ssd", "zone": "a"}),
            make_node("n", labels={"disk": "ssd", "zone": "b"}),
            QUEUE_SKIP,
        ),
    ],
    ids=["add-match", "add-wrong-zone", "add-no-disk", "add-by-name", "label-now-matches", "matched-before"],
)
def test_node_affinity_node_hint(old: Any, new: Any, expected: QueueingHint) -> None:
    event = NODE_ADD if old is None else NODE_LABEL
    assert hint(AFFINITY_POD, old, new, event=event) is expected


def test_node_affinity_added_affinity_filters_nodes() -> None:
    args = {
        "added_affinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [{"matchExpressions": [{"key": "pool", "operator": "Exists"}]}]
            }
        }
    }
    plain = pod_info(make_pod("plain"))
    assert hint(plain, None, make_node("n"), event=NODE_ADD, args=args) is QUEUE_SKIP
    assert hint(plain, None, make_node("n", labels={"pool": "x"}), event=NODE_ADD, args=args) is QUEUE


def test_node_affinity_gt_uses_integers() -> None:
    pod = pod_info(
        make_pod(
            "g",
            spec={
                "affinity": {
                    "nodeAffinity": {
                        "requiredDuringSchedulingIgnoredDuringExecution": {
                            "nodeSelectorTerms": [
                                {"matchExpressions": [{"key": "gen", "operator": "Gt", "values": ["3"]}]}
                            ]
                        }
                    }
                }
            },
        )
    )
    assert hint(pod, None, make_node("n", labels={"gen": "4"}), event=NODE_ADD) is QUEUE
    assert hint(pod, None, make_node("n", labels={"gen": "3"}), event=NODE_ADD) is QUEUE_SKIP
    assert hint(pod, None, make_node("n", labels={"gen": "4.5"}), event=NODE_ADD) is QUEUE_SKIP
