"""The scheduling algorithm for one pod: upstream's ``schedulePod`` and the functions it calls in
``pkg/scheduler/schedule_one.go`` (``findNodesThatFitPod``, ``prioritizeNodes``, ``selectHost``,
``numFeasibleNodesToFind``), with ``FitError`` and ``Diagnosis`` of ``framework/types.go``.

:func:`schedule_pod` is pure (no I/O, no await): PreFilter, the nominated-node fast path, the sampled Filter
search from a round-robin start, PreScore/Score and host selection, over one framework and one snapshot. It
returns a :class:`ScheduleResult` or raises :class:`FitError` whose ``message`` is upstream's FailedScheduling
text byte for byte. :func:`schedule_pod_with_extenders` is the same algorithm with a profile's HTTP extenders
awaited between the phases (their wire format and transport are ``framework/extender.py``'s).
:func:`run_post_filter` adds PostFilter's verdict to a FitError. What happens to the pod around the algorithm
(assume, Reserve, Permit, the binding cycle, failure handling) is ``schedule_one.py``'s.

Sampling is upstream's with one worker (kube-scheduler with ``parallelism: 1``, whose search is not racy).
Upstream checks nodes from ``nextStartNodeIndex`` and cancels the search when a node beyond the
``numFeasibleNodesToFind``-th (K) turns out feasible: with one worker it keeps judging after the K-th feasible
node until it meets a (K+1)-th, which it drops; the infeasible nodes met on the way keep their statuses and
count in ``processedNodes``, so they move the start index. Here the nodes are judged in rotated order, the
first K feasible win, rejections before the (K+1)-th feasible node count (all of them when there is none), and
the start index advances by K plus those rejections, as upstream's formula does. Filters run on a window of
the rotated list a bit larger than K first and on the rest only when the window did not yield K+1 feasible
nodes, so a big healthy cluster costs about K nodes. When a PreFilter marked its Filter costly for the pod
(``COSTLY_FILTER``: DynamicResources' allocator) the windows have no slack and the next one is sized by the
feasible rate seen; the window sizes never change the verdicts.
"""

from __future__ import annotations

import logging
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from kopf_scheduler.framework.cycle_state import COSTLY_FILTER, CycleState
from kopf_scheduler.framework.extender import (
    EXTENDER_NAME,
    Extender,
    ExtenderError,
    PendingPostFilterResult,
    find_nodes_that_pass_extenders,
    prioritize_with_extenders,
)
from kopf_scheduler.framework.interface import PostFilterResult, PreFilterResult
from kopf_scheduler.framework.runtime import Framework
from kopf_scheduler.framework.status import Code, Status
from kopf_scheduler.framework.verdicts import FilterOutcome, FilterStatuses, NodeToStatusMap, ScoreOutcome
from kopf_scheduler.go_format import go_string_list
from kopf_scheduler.state.cache import ClusterCache, Snapshot
from kopf_scheduler.state.pod_info import PodInfo

logger = logging.getLogger(__name__)

#: Upstream's floor on how many feasible nodes a cycle looks for (all of them below this many nodes).
MIN_FEASIBLE_NODES_TO_FIND = 100
#: Upstream's floor on the adaptive percentage of nodes to score.
MIN_FEASIBLE_NODES_PERCENTAGE_TO_FIND = 5
#: Upstream's ``ErrNoNodesAvailable`` text.
NO_NODES_AVAILABLE = "no nodes available to schedule pods"

#: The first Filter window is K·(1 + 1/2) + 16 nodes: enough that a mostly-feasible cluster needs one pass.
_WINDOW_SLACK_DIVISOR = 2
_WINDOW_SLACK_MIN = 16

_DEFAULT_RNG = random.Random()


def num_feasible_nodes_to_find(percentage_of_nodes_to_score: int | None, num_all_nodes: int) -> int:
    """How many feasible nodes the Filter search stops at (upstream ``numFeasibleNodesToFind``).

    All nodes below 100; otherwise the profile's percentage, or when that is unset or 0 the adaptive
    ``50 − n/125`` percent floored at 5; never fewer than 100 nodes.
    """
    if num_all_nodes < MIN_FEASIBLE_NODES_TO_FIND:
        return num_all_nodes
    percentage = percentage_of_nodes_to_score or 0
    if percentage == 0:
        percentage = max(50 - num_all_nodes // 125, MIN_FEASIBLE_NODES_PERCENTAGE_TO_FIND)
    found = num_all_nodes * percentage // 100
    return max(found, MIN_FEASIBLE_NODES_TO_FIND)


# -- diagnosis and errors ------------------------------------------------------------------------------
@dataclass(slots=True)
class Diagnosis:
    """Why nodes were rejected in one cycle (upstream ``framework.Diagnosis``).

    ``statuses`` holds the explicit per-node verdicts (node-table slot → Status stamped with its plugin);
    every other node of the snapshot has ``absent_nodes_status``. ``node_to_status`` is the by-name view
    PostFilter plugins and explanations read.
    """

    names: Sequence[str | None]
    statuses: FilterStatuses = field(default_factory=FilterStatuses)
    absent_nodes_status: Status = field(default_factory=lambda: Status(Code.UNSCHEDULABLE_AND_UNRESOLVABLE))
    #: Plugins that returned Unschedulable(AndUnresolvable) (the queue requeues on their events).
    unschedulable_plugins: set[str] = field(default_factory=set)
    pending_plugins: set[str] = field(default_factory=set)
    pre_filter_msg: str = ""
    post_filter_msg: str = ""
    _view: NodeToStatusMap | None = None

    @property
    def node_to_status(self) -> NodeToStatusMap:
        if self._view is None or self._view.absent_nodes_status is not self.absent_nodes_status:
            self._view = NodeToStatusMap(self.statuses, self.names, self.absent_nodes_status)
        return self._view

    def add_plugin_status(self, status: Status) -> None:
        if not status.plugin:
            return
        if status.is_rejected:
            self.unschedulable_plugins.add(status.plugin)
        if status.code is Code.PENDING:
            self.pending_plugins.add(status.plugin)

    def all_unschedulable_plugins(self) -> set[str]:
        """Plugins that rejected the pod anywhere in the cycle (PreFilter and Filter)."""
        return self.unschedulable_plugins | self.statuses.plugins()


class SchedulingError(Exception):
    """The cycle failed with an Error status (not a fit problem): the pod goes to backoff, SchedulerError."""

    def __init__(self, status: Status) -> None:
        super().__init__(status.message)
        self.status = status


class FitError(Exception):
    """No node fits the pod; ``message`` is upstream's ``FitError.Error()`` text.

    ``from_node_search``: the node search found no node (PostFilter runs). False for the one-node FitErrors of
    a Reserve or Permit rejection (and of the re-check after extenders): upstream builds those after the
    search and runs no PostFilter for them, so their text has no ``preemption: ...`` part.
    """

    def __init__(
        self, pod: PodInfo, num_all_nodes: int, diagnosis: Diagnosis, *, from_node_search: bool = True
    ) -> None:
        super().__init__()
        self.pod = pod
        self.num_all_nodes = num_all_nodes
        self.diagnosis = diagnosis
        self.from_node_search = from_node_search

    @property
    def message(self) -> str:
        diagnosis = self.diagnosis
        text = f"0/{self.num_all_nodes} nodes are available:"
        if diagnosis.pre_filter_msg:
            # PreFilter rejected the pod: every node has that status, so the histogram would only repeat it.
            text += f" {diagnosis.pre_filter_msg}."
        else:
            counts = diagnosis.statuses.reason_counts()
            explicit = len(diagnosis.statuses)
            if explicit < self.num_all_nodes:
                for reason in diagnosis.absent_nodes_status.reasons:
                    counts[reason] = counts.get(reason, 0) + self.num_all_nodes - explicit
            # Go's sort.Strings on "<count> <reason>": a plain string sort, so "10 X" sorts before "2 Y".
            histogram = sorted(f"{count} {reason}" for reason, count in counts.items())
            if histogram:
                text += " " + ", ".join(histogram) + "."
        if diagnosis.post_filter_msg:
            text += " " + diagnosis.post_filter_msg
        return text

    @classmethod
    def on_one_node(cls, pod: PodInfo, slot: int, status: Status, names: Sequence[str | None]) -> FitError:
        """The FitError of a rejection after the node search (Reserve, Permit, the re-check after extenders):
        ``0/1 nodes are available: …`` with ``status`` on the chosen node, and no PostFilter."""
        diagnosis = Diagnosis(names)
        diagnosis.statuses.set(slot, status)
        diagnosis.add_plugin_status(status)
        return cls(pod, 1, diagnosis, from_node_search=False)

    def __str__(self) -> str:
        return self.message

    @property
    def status(self) -> Status:
        """How the failure handler sees it: Unschedulable with this message."""
        return Status(Code.UNSCHEDULABLE, (self.message,))


class NoNodesAvailableError(FitError):
    """The snapshot has no nodes at all (upstream ``ErrNoNodesAvailable``; UUR, no PostFilter)."""

    @property
    def message(self) -> str:
        return NO_NODES_AVAILABLE

    @property
    def status(self) -> Status:
        return Status(Code.UNSCHEDULABLE_AND_UNRESOLVABLE, (NO_NODES_AVAILABLE,))


# -- results -------------------------------------------------------------------------------------------
@dataclass(slots=True)
class ScheduleResult:
    """The chosen node and how much of the cluster was looked at (upstream ``ScheduleResult``)."""

    suggested_host: str
    evaluated_nodes: int
    feasible_nodes: int
    #: Node-table slot of ``suggested_host``.
    slot: int
    #: Verdicts of the nodes that were rejected on the way (explanations per node and plugin).
    diagnosis: Diagnosis
    #: Per-plugin weighted scores of the feasible nodes; None when scoring did not run (1 feasible node,
    #: the nominated node, or no Score plugins).
    scores: ScoreOutcome | None = None

    def plugin_scores(self) -> dict[str, int]:
        """Plugin → weighted score of the chosen node (empty when scoring did not run)."""
        if self.scores is None:
            return {}
        position = int(np.flatnonzero(self.scores.nodes == self.slot)[0])
        return self.scores.breakdown(position)

    def top_nodes(self, names: Sequence[str | None], k: int = 3) -> list[tuple[str, int]]:
        """The ``k`` best-scoring feasible nodes as (name, total score), best first."""
        if self.scores is None:
            return [(self.suggested_host, 0)]
        return [(str(names[int(self.scores.nodes[i])]), total) for i, total in self.scores.top(k)]


# -- the cycle -----------------------------------------------------------------------------------------
def schedule_pod(
    framework: Framework,
    state: CycleState,
    pod: PodInfo,
    snapshot: Snapshot,
    *,
    rng: random.Random | None = None,
) -> ScheduleResult:
    """Pick a node for ``pod`` (upstream ``schedulePod``); raises FitError, or SchedulingError on plugin errors."""
    diagnosis, pre_filter = _pre_filter(framework, state, pod, snapshot)
    slot = _evaluate_nominated_node(framework, state, pod, snapshot, diagnosis)
    if slot is not None:
        return ScheduleResult(str(snapshot.table.names[slot]), 1 + len(diagnosis.statuses), 1, slot, diagnosis)
    feasible = _find_nodes_that_fit(framework, state, pod, snapshot, diagnosis, pre_filter, framework.has_score_plugins)
    early = _conclude_filtering(pod, snapshot, diagnosis, feasible)
    if early is not None:
        return early
    scores = _prioritize_nodes(framework, state, pod, feasible, snapshot)
    return _select(snapshot, diagnosis, feasible, scores, rng)


async def schedule_pod_with_extenders(
    framework: Framework,
    state: CycleState,
    pod: PodInfo,
    cache: ClusterCache,
    extenders: Sequence[Extender],
    *,
    rng: random.Random | None = None,
) -> ScheduleResult:
    """:func:`schedule_pod` with the profile's extenders (upstream's ``schedulePod`` with ``sched.Extenders``).

    The plugin phases run synchronously as in :func:`schedule_pod`; the extender calls are awaited between them:
    filter extenders after the plugin filters (also on the nominated node), prioritize extenders after the Score
    plugins. While a call is awaited, watch events and other profiles' cycles change the cache (upstream's
    snapshot would not change), so after each await the nodes are looked up again by name in a fresh snapshot
    (a node deleted meanwhile is dropped), and :func:`recheck_after_extenders` judges the chosen node again
    before it is assumed.
    """
    snapshot = cache.snapshot()
    diagnosis, pre_filter = _pre_filter(framework, state, pod, snapshot)
    slot = _evaluate_nominated_node(framework, state, pod, snapshot, diagnosis)
    if slot is not None:
        passed, snapshot = await _nominated_node_past_extenders(extenders, pod, slot, cache, snapshot, diagnosis)
        if len(passed):
            slot = int(passed[0])
            return ScheduleResult(str(snapshot.table.names[slot]), 1 + len(diagnosis.statuses), 1, slot, diagnosis)
    scoring = framework.has_score_plugins or any(e.is_filter or e.is_prioritizer for e in extenders)
    feasible = _find_nodes_that_fit(framework, state, pod, snapshot, diagnosis, pre_filter, scoring)
    if len(feasible):
        before = len(feasible)
        feasible, snapshot = await _filter_with_extenders(extenders, pod, feasible, cache, snapshot, diagnosis)
        if len(feasible) != before:
            diagnosis.unschedulable_plugins.add(EXTENDER_NAME)
    early = _conclude_filtering(pod, snapshot, diagnosis, feasible)
    if early is not None:
        return early
    scores = _run_score_plugins(framework, state, pod, feasible, snapshot)
    nodes = _named_nodes(snapshot, feasible)
    extender_scores = await prioritize_with_extenders(extenders, pod, nodes)
    scores = _with_extender_scores(scores, [name for name, _ in nodes], extender_scores)
    result = _select(snapshot, diagnosis, feasible, scores, rng)
    # The node objects may have moved slots meanwhile: name the result after what was scored.
    result.suggested_host = nodes[int(np.flatnonzero(feasible == result.slot)[0])][0]
    return result


def recheck_after_extenders(
    framework: Framework, state: CycleState, pod: PodInfo, result: ScheduleResult, cache: ClusterCache, generation: int
) -> None:
    """The chosen node judged again by the Filter plugins when the cache changed during the extender calls.

    Other cycles may have assumed pods on it, or it may be gone; then the pod fails on that one node (a FitError
    ``0/1 nodes are available: …``, as for a Reserve rejection) and is retried, instead of being overcommitted.
    """
    if cache.generation == generation:
        return
    snapshot = cache.snapshot()
    slot = snapshot.slot_of(result.suggested_host)
    if slot is None:
        status = Status.unschedulable(f'node "{result.suggested_host}" was deleted while extenders were called')
        raise FitError.on_one_node(pod, result.slot, status, snapshot.table.names)
    diagnosis = Diagnosis(snapshot.table.names)
    outcome = _filter_one_node(framework, state, pod, slot, snapshot, diagnosis)
    if outcome.error is not None:
        raise SchedulingError(outcome.error)
    if not len(outcome.feasible):
        diagnosis.unschedulable_plugins |= diagnosis.statuses.plugins()
        raise FitError(pod, 1, diagnosis)
    result.slot = slot


def _pre_filter(
    framework: Framework, state: CycleState, pod: PodInfo, snapshot: Snapshot
) -> tuple[Diagnosis, tuple[PreFilterResult | None, set[str]]]:
    """No nodes → NoNodesAvailableError; PreFilter, whose rejection is a FitError with every node rejected."""
    num_all_nodes = snapshot.num_nodes_in_placement
    diagnosis = Diagnosis(snapshot.table.names)
    if num_all_nodes == 0:
        raise NoNodesAvailableError(pod, 0, diagnosis)
    pre_filter_result, status, plugins_with_nodes = framework.run_pre_filter_plugins(state, pod, snapshot)
    diagnosis.unschedulable_plugins = set(plugins_with_nodes)
    if not status.is_success:
        if not status.is_rejected:
            raise SchedulingError(status)
        diagnosis.absent_nodes_status = status
        diagnosis.pre_filter_msg = status.message
        diagnosis.add_plugin_status(status)
        raise FitError(pod, num_all_nodes, diagnosis)
    return diagnosis, (pre_filter_result, set(plugins_with_nodes))


def _evaluate_nominated_node(
    framework: Framework, state: CycleState, pod: PodInfo, snapshot: Snapshot, diagnosis: Diagnosis
) -> int | None:
    """A node nominated by an earlier preemption is likely the only one that fits: its slot if the filters pass."""
    nominated_node = ((pod.obj.get("status") or {}).get("nominatedNodeName")) or ""
    if not nominated_node:
        return None
    slot = snapshot.slot_of(nominated_node)
    if slot is None:
        logger.info("Nominated node %s of pod %s is not in the snapshot", nominated_node, pod.key)
        return None
    if not snapshot.in_placement(slot):
        # Not an error: a pod-group cycle tries the group in placements the nominated node may be outside of.
        logger.debug("Nominated node %s of pod %s is not in the current placement", nominated_node, pod.key)
        return None
    diagnosis.statuses.mark_overlapping()
    outcome = _filter_one_node(framework, state, pod, slot, snapshot, diagnosis)
    if outcome.error is not None:
        logger.error(
            "Evaluation failed on nominated node %s for pod %s: %s", nominated_node, pod.key, outcome.error.message
        )
        return None
    return slot if len(outcome.feasible) else None


def _filter_one_node(
    framework: Framework, state: CycleState, pod: PodInfo, slot: int, snapshot: Snapshot, diagnosis: Diagnosis
) -> FilterOutcome:
    """The Filter plugins (with nominated pods) on one node, outside the round-robin search."""
    return framework.run_filter_plugins_with_nominated_pods(
        state,
        pod,
        np.asarray([slot], dtype=np.int64),
        snapshot,
        positions=np.asarray([-1], dtype=np.int64),
        statuses=diagnosis.statuses,
    )


def _find_nodes_that_fit(
    framework: Framework,
    state: CycleState,
    pod: PodInfo,
    snapshot: Snapshot,
    diagnosis: Diagnosis,
    pre_filter: tuple[PreFilterResult | None, set[str]],
    scoring: bool,
) -> np.ndarray:
    """The sampled Filter search (from the round-robin start) over the nodes PreFilter left (of the placement's,
    in a pod-group cycle that assumed one)."""
    all_nodes = snapshot.nodes_in_placement
    pre_filter_result, plugins_with_nodes = pre_filter
    nodes = all_nodes
    if pre_filter_result is not None and pre_filter_result.node_names is not None:
        # Names that are not in the snapshot are dropped; the others keep node-tree order.
        wanted = [s for s in map(snapshot.slot_of, pre_filter_result.node_names) if s is not None]
        nodes = all_nodes[np.isin(all_nodes, np.asarray(wanted, dtype=np.int64))]
        diagnosis.absent_nodes_status = Status.unschedulable(
            f"node(s) didn't satisfy plugin(s) {go_string_list(plugins_with_nodes)}", unresolvable=True
        )

    feasible, error = _find_nodes_that_pass_filters(framework, state, pod, diagnosis, nodes, snapshot, scoring)
    processed = len(feasible) + len(diagnosis.statuses)
    framework.next_start_node_index = (framework.next_start_node_index + processed) % len(all_nodes)
    if error is not None:
        raise SchedulingError(error)
    diagnosis.unschedulable_plugins |= diagnosis.statuses.plugins()
    return feasible


def _conclude_filtering(
    pod: PodInfo, snapshot: Snapshot, diagnosis: Diagnosis, feasible: np.ndarray
) -> ScheduleResult | None:
    """No feasible node → FitError; exactly one → it, unscored; several → None (go on to scoring)."""
    if len(feasible) == 0:
        raise FitError(pod, snapshot.num_nodes_in_placement, diagnosis)
    if len(feasible) == 1:
        slot = int(feasible[0])
        return ScheduleResult(str(snapshot.table.names[slot]), 1 + len(diagnosis.statuses), 1, slot, diagnosis)
    return None


def _select(
    snapshot: Snapshot,
    diagnosis: Diagnosis,
    feasible: np.ndarray,
    scores: ScoreOutcome | None,
    rng: random.Random | None,
) -> ScheduleResult:
    totals = scores.totals if scores is not None else None
    position = select_host(totals, rng) if totals is not None else (rng or _DEFAULT_RNG).randrange(len(feasible))
    slot = int(feasible[position])
    return ScheduleResult(
        str(snapshot.table.names[slot]),
        len(feasible) + len(diagnosis.statuses),
        len(feasible),
        slot,
        diagnosis,
        scores,
    )


# -- the extender steps (awaited between the synchronous phases) ---------------------------------------
def _named_nodes(snapshot: Snapshot, slots: np.ndarray) -> list[tuple[str, dict[str, Any]]]:
    """(name, Node object) per slot, taken before an await: what the extenders are sent."""
    return [(info.name, info.obj) for info in snapshot.node_infos(slots)]


async def _filter_with_extenders(
    extenders: Sequence[Extender],
    pod: PodInfo,
    feasible: np.ndarray,
    cache: ClusterCache,
    snapshot: Snapshot,
    diagnosis: Diagnosis,
) -> tuple[np.ndarray, Snapshot]:
    """Upstream ``findNodesThatPassExtenders``; the survivors as slots of a fresh snapshot (and that snapshot).

    A non-ignorable extender error is a SchedulingError. Rejections join the diagnosis under the extender's name.
    """
    nodes = _named_nodes(snapshot, feasible)
    try:
        outcome = await find_nodes_that_pass_extenders(extenders, pod, nodes)
    except ExtenderError as exc:
        raise SchedulingError(Status.as_error(exc)) from exc
    snapshot = cache.snapshot()
    for name, status in outcome.rejected:
        slot = snapshot.slot_of(name)
        if slot is not None:
            diagnosis.statuses.set(slot, status)
    slots = [s for s in map(snapshot.slot_of, outcome.passed) if s is not None]
    return np.asarray(slots, dtype=np.int64), snapshot


async def _nominated_node_past_extenders(
    extenders: Sequence[Extender],
    pod: PodInfo,
    slot: int,
    cache: ClusterCache,
    snapshot: Snapshot,
    diagnosis: Diagnosis,
) -> tuple[np.ndarray, Snapshot]:
    """The nominated node through the filter extenders (upstream ``evaluateNominatedNode``'s last step).

    An extender's error there is logged and the full search follows, as upstream's ``findNodesThatFitPod`` does
    with any error of ``evaluateNominatedNode``; the full search asks the extenders again.
    """
    try:
        return await _filter_with_extenders(extenders, pod, np.asarray([slot]), cache, snapshot, diagnosis)
    except SchedulingError as exc:
        name = snapshot.table.names[slot]
        logger.error("Evaluation failed on nominated node %s for pod %s: %s", name, pod.key, exc)
        return np.asarray([], dtype=np.int64), cache.snapshot()


def _with_extender_scores(
    scores: ScoreOutcome, names: Sequence[str], extender_scores: Mapping[str, Mapping[str, int]]
) -> ScoreOutcome:
    """The plugins' scores plus one column per extender (named after it), added into the totals."""
    if not extender_scores:
        return scores
    columns = tuple(
        np.asarray([per_node.get(name, 0) for name in names], dtype=np.int64) for per_node in extender_scores.values()
    )
    totals = scores.totals + sum(columns)
    return ScoreOutcome(
        scores.nodes,
        scores.plugins + tuple(extender_scores),
        scores.weights + (1,) * len(columns),
        scores.scores + columns,
        totals,
        scores.raw + columns if scores.raw else (),
    )


def _find_nodes_that_pass_filters(
    framework: Framework,
    state: CycleState,
    pod: PodInfo,
    diagnosis: Diagnosis,
    nodes: np.ndarray,
    snapshot: Snapshot,
    scoring: bool,
) -> tuple[np.ndarray, Status | None]:
    """The first K feasible nodes in round-robin order from ``next_start_node_index``; rejections go to diagnosis.

    ``scoring``: Score plugins or filter/prioritize extenders follow (else any one feasible node will do).
    The search goes on to the (K+1)-th feasible node, which is dropped: the rejections met before it are kept
    (upstream's one-worker search cancels only when a feasible node finds the list full).
    """
    count = len(nodes)
    if count == 0:
        return nodes, None
    to_find = num_feasible_nodes_to_find(framework.percentage_of_nodes_to_score, count)
    if not scoring:
        to_find = 1
    start = framework.next_start_node_index % count
    if not framework.has_filter_plugins:
        return nodes[(start + np.arange(to_find)) % count], None
    # The feasible node that ends the search: the one after the K-th.
    stop_at = to_find + 1

    rotated = np.concatenate((nodes[start:], nodes[:start])) if start else nodes
    statuses = diagnosis.statuses
    found: list[np.ndarray] = []
    found_positions: list[np.ndarray] = []
    total = 0
    begin = 0
    costly = bool(state.get(COSTLY_FILTER))
    size = min(count, stop_at + (0 if costly else max(to_find // _WINDOW_SLACK_DIVISOR, _WINDOW_SLACK_MIN)))
    while begin < count:
        outcome = framework.run_filter_plugins_with_nominated_pods(
            state,
            pod,
            rotated[begin : begin + size],
            snapshot,
            positions=np.arange(begin, begin + min(size, count - begin), dtype=np.int64),
            statuses=statuses,
        )
        if outcome.error is not None:
            return nodes[:0], outcome.error
        found.append(outcome.feasible)
        found_positions.append(outcome.feasible_positions)
        total += len(outcome.feasible)
        if total >= stop_at:
            break
        begin += size
        size = _next_window(count - begin, stop_at - total, begin, total) if costly else count - begin
    feasible = found[0] if len(found) == 1 else np.concatenate(found)
    if len(feasible) >= stop_at:
        positions = found_positions[0] if len(found_positions) == 1 else np.concatenate(found_positions)
        # The (K+1)-th feasible node ends the search; nodes after it were judged only because we work in
        # windows: forget them.
        statuses.truncate(int(positions[to_find]))
    return feasible[:to_find], None


def _next_window(left: int, needed: int, judged: int, feasible: int) -> int:
    """With a costly Filter: as many of the ``left`` nodes as should yield the ``needed`` feasible ones at the
    rate seen so far (all of them when none was feasible). Any window size gives the same verdicts."""
    if feasible == 0:
        return left
    return min(left, max(1, -(-needed * judged // feasible)))


def _prioritize_nodes(
    framework: Framework, state: CycleState, pod: PodInfo, nodes: np.ndarray, snapshot: Snapshot
) -> ScoreOutcome | None:
    """PreScore and Score over the feasible nodes; None when the profile has no Score plugins (all tie)."""
    if not framework.has_score_plugins:
        return None
    return _run_score_plugins(framework, state, pod, nodes, snapshot)


def _run_score_plugins(
    framework: Framework, state: CycleState, pod: PodInfo, nodes: np.ndarray, snapshot: Snapshot
) -> ScoreOutcome:
    """PreScore and Score (with no Score plugins: every node 0, as upstream's empty plugin scores)."""
    status = framework.run_pre_score_plugins(state, pod, nodes, snapshot)
    if not status.is_success:
        raise SchedulingError(status)
    scores, status = framework.run_score_plugins(state, pod, nodes, snapshot)
    if not status.is_success or scores is None:
        raise SchedulingError(status)
    return scores


def select_host(totals: np.ndarray, rng: random.Random | None = None) -> int:
    """Position of a node with the highest total, chosen uniformly at random among ties (seedable)."""
    best = np.flatnonzero(totals == totals.max())
    if len(best) == 1:
        return int(best[0])
    return int(best[(rng or _DEFAULT_RNG).randrange(len(best))])


def run_post_filter(framework: Framework, state: CycleState, pod: PodInfo, error: FitError) -> PostFilterResult | None:
    """Run PostFilter (preemption) after a FitError and record its message in the error's diagnosis.

    Returns the nomination PostFilter proposes, if any. Nothing runs for :class:`NoNodesAvailableError`, a
    Reserve/Permit rejection (``from_node_search`` False) or a profile without PostFilter plugins.
    """
    if isinstance(error, NoNodesAvailableError) or not error.from_node_search or not framework.has_post_filter_plugins:
        return None
    result, status = framework.run_post_filter_plugins(state, pod, error.diagnosis.node_to_status)
    return _post_filter_verdict(pod, error, result, status)


async def run_post_filter_with_extenders(
    framework: Framework, state: CycleState, pod: PodInfo, error: FitError
) -> PostFilterResult | None:
    """:func:`run_post_filter` for a profile with extenders: a PostFilter that must await them (DefaultPreemption
    with preempt verbs) answers a :class:`PendingPostFilterResult`, awaited here for its real verdict."""
    result = run_post_filter(framework, state, pod, error)
    if not isinstance(result, PendingPostFilterResult) or result.finish is None:
        return result
    try:
        result, status = await result.finish()
    except Exception as exc:  # as run_post_filter_plugins treats a plugin that raises
        result, status = None, Status.as_error(exc)
    return _post_filter_verdict(pod, error, result, status)


def _post_filter_verdict(
    pod: PodInfo, error: FitError, result: PostFilterResult | None, status: Status
) -> PostFilterResult | None:
    error.diagnosis.post_filter_msg = status.message
    if status.code is Code.ERROR:
        logger.error("PostFilter failed for pod %s: %s", pod.key, status.message)
    return result


__all__ = [
    "MIN_FEASIBLE_NODES_PERCENTAGE_TO_FIND",
    "MIN_FEASIBLE_NODES_TO_FIND",
    "NO_NODES_AVAILABLE",
    "Diagnosis",
    "FitError",
    "NoNodesAvailableError",
    "ScheduleResult",
    "SchedulingError",
    "num_feasible_nodes_to_find",
    "recheck_after_extenders",
    "run_post_filter",
    "run_post_filter_with_extenders",
    "schedule_pod",
    "schedule_pod_with_extenders",
    "select_host",
]
