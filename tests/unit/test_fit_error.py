"""FailedScheduling text: byte-identical to upstream's ``FitError.Error()`` (reference §4), end to end."""

from __future__ import annotations

from typing import Any, ClassVar

import pytest

from kopf_scheduler.algorithm import Diagnosis, FitError, run_post_filter, schedule_pod
from kopf_scheduler.framework import (
    Code,
    CycleState,
    ExtensionPoint,
    PostFilterPlugin,
    PostFilterResult,
    Status,
)
from kopf_scheduler.plugins.node_name import NodeName
from kopf_scheduler.plugins.node_unschedulable import NodeUnschedulable
from kopf_scheduler.state.pod_info import PodInfo
from tests.unit.factories import make_cache, make_node, make_pod, pod_info
from tests.unit.test_runtime import _reset_calls, build, node_filter, prefilter  # noqa: F401

E = ExtensionPoint
U = Status.unschedulable

AFFINITY = "node(s) didn't match Pod's node affinity/selector"
NOT_HELPFUL = "Preemption is not helpful for scheduling"
NO_VICTIMS = "No preemption victims found for incoming pod"


def post_filter(plugin_name: str, message: str, code: Code = Code.UNSCHEDULABLE) -> type[PostFilterPlugin]:
    class Fake(PostFilterPlugin):
        name: ClassVar[str] = plugin_name

        def post_filter(self, state: CycleState, pod: PodInfo, filtered: Any) -> tuple[PostFilterResult | None, Status]:
            return None, Status(code, (message,))

    return Fake


def fail(
    nodes: int,
    plugins: list[type[Any]],
    points: dict[ExtensionPoint, tuple[str, ...]],
    *,
    pod: dict[str, Any] | None = None,
    node_kwargs: dict[str, dict[str, Any]] | None = None,
) -> FitError:
    """Schedule a pod that fits nowhere, run PostFilter, and return the FitError."""
    names = [f"n{i}" for i in range(nodes)]
    cache = make_cache([make_node(name, **(node_kwargs or {}).get(name, {})) for name in names])
    framework = build(plugins, points, cache=cache)
    state = CycleState()
    podinfo = pod_info(pod or make_pod())
    with pytest.raises(FitError) as info:
        schedule_pod(framework, state, podinfo, cache.snapshot())
    run_post_filter(framework, state, podinfo, info.value)
    return info.value


def by_node(verdicts: dict[str, Status], name: str = "Fake") -> type[Any]:
    return node_filter(name, verdicts)


def test_reference_example_133() -> None:
    error = fail(
        3,
        [
            by_node({"n0": U(AFFINITY, unresolvable=True), "n2": U(AFFINITY, unresolvable=True)}, "NodeAffinity"),
            by_node({"n1": U("Insufficient cpu")}, "NodeResourcesFit"),
            post_filter("DefaultPreemption", f"preemption: 0/3 nodes are available: 1 {NO_VICTIMS}, 2 {NOT_HELPFUL}."),
        ],
        {E.FILTER: ("NodeAffinity", "NodeResourcesFit"), E.POST_FILTER: ("DefaultPreemption",)},
    )
    assert error.message == (
        "0/3 nodes are available: 1 Insufficient cpu, 2 node(s) didn't match Pod's node affinity/selector. "
        "preemption: 0/3 nodes are available: 1 No preemption victims found for incoming pod, "
        "2 Preemption is not helpful for scheduling."
    )
    assert str(error) == error.message
    assert error.diagnosis.all_unschedulable_plugins() == {"NodeAffinity", "NodeResourcesFit"}


def test_reference_example_134_two_post_filter_plugins_joined() -> None:
    error = fail(
        2,
        [
            by_node({"n0": U("Insufficient cpu"), "n1": U("Insufficient cpu")}, "NodeResourcesFit"),
            post_filter("DynamicResources", "no new claims to deallocate"),
            post_filter("DefaultPreemption", f"preemption: 0/2 nodes are available: 2 {NO_VICTIMS}."),
        ],
        {E.FILTER: ("NodeResourcesFit",), E.POST_FILTER: ("DynamicResources", "DefaultPreemption")},
    )
    assert error.message == (
        "0/2 nodes are available: 2 Insufficient cpu. no new claims to deallocate, "
        "preemption: 0/2 nodes are available: 2 No preemption victims found for incoming pod."
    )


def test_multi_reason_nodes_count_each_reason() -> None:
    cpu_mem = U("Insufficient cpu", "Insufficient memory")
    error = fail(
        4,
        [by_node({"n0": cpu_mem, "n1": cpu_mem, "n2": U("Insufficient cpu"), "n3": U("Too many pods")})],
        {E.FILTER: ("Fake",)},
    )
    assert error.message == "0/4 nodes are available: 1 Too many pods, 2 Insufficient memory, 3 Insufficient cpu."


def test_histogram_is_a_plain_string_sort() -> None:
    # 10 nodes with reason "b", 2 with "a": "10 b..." sorts before "2 a..." because '1' < '2'.
    verdicts = {f"n{i}": U("node(s) b") for i in range(10)} | {"n10": U("node(s) a"), "n11": U("node(s) a")}
    error = fail(12, [by_node(verdicts)], {E.FILTER: ("Fake",)})
    assert error.message == "0/12 nodes are available: 10 node(s) b, 2 node(s) a."


def test_first_failing_plugin_only_with_real_plugins() -> None:
    # The cordoned node also has the wrong name: only NodeUnschedulable (first in order) counts for it.
    error = fail(
        3,
        [NodeUnschedulable, NodeName],
        {E.FILTER: ("NodeUnschedulable", "NodeName")},
        pod=make_pod(spec={"nodeName": "elsewhere"}),
        node_kwargs={"n1": {"unschedulable": True}},
    )
    assert error.message == (
        "0/3 nodes are available: 1 node(s) were unschedulable, 2 node(s) didn't match the requested node name."
    )


def test_pre_filter_rejection_uses_the_short_form() -> None:
    error = fail(
        3,
        [
            prefilter("VolumeBinding", U("pod has unbound immediate PersistentVolumeClaims", unresolvable=True)),
            by_node({"n0": U("never reached")}),
            post_filter("DefaultPreemption", f"preemption: 0/3 nodes are available: 3 {NOT_HELPFUL}."),
        ],
        {E.PRE_FILTER: ("VolumeBinding",), E.FILTER: ("Fake",), E.POST_FILTER: ("DefaultPreemption",)},
    )
    assert error.message == (
        "0/3 nodes are available: pod has unbound immediate PersistentVolumeClaims. "
        "preemption: 0/3 nodes are available: 3 Preemption is not helpful for scheduling."
    )
    assert error.diagnosis.absent_nodes_status.plugin == "VolumeBinding"
    assert error.diagnosis.node_to_status.status_of("n1").reasons == (
        "pod has unbound immediate PersistentVolumeClaims",
    )
    assert error.diagnosis.unschedulable_plugins == {"VolumeBinding"}


def test_pre_filter_unschedulable_joins_its_reasons() -> None:
    error = fail(2, [prefilter("P", U("first", "second"))], {E.PRE_FILTER: ("P",)})
    assert error.message == "0/2 nodes are available: first, second."


@pytest.mark.parametrize(
    ("restrictions", "message"),
    [
        pytest.param(
            {"NodeAffinity": []}, "0/3 nodes are available: node(s) didn't satisfy plugin NodeAffinity.", id="one"
        ),
        pytest.param(
            {"NodeAffinity": ["n0"], "InterPodAffinity": ["n1"]},
            "0/3 nodes are available: node(s) didn't satisfy plugin(s) [InterPodAffinity NodeAffinity] simultaneously.",
            id="two",
        ),
    ],
)
def test_empty_pre_filter_intersection(restrictions: dict[str, list[str]], message: str) -> None:
    plugins = [prefilter(name, nodes=nodes) for name, nodes in restrictions.items()]
    error = fail(3, plugins, {E.PRE_FILTER: tuple(restrictions)})
    assert error.message == message


def test_pre_filter_result_exclusion_counts_absent_nodes() -> None:
    error = fail(
        5,
        [prefilter("NodeAffinity", nodes=["n0", "n3"]), by_node({f"n{i}": U("Insufficient cpu") for i in range(5)})],
        {E.PRE_FILTER: ("NodeAffinity",), E.FILTER: ("Fake",)},
    )
    assert error.message == (
        "0/5 nodes are available: 2 Insufficient cpu, 3 node(s) didn't satisfy plugin(s) [NodeAffinity]."
    )
    view = error.diagnosis.node_to_status
    assert sorted(view) == ["n0", "n3"]
    assert view.status_of("n1").code is Code.UNSCHEDULABLE_AND_UNRESOLVABLE


def test_pre_filter_result_naming_missing_nodes() -> None:
    # "ghost" is not in the snapshot: only n2 is searched; the other 3 real nodes are absent.
    error = fail(
        4,
        [prefilter("A", nodes=["n2", "ghost"]), prefilter("B", nodes=["n2", "n3"]), by_node({"n2": U("no room")})],
        {E.PRE_FILTER: ("A", "B"), E.FILTER: ("Fake",)},
    )
    assert error.message == "0/4 nodes are available: 1 no room, 3 node(s) didn't satisfy plugin(s) [A B]."


def test_statuses_without_reasons_add_nothing() -> None:
    error = fail(2, [by_node({"n0": Status(Code.UNSCHEDULABLE), "n1": U("x")})], {E.FILTER: ("Fake",)})
    assert error.message == "0/2 nodes are available: 1 x."


def test_no_post_filter_plugins_no_suffix() -> None:
    error = fail(1, [by_node({"n0": U("x")})], {E.FILTER: ("Fake",)})
    assert error.message == "0/1 nodes are available: 1 x."
    assert error.status.code is Code.UNSCHEDULABLE
    assert error.status.message == error.message


def test_post_filter_success_adds_nothing() -> None:
    class Nominates(PostFilterPlugin):
        name: ClassVar[str] = "Nominates"

        def post_filter(self, state: CycleState, pod: PodInfo, filtered: Any) -> tuple[PostFilterResult | None, Status]:
            assert filtered.status_of("n0").reasons == ("Insufficient cpu",)
            return PostFilterResult("n0"), Status()

    error = fail(
        2,
        [by_node({"n0": U("Insufficient cpu"), "n1": U("Insufficient cpu")}), Nominates],
        {E.FILTER: ("Fake",), E.POST_FILTER: ("Nominates",)},
    )
    assert error.message == "0/2 nodes are available: 2 Insufficient cpu."


def test_message_is_built_from_the_diagnosis() -> None:
    diagnosis = Diagnosis(["n0", "n1", "n2"])
    diagnosis.statuses.set(0, U("a"))
    diagnosis.statuses.set(1, U("b", "a"))
    diagnosis.post_filter_msg = "preemption: not eligible due to preemptionPolicy=Never."
    error = FitError(pod_info(make_pod()), 3, diagnosis)
    assert error.message == (
        "0/3 nodes are available: 1 b, 2 a. preemption: not eligible due to preemptionPolicy=Never."
    )
