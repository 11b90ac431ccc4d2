"""Filter verdicts kept as the plugins' arrays, the PostFilter view of them by node name, shared Skips."""

from __future__ import annotations

import numpy as np

from kopf_scheduler.framework import Code, Status
from kopf_scheduler.framework.verdicts import FilterStatuses, NodeToStatusMap
from tests.unit.factories import make_cache, make_node, slots

NODES = ["n0", "n1", "n2", "n3", "n4"]
U = Status.unschedulable


def test_filter_statuses_truncate_and_overlap() -> None:
    statuses = FilterStatuses()
    a, b = U("a"), U("b")
    statuses.add("A", np.asarray([10, 11, 12]), np.asarray([0, 3, 5]), (a, b), np.asarray([0, 1, 0]))
    assert len(statuses) == 3
    statuses.truncate(4)
    assert len(statuses) == 2
    assert statuses.as_dict() == {10: a, 11: b}
    assert statuses.reason_counts() == {"a": 1, "b": 1}
    statuses.truncate(1)
    assert statuses.as_dict() == {10: a}
    assert statuses.plugins() == {"A"}
    # A later verdict for the same node replaces the earlier one, as in upstream's map.
    statuses.set(10, b)
    assert len(statuses) == 1
    assert statuses.get(10) == b
    assert statuses.reason_counts() == {"b": 1}


def test_extend_appends_the_other_verdicts_under_the_target_limit() -> None:
    a, b = U("a"), U("b")
    source = FilterStatuses()
    source.add("A", np.asarray([1, 2]), np.asarray([0, 7]), (a,), None)
    source.truncate(1)
    target = FilterStatuses()
    target.add("B", np.asarray([3]), np.asarray([2]), (b,), None)
    target.extend(source)
    # The source's cut-off is its own: both of its entries arrive, and the target (without one) counts them all.
    assert target.as_dict() == {3: b, 1: a, 2: a}
    assert target.counts_by_plugin() == {"B": 1, "A": 2}
    target.truncate(5)
    assert target.as_dict() == {3: b, 1: a}


def test_node_to_status_map_view() -> None:
    cache = make_cache([make_node(name) for name in NODES])
    snapshot = cache.snapshot()
    statuses = FilterStatuses()
    statuses.add("P", slots(snapshot, ["n1", "n3"]), np.asarray([1, 3]), (U("x").with_plugin("P"),), None)
    view = NodeToStatusMap(statuses, snapshot.table.names, U("absent", unresolvable=True))
    assert sorted(view) == ["n1", "n3"]
    assert len(view) == 2
    assert view["n1"].reasons == ("x",)
    assert view.status_of("n0").reasons == ("absent",)
    assert view.nodes_with_code(Code.UNSCHEDULABLE_AND_UNRESOLVABLE, NODES) == ["n0", "n2", "n4"]
    assert view.nodes_with_code(Code.UNSCHEDULABLE, NODES) == ["n1", "n3"]


def test_a_plugins_skip_is_one_shared_verdict() -> None:
    first = Status.skip(plugin="A")
    assert Status.skip(plugin="A") is first
    assert (first.code, first.plugin, Status.skip(plugin="B").plugin) == (Code.SKIP, "A", "B")
    assert Status.skip().plugin == ""
