"""The framework runtime with small fake plugins: construction errors, ordering and attribution rules."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable
from typing import Any, ClassVar

import numpy as np
import pytest
from pydantic import BaseModel

from kopf_scheduler.framework import (
    BindPlugin,
    Code,
    CycleState,
    ExtensionPoint,
    FilterPlugin,
    FilterResult,
    NodeFilterPlugin,
    PermitPlugin,
    PostBindPlugin,
    PostFilterPlugin,
    PostFilterResult,
    PreBindPlugin,
    PreEnqueuePlugin,
    PreFilterPlugin,
    PreFilterResult,
    PreScorePlugin,
    ReservePlugin,
    ScorePlugin,
    Status,
)
from kopf_scheduler.framework.profile import PluginRef, ResolvedProfile
from kopf_scheduler.framework.registry import Registry
from kopf_scheduler.framework.runtime import Framework, FrameworkError
from kopf_scheduler.framework.verdicts import FilterStatuses, NodeToStatusMap
from kopf_scheduler.plugins.default_binder import DefaultBinder
from kopf_scheduler.plugins.queue_sort import PrioritySort
from kopf_scheduler.state.cache import ClusterCache, NodeInfo, Snapshot
from kopf_scheduler.state.pod_info import PodInfo
from tests.unit.factories import FakeHandle, make_cache, make_node, make_pod, pod_info, slots

E = ExtensionPoint
NODES = ["n0", "n1", "n2", "n3", "n4"]

#: Every call a fake plugin receives: (plugin name, method, detail).
CALLS: list[tuple[str, str, Any]] = []


@pytest.fixture(autouse=True)
def _reset_calls() -> None:
    CALLS.clear()


def calls(method: str) -> list[tuple[str, Any]]:
    return [(name, detail) for name, m, detail in CALLS if m == method]


# -- fake plugins --------------------------------------------------------------------------------------
def prefilter(
    plugin_name: str, status: Status | None = None, nodes: Iterable[str] | None = None, *, raises: bool = False
) -> type[PreFilterPlugin]:
    status = status or Status()

    class Fake(PreFilterPlugin):
        name: ClassVar[str] = plugin_name

        def pre_filter(
            self, state: CycleState, pod: PodInfo, snapshot: Snapshot
        ) -> tuple[PreFilterResult | None, Status]:
            CALLS.append((self.name, "pre_filter", None))
            if raises:
                raise RuntimeError("kaboom")
            return (PreFilterResult(frozenset(nodes)) if nodes is not None else None), status

    return Fake


def node_filter(
    plugin_name: str,
    verdicts: dict[str, Status] | Callable[[str], Status | None],
    *,
    extra: type = FilterPlugin,
) -> type[FilterPlugin]:
    """A vectorised Filter rejecting nodes by name with the given statuses (a palette when several)."""

    def verdict(node: str) -> Status | None:
        return verdicts(node) if callable(verdicts) else verdicts.get(node)

    class Fake(extra):  # type: ignore[misc,valid-type]
        name: ClassVar[str] = plugin_name

        def filter(self, state: CycleState, pod: PodInfo, nodes: np.ndarray, snapshot: Snapshot) -> FilterResult | None:
            names = [snapshot.table.names[int(s)] for s in nodes]
            CALLS.append((self.name, "filter", names))
            palette: dict[Status, int] = {}
            rejected = np.zeros(len(nodes), dtype=bool)
            index = np.zeros(len(nodes), dtype=np.int64)
            for i, node in enumerate(names):
                status = verdict(str(node))
                if status is not None:
                    rejected[i] = True
                    index[i] = palette.setdefault(status, len(palette))
            if not palette:
                return None
            return FilterResult(rejected, tuple(palette), index if len(palette) > 1 else None)

    return Fake


def scorer(
    plugin_name: str,
    scores: dict[str, int],
    *,
    normalize: Callable[[np.ndarray], np.ndarray] | None = None,
    pre_score: Status | None = None,
) -> type[ScorePlugin]:
    bases: tuple[type, ...] = (ScorePlugin, PreScorePlugin) if pre_score is not None else (ScorePlugin,)

    class Fake(*bases):  # type: ignore[misc]
        name: ClassVar[str] = plugin_name
        has_normalize: ClassVar[bool] = normalize is not None

        def pre_score(self, state: CycleState, pod: PodInfo, nodes: np.ndarray, snapshot: Snapshot) -> Status:
            CALLS.append((self.name, "pre_score", len(nodes)))
            assert pre_score is not None
            return pre_score

        def score(self, state: CycleState, pod: PodInfo, nodes: np.ndarray, snapshot: Snapshot) -> np.ndarray:
            CALLS.append((self.name, "score", len(nodes)))
            return np.asarray([scores[str(snapshot.table.names[int(s)])] for s in nodes], dtype=np.int64)

        def normalize_score(self, state: CycleState, pod: PodInfo, nodes: np.ndarray, scores: np.ndarray) -> np.ndarray:
            CALLS.append((self.name, "normalize", scores.tolist()))
            assert normalize is not None
            return normalize(scores)

    return Fake


def lifecycle(plugin_name: str, **statuses: Any) -> type[Any]:
    """A plugin at Reserve, Permit, PreBind, Bind and PostBind returning the given statuses."""

    class Fake(ReservePlugin, PermitPlugin, PreBindPlugin, BindPlugin, PostBindPlugin):
        name: ClassVar[str] = plugin_name

        def reserve(self, state: CycleState, pod: PodInfo, node_name: str) -> Status:
            CALLS.append((self.name, "reserve", node_name))
            return statuses.get("reserve", Status())

        def unreserve(self, state: CycleState, pod: PodInfo, node_name: str) -> None:
            CALLS.append((self.name, "unreserve", node_name))
            if statuses.get("unreserve_raises"):
                raise RuntimeError("unreserve failed")

        def permit(self, state: CycleState, pod: PodInfo, node_name: str) -> tuple[Status, float]:
            CALLS.append((self.name, "permit", node_name))
            return statuses.get("permit", (Status(), 0.0))

        def pre_bind_pre_flight(self, state: CycleState, pod: PodInfo, node_name: str) -> Status:
            return statuses.get("pre_flight", Status())

        async def pre_bind(self, state: CycleState, pod: PodInfo, node_name: str) -> Status:
            CALLS.append((self.name, "pre_bind", node_name))
            return statuses.get("pre_bind", Status())

        async def bind(self, state: CycleState, pod: PodInfo, node_name: str) -> Status:
            CALLS.append((self.name, "bind", node_name))
            return statuses.get("bind", Status())

        def post_bind(self, state: CycleState, pod: PodInfo, node_name: str) -> None:
            CALLS.append((self.name, "post_bind", node_name))

    return Fake


BASE = {E.QUEUE_SORT: ("PrioritySort",), E.BIND: ("DefaultBinder",)}


def build(
    plugins: Iterable[type[Any]],
    points: dict[ExtensionPoint, tuple[str | tuple[str, int], ...]],
    *,
    cache: ClusterCache | None = None,
    args: dict[str, Any] | None = None,
    base: bool = True,
    **kwargs: Any,
) -> Framework:
    registry = Registry([PrioritySort, DefaultBinder, *plugins])
    merged = {**BASE, **points} if base else dict(points)
    refs = {
        point: tuple(PluginRef(*entry) if isinstance(entry, tuple) else PluginRef(entry) for entry in entries)
        for point, entries in merged.items()
    }
    profile = ResolvedProfile("test-scheduler", plugins=refs, plugin_args=args or {})
    return Framework(profile, registry, FakeHandle(cache or default_cache()), **kwargs)


def default_cache() -> ClusterCache:
    return make_cache([make_node(name) for name in NODES])


def run_filters(framework: Framework, nodes: list[str] = NODES, state: CycleState | None = None) -> Any:
    snapshot = framework.handle.snapshot()
    return framework.run_filter_plugins(state or CycleState(), pod_info(make_pod()), slots(snapshot, nodes), snapshot)


def names_of(framework: Framework, slot_array: np.ndarray) -> list[str]:
    table = framework.handle.snapshot().table
    return [str(table.names[int(s)]) for s in slot_array]


U = Status.unschedulable
UUR = Status(Code.UNSCHEDULABLE_AND_UNRESOLVABLE, ("uur",))


# -- construction --------------------------------------------------------------------------------------
def test_plugin_init_failure_names_the_plugin() -> None:
    class Broken(FilterPlugin):
        name: ClassVar[str] = "Broken"

        def __init__(self, **kwargs: Any) -> None:
            raise ValueError("bad configuration")

    with pytest.raises(FrameworkError, match=r"^initializing plugin 'Broken': bad configuration$"):
        build([Broken], {E.FILTER: ("Broken",)})


def test_one_instance_per_plugin_across_extension_points() -> None:
    both = scorer("Both", {n: 0 for n in NODES}, pre_score=Status())
    framework = build([both], {E.PRE_SCORE: ("Both",), E.SCORE: ("Both",)})
    assert framework.pre_score_plugins[0][1] is framework.score_plugins[0][1] is framework.plugins["Both"]
    assert [name for name, _ in framework.score_plugins] == ["Both"]
    assert framework.queue_sort_plugin.name == "PrioritySort"


class FakeArgs(BaseModel):
    size: int = 3


def test_typed_args_are_passed_and_raw_dicts_validated() -> None:
    class WithArgs(FilterPlugin):
        name: ClassVar[str] = "WithArgs"
        args_model: ClassVar[type[BaseModel] | None] = FakeArgs

        def filter(self, state: CycleState, pod: PodInfo, nodes: np.ndarray, snapshot: Snapshot) -> None:
            return None

    points = {E.FILTER: ("WithArgs",)}
    assert build([WithArgs], points).plugins["WithArgs"].args is None
    assert build([WithArgs], points, args={"WithArgs": {"size": 7}}).plugins["WithArgs"].args == FakeArgs(size=7)
    typed = FakeArgs(size=9)
    assert build([WithArgs], points, args={"WithArgs": typed}).plugins["WithArgs"].args is typed
    with pytest.raises(FrameworkError, match="initializing plugin 'WithArgs'"):
        build([WithArgs], points, args={"WithArgs": {"size": "many"}})


def test_score_weights_zero_means_one() -> None:
    framework = build([scorer("A", {}), scorer("B", {})], {E.SCORE: (("A", 0), ("B", 5))})
    assert framework.score_weights == {"A": 1, "B": 5}


# -- PreEnqueue ----------------------------------------------------------------------------------------
def test_pre_enqueue_first_rejection_wins() -> None:
    class Gate(PreEnqueuePlugin):
        name: ClassVar[str] = "Gate"

        def pre_enqueue(self, pod: PodInfo) -> Status:
            CALLS.append((self.name, "pre_enqueue", None))
            return U("gated", unresolvable=True)

    class Later(Gate):
        name: ClassVar[str] = "Later"

    framework = build([Gate, Later], {E.PRE_ENQUEUE: ("Gate", "Later")})
    status = framework.run_pre_enqueue_plugins(pod_info(make_pod()))
    assert (status.code, status.reasons, status.plugin) == (Code.UNSCHEDULABLE_AND_UNRESOLVABLE, ("gated",), "Gate")
    assert calls("pre_enqueue") == [("Gate", None)]


# -- PreFilter -----------------------------------------------------------------------------------------
def run_pre_filter(framework: Framework, state: CycleState | None = None) -> tuple[Any, Status, set[str]]:
    return framework.run_pre_filter_plugins(state or CycleState(), pod_info(make_pod()), framework.handle.snapshot())


def test_pre_filter_uur_aborts_at_once() -> None:
    framework = build(
        [prefilter("A", U("a", unresolvable=True)), prefilter("B")],
        {E.PRE_FILTER: ("A", "B")},
    )
    result, status, plugins = run_pre_filter(framework)
    assert (status.code, status.reasons, status.plugin) == (Code.UNSCHEDULABLE_AND_UNRESOLVABLE, ("a",), "A")
    assert result is None
    assert plugins == set()
    assert [name for name, _ in calls("pre_filter")] == ["A"]


def test_pre_filter_unschedulable_is_remembered_and_the_rest_run() -> None:
    framework = build(
        [prefilter("A", U("first")), prefilter("B", nodes=["n1"]), prefilter("C", U("second"))],
        {E.PRE_FILTER: ("A", "B", "C")},
    )
    result, status, plugins = run_pre_filter(framework)
    assert [name for name, _ in calls("pre_filter")] == ["A", "B", "C"]
    # The last Unschedulable is what upstream returns; B's node restriction still merged.
    assert (status.code, status.reasons, status.plugin) == (Code.UNSCHEDULABLE, ("second",), "C")
    assert result == PreFilterResult(frozenset({"n1"}))
    assert plugins == {"B"}


def test_pre_filter_skip_is_recorded_and_its_filter_not_run() -> None:
    skipper = prefilter("Skipper", Status.skip(), nodes=["n0"])

    class SkipperWithFilter(skipper, FilterPlugin):  # type: ignore[misc,valid-type]
        name: ClassVar[str] = "Skipper"

        def filter(self, state: CycleState, pod: PodInfo, nodes: np.ndarray, snapshot: Snapshot) -> None:
            CALLS.append((self.name, "filter", None))

    framework = build(
        [SkipperWithFilter, node_filter("Other", {})],
        {E.PRE_FILTER: ("Skipper",), E.FILTER: ("Skipper", "Other")},
    )
    state = CycleState()
    result, status, _ = run_pre_filter(framework, state)
    assert status.is_success
    assert result is None, "a skipped plugin's node restriction is ignored"
    assert state.skip_filter_plugins == {"Skipper"}
    run_filters(framework, state=state)
    assert [name for name, _ in calls("filter")] == ["Other"]


@pytest.mark.parametrize(
    ("restrictions", "expected_nodes", "restricting", "message"),
    [
        pytest.param({"A": ["n0", "n1"], "B": ["n1", "n2"]}, {"n1"}, {"A", "B"}, None, id="intersection"),
        pytest.param({"A": ["n0"], "B": None}, {"n0"}, {"A"}, None, id="all-nodes-is-neutral"),
        pytest.param({"A": None, "B": None}, None, set(), None, id="no-restriction"),
        pytest.param(
            {"A": [], "B": ["n1"]}, set(), {"A"}, "node(s) didn't satisfy plugin A", id="empty-set-stops-at-once"
        ),
        pytest.param(
            {"Zeta": ["n0"], "Alpha": ["n1"]},
            set(),
            {"Alpha", "Zeta"},
            "node(s) didn't satisfy plugin(s) [Alpha Zeta] simultaneously",
            id="disjoint-two-sorted",
        ),
    ],
)
def test_pre_filter_results_are_intersected(
    restrictions: dict[str, list[str] | None],
    expected_nodes: set[str] | None,
    restricting: set[str],
    message: str | None,
) -> None:
    plugins = [prefilter(name, nodes=nodes) for name, nodes in restrictions.items()]
    framework = build(plugins, {E.PRE_FILTER: tuple(restrictions)})
    result, status, with_nodes = run_pre_filter(framework)
    assert (None if result is None else set(result.node_names or ())) == expected_nodes
    assert with_nodes == restricting
    if message is None:
        assert status.is_success
    else:
        assert status.code is Code.UNSCHEDULABLE_AND_UNRESOLVABLE
        assert status.reasons == (message,)
        assert status.plugin == ""


@pytest.mark.parametrize("raises", [False, True], ids=["error-status", "exception"])
def test_pre_filter_error(raises: bool) -> None:
    status_in = Status.as_error(RuntimeError("kaboom"))
    framework = build([prefilter("A", status_in, raises=raises)], {E.PRE_FILTER: ("A",)})
    _, status, _ = run_pre_filter(framework)
    assert status.code is Code.ERROR
    assert status.message == 'running PreFilter plugin "A": kaboom'


# -- Filter --------------------------------------------------------------------------------------------
def test_filter_runs_in_order_on_the_shrinking_set_first_failure_wins() -> None:
    framework = build(
        [
            node_filter("First", {"n1": U("first says no")}),
            node_filter("Second", {"n1": U("second says no"), "n3": U("second says no")}),
            node_filter("Third", {"n0": U("third", unresolvable=True)}),
        ],
        {E.FILTER: ("First", "Second", "Third")},
    )
    outcome = run_filters(framework)
    assert outcome.error is None
    assert names_of(framework, outcome.feasible) == ["n2", "n4"]
    assert outcome.feasible_positions.tolist() == [2, 4]
    # Each plugin saw only the nodes still feasible after the ones before it.
    assert calls("filter") == [
        ("First", NODES),
        ("Second", ["n0", "n2", "n3", "n4"]),
        ("Third", ["n0", "n2", "n4"]),
    ]
    statuses = {names_of(framework, np.asarray([slot]))[0]: s for slot, s in outcome.statuses.items()}
    assert {name: (s.plugin, s.reasons) for name, s in statuses.items()} == {
        "n1": ("First", ("first says no",)),
        "n3": ("Second", ("second says no",)),
        "n0": ("Third", ("third",)),
    }
    assert len(outcome.statuses) == 3
    assert outcome.statuses.plugins() == {"First", "Second", "Third"}
    assert outcome.statuses.reason_counts() == {"first says no": 1, "second says no": 1, "third": 1}


def test_filter_stops_calling_plugins_when_nothing_is_left() -> None:
    framework = build([node_filter("All", lambda n: U("no")), node_filter("Never", {})], {E.FILTER: ("All", "Never")})
    outcome = run_filters(framework)
    assert len(outcome.feasible) == 0
    assert [name for name, _ in calls("filter")] == ["All"]


def test_filter_palette_multi_reason_and_counts() -> None:
    cpu_mem = U("Insufficient cpu", "Insufficient memory")
    framework = build(
        [node_filter("Fit", {"n0": cpu_mem, "n1": U("Insufficient cpu"), "n2": cpu_mem})], {E.FILTER: ("Fit",)}
    )
    outcome = run_filters(framework)
    assert outcome.statuses.reason_counts() == {"Insufficient cpu": 3, "Insufficient memory": 2}
    assert {s.plugin for _, s in outcome.statuses.items()} == {"Fit"}


@pytest.mark.parametrize("raises", [False, True], ids=["error-status", "exception"])
def test_filter_error_stops_the_cycle(raises: bool) -> None:
    def verdict(node: str) -> Status | None:
        if node == "n2":
            if raises:
                raise RuntimeError("disk on fire")
            return Status.as_error(RuntimeError("disk on fire"))
        return U("no") if node == "n0" else None

    framework = build([node_filter("Bad", verdict)], {E.FILTER: ("Bad",)})
    outcome = run_filters(framework)
    assert outcome.error is not None
    assert outcome.error.code is Code.ERROR
    assert outcome.error.message == 'running "Bad" filter plugin: disk on fire'
    assert len(outcome.feasible) == 0


def test_per_node_filter_plugins_are_adapted() -> None:
    class PerNode(NodeFilterPlugin):
        name: ClassVar[str] = "PerNode"

        def filter_node(self, state: CycleState, pod: PodInfo, node: NodeInfo) -> Status:
            return U(f"odd {node.name}") if int(node.name[1:]) % 2 else Status()

    framework = build([PerNode], {E.FILTER: ("PerNode",)})
    outcome = run_filters(framework)
    assert names_of(framework, outcome.feasible) == ["n0", "n2", "n4"]
    assert outcome.statuses.reason_counts() == {"odd n1": 1, "odd n3": 1}
    assert {s.plugin for _, s in outcome.statuses.items()} == {"PerNode"}


# -- nominated pods ------------------------------------------------------------------------------------
class FakeNominator:
    def __init__(self, nominated: dict[str, list[PodInfo]]) -> None:
        self.nominated = nominated
        self.deleted: list[str] = []

    def nodes_with_nominated_pods(self) -> list[str]:
        return [name for name, pods in self.nominated.items() if pods]

    def nominated_pods_for_node(self, node_name: str) -> list[PodInfo]:
        return self.nominated.get(node_name, [])

    def delete_nominated_pod_if_exists(self, pod: PodInfo) -> None:
        self.deleted.append(pod.uid)


class OnePodPerNode(FilterPlugin):
    """Rejects nodes that already run a pod: reads the node table, as real vectorised plugins do."""

    name: ClassVar[str] = "OnePodPerNode"

    def filter(self, state: CycleState, pod: PodInfo, nodes: np.ndarray, snapshot: Snapshot) -> FilterResult | None:
        CALLS.append((self.name, "filter", [snapshot.table.names[int(s)] for s in nodes]))
        rejected = snapshot.table.pod_count[nodes] >= 1
        return FilterResult.uniform(rejected, U("node is taken")) if rejected.any() else None


def test_nominated_pods_of_equal_or_higher_priority_count_on_their_node() -> None:
    cache = default_cache()
    high = pod_info(make_pod("high", spec={"priority": 10}))
    low = pod_info(make_pod("low", spec={"priority": 1}))
    nominator = FakeNominator({"n1": [high], "n3": [low]})
    framework = build([OnePodPerNode], {E.FILTER: ("OnePodPerNode",)}, cache=cache, nominator=nominator)
    snapshot = cache.snapshot()
    pod = pod_info(make_pod("me", spec={"priority": 5}))
    outcome = framework.run_filter_plugins_with_nominated_pods(CycleState(), pod, slots(snapshot, NODES), snapshot)
    assert names_of(framework, outcome.feasible) == ["n0", "n2", "n3", "n4"]
    assert outcome.feasible_positions.tolist() == [0, 2, 3, 4]
    assert {framework.handle.snapshot().table.names[s]: st.reasons for s, st in outcome.statuses.items()} == {
        "n1": ("node is taken",)
    }
    # The nominated pod was only borrowed for the check.
    assert cache.pod(high.uid) is None
    assert int(cache.table.pod_count[snapshot.slot_of("n1")]) == 0
    # The other nodes were judged in one vectorised call; n1 alone with the nominated pod added.
    assert calls("filter") == [("OnePodPerNode", ["n0", "n2", "n3", "n4"]), ("OnePodPerNode", ["n1"])]


def test_nominated_pod_passing_both_passes() -> None:
    cache = default_cache()
    nominee = pod_info(make_pod("nominee", spec={"priority": 10}))
    framework = build(
        [node_filter("Any", {})],
        {E.FILTER: ("Any",)},
        cache=cache,
        nominator=FakeNominator({"n2": [nominee]}),
    )
    snapshot = cache.snapshot()
    outcome = framework.run_filter_plugins_with_nominated_pods(
        CycleState(), pod_info(make_pod()), slots(snapshot, NODES), snapshot
    )
    assert names_of(framework, outcome.feasible) == NODES
    # n2: once with the nominee (pass 1), once without (pass 2).
    assert [detail for _, detail in calls("filter")] == [["n0", "n1", "n3", "n4"], ["n2"], ["n2"]]


def test_the_pod_itself_is_not_its_own_nominated_pod() -> None:
    cache = default_cache()
    me = pod_info(make_pod("me", spec={"priority": 5}))
    framework = build(
        [OnePodPerNode], {E.FILTER: ("OnePodPerNode",)}, cache=cache, nominator=FakeNominator({"n1": [me]})
    )
    snapshot = cache.snapshot()
    outcome = framework.run_filter_plugins_with_nominated_pods(CycleState(), me, slots(snapshot, NODES), snapshot)
    assert len(outcome.feasible) == 5


class NeedsAPodHere(FilterPlugin):
    """Rejects empty nodes: passes with a nominated pod added, fails without it (upstream's second pass)."""

    name: ClassVar[str] = "NeedsAPodHere"

    def filter(self, state: CycleState, pod: PodInfo, nodes: np.ndarray, snapshot: Snapshot) -> FilterResult | None:
        CALLS.append((self.name, "filter", [snapshot.table.names[int(s)] for s in nodes]))
        rejected = snapshot.table.pod_count[nodes] == 0
        return FilterResult.uniform(rejected, U("node is empty")) if rejected.any() else None


class WithExtensions(PreFilterPlugin):
    """A PreFilter plugin with AddPod/RemovePod: while it is not skipped, nominated nodes are judged one by one."""

    name: ClassVar[str] = "WithExtensions"

    def pre_filter(self, state: CycleState, pod: PodInfo, snapshot: Snapshot) -> tuple[PreFilterResult | None, Status]:
        return None, Status()

    def pre_filter_extensions(self) -> WithExtensions:
        return self

    def add_pod(self, state: CycleState, pod: PodInfo, pod_to_add: PodInfo, node: NodeInfo) -> Status:
        CALLS.append((self.name, "add_pod", node.name))
        return Status()

    def remove_pod(self, state: CycleState, pod: PodInfo, pod_to_remove: PodInfo, node: NodeInfo) -> Status:
        return Status()


class SeesNominee(FilterPlugin):
    """Records, in each pass, whether the nominee counts on its node and whether the cache knows it by uid."""

    name: ClassVar[str] = "SeesNominee"
    seen: ClassVar[list[tuple[int, bool]]] = []

    def filter(self, state: CycleState, pod: PodInfo, nodes: np.ndarray, snapshot: Snapshot) -> FilterResult | None:
        n1 = snapshot.slot_of("n1")
        if n1 in nodes.tolist():
            SeesNominee.seen.append((int(snapshot.table.pod_count[n1]), snapshot.cache.pod("uid-h1") is not None))
        return None


def test_a_batched_pass_places_nominees_on_their_nodes_only() -> None:
    """With no extension running, the nominee is on its node's accounting for the first pass (what Filter
    plugins read) and never enters the cache's cluster-wide indexes; the cache is as before afterwards."""
    cache = default_cache()
    nominee = pod_info(make_pod("h1", spec={"priority": 10}, uid="uid-h1"))
    framework = build(
        [SeesNominee], {E.FILTER: ("SeesNominee",)}, cache=cache, nominator=FakeNominator({"n1": [nominee]})
    )
    snapshot = cache.snapshot()
    generation = cache.generation
    SeesNominee.seen.clear()
    outcome = framework.run_filter_plugins_with_nominated_pods(
        CycleState(), pod_info(make_pod("me")), slots(snapshot, NODES), snapshot
    )
    assert len(outcome.feasible) == len(NODES)
    assert SeesNominee.seen == [(1, False), (0, False)]  # pass 1 with it on n1, pass 2 without
    assert int(cache.table.pod_count.sum()) == 0
    assert cache.generation > generation


def test_nodes_with_nominated_pods_are_judged_together_in_both_passes_when_no_extension_runs() -> None:
    cache = make_cache([make_node(name) for name in NODES], [make_pod("bound", node_name="n4", spec={"priority": 9})])
    high = [pod_info(make_pod(name, spec={"priority": 10})) for name in ("h1", "h3")]
    bound = cache.pod(next(p.uid for p in cache.pods()))
    assert bound is not None
    nominator = FakeNominator({"n1": [high[0]], "n3": [high[1]], "n4": [bound]})
    framework = build(
        [NeedsAPodHere, WithExtensions],
        {E.PRE_FILTER: ("WithExtensions",), E.FILTER: ("NeedsAPodHere",)},
        cache=cache,
        nominator=nominator,
    )
    snapshot = cache.snapshot()
    state = CycleState()
    state.skip_filter_plugins = {"WithExtensions"}
    pod = pod_info(make_pod("me", spec={"priority": 5}))
    outcome = framework.run_filter_plugins_with_nominated_pods(state, pod, slots(snapshot, NODES), snapshot)
    # Again: the nominees' assumed copies are borrowed as they are, with the same verdicts.
    copies = [framework._borrowed[p.uid][2] for p in high]
    CALLS.clear()
    outcome = framework.run_filter_plugins_with_nominated_pods(state, pod, slots(snapshot, NODES), snapshot)
    assert all(framework._borrowed[p.uid][2] is copy for p, copy in zip(high, copies, strict=True))
    # n1, n3 pass with their nominee and fail without it; n4's nominee is already bound there: one pass.
    assert names_of(framework, outcome.feasible) == ["n4"]
    assert outcome.feasible_positions.tolist() == [4]
    assert {snapshot.table.names[s]: st.reasons for s, st in outcome.statuses.items()} == {
        name: ("node is empty",) for name in ("n0", "n1", "n2", "n3")
    }
    assert calls("filter") == [
        ("NeedsAPodHere", ["n0", "n2"]),
        ("NeedsAPodHere", ["n1", "n3", "n4"]),
        ("NeedsAPodHere", ["n1", "n3"]),
    ]
    assert calls("add_pod") == []
    assert cache.pod(high[0].uid) is None
    assert cache.pod(high[1].uid) is None
    assert [int(cache.table.pod_count[snapshot.slot_of(n)]) for n in NODES] == [0, 0, 0, 0, 1]


def test_nodes_with_nominated_pods_are_judged_one_by_one_while_an_extension_runs() -> None:
    cache = default_cache()
    high = [pod_info(make_pod(name, spec={"priority": 10})) for name in ("h1", "h3")]
    framework = build(
        [NeedsAPodHere, WithExtensions],
        {E.PRE_FILTER: ("WithExtensions",), E.FILTER: ("NeedsAPodHere",)},
        cache=cache,
        nominator=FakeNominator({"n1": [high[0]], "n3": [high[1]]}),
    )
    snapshot = cache.snapshot()
    pod = pod_info(make_pod("me", spec={"priority": 5}))
    outcome = framework.run_filter_plugins_with_nominated_pods(CycleState(), pod, slots(snapshot, NODES), snapshot)
    assert len(outcome.feasible) == 0
    assert calls("filter") == [
        ("NeedsAPodHere", ["n0", "n2", "n4"]),
        ("NeedsAPodHere", ["n1"]),
        ("NeedsAPodHere", ["n1"]),
        ("NeedsAPodHere", ["n3"]),
        ("NeedsAPodHere", ["n3"]),
    ]
    assert calls("add_pod") == [("WithExtensions", "n1"), ("WithExtensions", "n3")]


# -- PostFilter ----------------------------------------------------------------------------------------
def post_filter(plugin_name: str, status: Status, nominate: str | None = None) -> type[PostFilterPlugin]:
    class Fake(PostFilterPlugin):
        name: ClassVar[str] = plugin_name

        def post_filter(self, state: CycleState, pod: PodInfo, filtered: Any) -> tuple[PostFilterResult | None, Status]:
            CALLS.append((self.name, "post_filter", len(filtered)))
            return (PostFilterResult(nominate) if nominate else None), status

    return Fake


@pytest.mark.parametrize(
    ("plugins", "code", "message", "ran", "nominated"),
    [
        pytest.param(
            [("DRA", U("no new claims to deallocate"), None), ("Preempt", U("preemption: 0/2 nodes..."), None)],
            Code.UNSCHEDULABLE,
            "no new claims to deallocate, preemption: 0/2 nodes...",
            ["DRA", "Preempt"],
            None,
            id="all-unschedulable-joined",
        ),
        pytest.param(
            [("A", Status(), "n1"), ("B", U("never"), None)], Code.SUCCESS, "", ["A"], "n1", id="success-stops"
        ),
        pytest.param(
            [("A", U("x", unresolvable=True), None), ("B", U("never"), None)],
            Code.UNSCHEDULABLE_AND_UNRESOLVABLE,
            "x",
            ["A"],
            None,
            id="uur-stops",
        ),
        pytest.param(
            [("A", Status.as_error(RuntimeError("boom")), None), ("B", U("never"), None)],
            Code.ERROR,
            "boom",
            ["A"],
            None,
            id="error-stops",
        ),
    ],
)
def test_post_filter(
    plugins: list[tuple[str, Status, str | None]], code: Code, message: str, ran: list[str], nominated: str | None
) -> None:
    framework = build(
        [post_filter(name, status, nominate) for name, status, nominate in plugins],
        {E.POST_FILTER: tuple(name for name, _, _ in plugins)},
    )
    view = NodeToStatusMap(FilterStatuses(), framework.handle.snapshot().table.names)
    result, status = framework.run_post_filter_plugins(CycleState(), pod_info(make_pod()), view)
    assert status.code is code
    assert status.message == message
    assert [name for name, _ in calls("post_filter")] == ran
    assert (result.nominated_node_name if result else None) == nominated
    if code is Code.UNSCHEDULABLE:
        assert status.plugin == ran[0]


# -- PreScore / Score ----------------------------------------------------------------------------------
SCORES = {"n0": 10, "n1": 20, "n2": 40, "n3": 0, "n4": 5}


def run_scoring(framework: Framework, state: CycleState | None = None) -> Any:
    state = state or CycleState()
    snapshot = framework.handle.snapshot()
    nodes = slots(snapshot, NODES)
    pod = pod_info(make_pod())
    status = framework.run_pre_score_plugins(state, pod, nodes, snapshot)
    assert status.is_success, status.message
    return framework.run_score_plugins(state, pod, nodes, snapshot)


def test_score_normalize_weight_and_total() -> None:
    def by_max(scores: np.ndarray) -> np.ndarray:
        return 100 * scores // scores.max()

    framework = build(
        [scorer("Raw", {n: 7 for n in NODES}), scorer("Norm", SCORES, normalize=by_max)],
        {E.SCORE: (("Raw", 1), ("Norm", 3))},
    )
    outcome, status = run_scoring(framework)
    assert status.is_success
    assert outcome.plugins == ("Raw", "Norm")
    assert outcome.weights == (1, 3)
    assert outcome.scores[1].tolist() == [75, 150, 300, 0, 36]
    assert outcome.totals.dtype == np.int64
    assert outcome.totals.tolist() == [82, 157, 307, 7, 43]
    assert outcome.breakdown(2) == {"Raw": 7, "Norm": 300}
    assert outcome.top(2) == [(2, 307), (1, 157)]
    assert calls("normalize") == [("Norm", [10, 20, 40, 0, 5])]


def test_normalize_only_when_the_plugin_has_it() -> None:
    framework = build([scorer("Plain", SCORES)], {E.SCORE: ("Plain",)})
    outcome, status = run_scoring(framework)
    assert status.is_success
    assert outcome.totals.tolist() == [10, 20, 40, 0, 5]
    assert calls("normalize") == []


def test_pre_score_skip_skips_the_score() -> None:
    framework = build(
        [scorer("Skipped", SCORES, pre_score=Status.skip()), scorer("Kept", SCORES, pre_score=Status())],
        {E.PRE_SCORE: ("Skipped", "Kept"), E.SCORE: ("Skipped", "Kept")},
    )
    state = CycleState()
    outcome, _ = run_scoring(framework, state)
    assert state.skip_score_plugins == {"Skipped"}
    assert outcome.plugins == ("Kept",)
    assert [name for name, _ in calls("score")] == ["Kept"]


def test_pre_score_error_text() -> None:
    framework = build(
        [scorer("Bad", SCORES, pre_score=Status.as_error(RuntimeError("nope")))],
        {E.PRE_SCORE: ("Bad",), E.SCORE: ("Bad",)},
    )
    snapshot = framework.handle.snapshot()
    status = framework.run_pre_score_plugins(CycleState(), pod_info(make_pod()), slots(snapshot), snapshot)
    assert status.code is Code.ERROR
    assert status.message == 'running PreScore plugin "Bad": nope'


@pytest.mark.parametrize(
    ("scores", "normalize", "message"),
    [
        pytest.param(
            {**SCORES, "n2": 101},
            None,
            'applying score defaultWeights on Score plugins: plugin "Wild" returns an invalid score 101, '
            "it should in the range of [0, 100] after normalizing",
            id="too-high",
        ),
        pytest.param(
            SCORES,
            lambda s: s - 20,
            'applying score defaultWeights on Score plugins: plugin "Wild" returns an invalid score -10, '
            "it should in the range of [0, 100] after normalizing",
            id="negative-after-normalize",
        ),
    ],
)
def test_score_range_check(scores: dict[str, int], normalize: Any, message: str) -> None:
    framework = build([scorer("Wild", scores, normalize=normalize)], {E.SCORE: ("Wild",)})
    outcome, status = run_scoring(framework)
    assert outcome is None
    assert status.code is Code.ERROR
    assert status.message == message


def test_score_plugin_exception_text() -> None:
    framework = build([scorer("Crash", {})], {E.SCORE: ("Crash",)})
    _, status = run_scoring(framework)
    assert status.code is Code.ERROR
    assert status.message.startswith('running Score plugins: plugin "Crash" failed with: ')


# -- Reserve / Permit ----------------------------------------------------------------------------------
def test_reserve_stops_at_rejection_and_unreserve_runs_in_reverse() -> None:
    framework = build(
        [lifecycle("R1"), lifecycle("R2", reserve=U("full")), lifecycle("R3", unreserve_raises=True)],
        {E.RESERVE: ("R1", "R2", "R3")},
    )
    pod = pod_info(make_pod())
    status = framework.run_reserve_plugins_reserve(CycleState(), pod, "n1")
    assert (status.code, status.reasons, status.plugin) == (Code.UNSCHEDULABLE, ("full",), "R2")
    assert [name for name, _ in calls("reserve")] == ["R1", "R2"]
    framework.run_reserve_plugins_unreserve(CycleState(), pod, "n1")
    assert [name for name, _ in calls("unreserve")] == ["R3", "R2", "R1"]


def test_reserve_error_text() -> None:
    framework = build([lifecycle("R", reserve=Status.as_error(RuntimeError("db down")))], {E.RESERVE: ("R",)})
    status = framework.run_reserve_plugins_reserve(CycleState(), pod_info(make_pod()), "n1")
    assert status.code is Code.ERROR
    assert status.message == 'running Reserve plugin "R": db down'


def test_permit_rejection_and_error() -> None:
    framework = build([lifecycle("P", permit=(U("not now"), 0.0))], {E.PERMIT: ("P",)})
    status = framework.run_permit_plugins(CycleState(), pod_info(make_pod()), "n1")
    assert (status.code, status.plugin) == (Code.UNSCHEDULABLE, "P")
    framework = build([lifecycle("P", permit=(Status.as_error(RuntimeError("x")), 0.0))], {E.PERMIT: ("P",)})
    status = framework.run_permit_plugins(CycleState(), pod_info(make_pod()), "n1")
    assert (status.code, status.message, status.plugin) == (Code.ERROR, 'running Permit plugin "P": x', "P")


def test_permit_wait_then_allow() -> None:
    framework = build(
        [
            lifecycle("P1", permit=(Status(Code.WAIT, ("first",)), 30.0)),
            lifecycle("P2", permit=(Status(Code.WAIT, ("second",)), 30.0)),
        ],
        {E.PERMIT: ("P1", "P2")},
    )
    pod = pod_info(make_pod("waiter"))
    status = framework.run_permit_plugins(CycleState(), pod, "n1")
    assert status.code is Code.WAIT
    # Upstream v1.36.3's RunPermitPlugins: the last waiting plugin's status, this reason appended (no pod name).
    assert status.message == "second, one or more plugins asked to wait and no plugin rejected pod"
    assert framework.will_wait_on_permit(pod)
    waiting = framework.waiting_pods.get(pod.uid)
    assert waiting is not None
    assert sorted(waiting.pending_plugins) == ["P1", "P2"]

    async def scenario() -> Status:
        task = asyncio.ensure_future(framework.wait_on_permit(pod))
        await asyncio.sleep(0)
        waiting.allow("P1")
        await asyncio.sleep(0)
        assert not task.done()
        waiting.allow("P2")
        return await task

    assert asyncio.run(scenario()).is_success
    assert not framework.will_wait_on_permit(pod)


def test_permit_wait_times_out_with_upstream_text() -> None:
    framework = build([lifecycle("Slow", permit=(Status(Code.WAIT), 0.01))], {E.PERMIT: ("Slow",)})
    pod = pod_info(make_pod())
    assert framework.run_permit_plugins(CycleState(), pod, "n1").code is Code.WAIT
    status = asyncio.run(framework.wait_on_permit(pod))
    assert status.code is Code.UNSCHEDULABLE
    assert status.plugin == "Slow"
    assert status.message == "rejected due to timeout after waiting 10ms at plugin Slow"


def test_reject_waiting_pod() -> None:
    framework = build([lifecycle("P", permit=(Status(Code.WAIT), 60.0))], {E.PERMIT: ("P",)})
    pod = pod_info(make_pod())
    framework.run_permit_plugins(CycleState(), pod, "n1")
    assert framework.reject_waiting_pod(pod.uid)
    assert not framework.reject_waiting_pod("unknown")
    status = asyncio.run(framework.wait_on_permit(pod))
    assert (status.code, status.message) == (Code.UNSCHEDULABLE, "removed")


def test_preempt_waiting_pod_is_an_error_not_a_rejection() -> None:
    """Upstream ``waitingPod.Preempt``: the binding cycle fails with an Error (backoff), not Unschedulable."""
    framework = build([lifecycle("P", permit=(Status(Code.WAIT), 60.0))], {E.PERMIT: ("P",)})
    pod = pod_info(make_pod())
    framework.run_permit_plugins(CycleState(), pod, "n1")
    assert framework.preempt_waiting_pod(pod.uid, "DefaultPreemption")
    assert not framework.preempt_waiting_pod(pod.uid, "DefaultPreemption")  # already stopped
    assert not framework.preempt_waiting_pod("unknown", "DefaultPreemption")
    status = asyncio.run(framework.wait_on_permit(pod))
    assert (status.code, status.plugin, status.message) == (
        Code.ERROR,
        "DefaultPreemption",
        "waiting on permit for pod: preempted",
    )


# -- binding cycle -------------------------------------------------------------------------------------
def test_bind_first_non_skip_wins() -> None:
    framework = build(
        [lifecycle("Skipper", bind=Status.skip()), lifecycle("Binder"), lifecycle("Never")],
        {E.BIND: ("Skipper", "Binder", "Never")},
    )
    status = asyncio.run(framework.run_bind_plugins(CycleState(), pod_info(make_pod()), "n1"))
    assert status.is_success
    assert [name for name, _ in calls("bind")] == ["Skipper", "Binder"]


def test_bind_all_skip_and_errors() -> None:
    framework = build([lifecycle("Skipper", bind=Status.skip())], {E.BIND: ("Skipper",)})
    assert asyncio.run(framework.run_bind_plugins(CycleState(), pod_info(make_pod()), "n1")).is_skip
    framework = build([lifecycle("B", bind=Status.as_error(RuntimeError("409")))], {E.BIND: ("B",)})
    status = asyncio.run(framework.run_bind_plugins(CycleState(), pod_info(make_pod()), "n1"))
    assert (status.code, status.message) == (Code.ERROR, 'running Bind plugin "B": 409')


def test_pre_bind_and_post_bind() -> None:
    framework = build(
        [lifecycle("A"), lifecycle("B", pre_bind=Status.as_error(RuntimeError("volume")))],
        {E.PRE_BIND: ("A", "B"), E.POST_BIND: ("A", "B")},
    )
    status = asyncio.run(framework.run_pre_bind_plugins(CycleState(), pod_info(make_pod()), "n1"))
    assert (status.code, status.message) == (Code.ERROR, 'running PreBind plugin "B": volume')
    framework.run_post_bind_plugins(CycleState(), pod_info(make_pod()), "n1")
    assert [name for name, _ in calls("post_bind")] == ["A", "B"]


def test_pre_bind_pre_flights_success_if_any_plugin_has_work_and_skipped_plugins_skip_pre_bind() -> None:
    points = {E.PRE_BIND: ("A", "B")}
    framework = build([lifecycle("A", pre_flight=Status.skip()), lifecycle("B")], points)
    state, pod = CycleState(), pod_info(make_pod())
    assert framework.run_pre_bind_pre_flights(state, pod, "n1").is_success
    assert state.skip_pre_bind_plugins == {"A"}
    assert asyncio.run(framework.run_pre_bind_plugins(state, pod, "n1")).is_success
    assert [name for name, _ in calls("pre_bind")] == ["B"]
    framework = build([lifecycle("A", pre_flight=Status.skip()), lifecycle("B", pre_flight=Status.skip())], points)
    assert framework.run_pre_bind_pre_flights(CycleState(), pod, "n1").is_skip
    assert build([], {}).run_pre_bind_pre_flights(CycleState(), pod, "n1").is_skip  # no PreBind plugins


@pytest.mark.parametrize(
    ("answer", "message"),
    [
        (Status.as_error(RuntimeError("no volumes")), 'running PreBindPreFlight "B": no volumes'),
        (
            Status.unschedulable("full"),
            'PreBindPreFlight B returned "Unschedulable", which is unsupported. '
            "It is supposed to return Success, Skip, or Error status",
        ),
    ],
)
def test_pre_bind_pre_flights_errors(answer: Status, message: str) -> None:
    framework = build([lifecycle("A"), lifecycle("B", pre_flight=answer)], {E.PRE_BIND: ("A", "B")})
    status = framework.run_pre_bind_pre_flights(CycleState(), pod_info(make_pod()), "n1")
    assert (status.code, status.message) == (Code.ERROR, message)


def test_filter_result_of_the_wrong_length_is_a_plugin_error() -> None:
    class Sloppy(FilterPlugin):
        name: ClassVar[str] = "Sloppy"

        def filter(self, state: CycleState, pod: PodInfo, nodes: np.ndarray, snapshot: Snapshot) -> FilterResult:
            return FilterResult.uniform(np.ones(len(nodes) + 1, dtype=bool), U("x"))

    outcome = run_filters(build([Sloppy], {E.FILTER: ("Sloppy",)}))
    assert outcome.error is not None
    assert outcome.error.message == 'running "Sloppy" filter plugin: returned 6 verdicts for 5 nodes'
