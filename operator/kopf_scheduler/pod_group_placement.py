"""The placement algorithm of the pod-group cycle: upstream's ``podGroupSchedulingPlacementAlgorithm``,
``findBestPlacement`` and ``makePodGroupAssignments`` (``pkg/scheduler/schedule_one_podgroup.go``,
TopologyAwareWorkloadScheduling).

A workload-aware profile runs it for every pod group (upstream with its gates on):

1. PlacementGenerate (:meth:`Framework.run_placement_generate_plugins`) splits every node of the snapshot into
   placements; without a PlacementGenerate plugin there is one placement of every node. A failing generator ends
   the cycle with its status, one that leaves no placement with ``no feasible placements found``.
2. Each placement is assumed on the snapshot (:meth:`Snapshot.assume_placement`: the algorithm's candidate nodes,
   and the ``N`` of ``0/N nodes are available``, are the placement's) and the default algorithm runs in it; its
   trial placements are undone before the next placement. An Error in any placement ends the cycle with it.
3. No placement fits: the first placement's result, its status replaced by ``0/<placements> placements are
   available, first placement status: <its error>``. One fits (or waits on preemption): its result. Several: the
   PlacementScore plugins rank them by the members each placed (:meth:`Framework.run_placement_score_plugins`),
   the highest total wins, ties broken at random.

The pod-group cycle (``schedule_one_pod_group.py``) hands this module its default algorithm as a callable, so the
module knows the results only through :class:`GroupTrial`. What was tried is kept per group for ``/explain``
(:class:`PlacementsTried`).
"""

from __future__ import annotations

import logging
import random
import time
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar

from kopf_scheduler.framework import CycleState
from kopf_scheduler.framework.placement import (
    Placement,
    PlacementPluginScores,
    PodGroupAssignments,
    PodGroupInfo,
    ProposedAssignment,
)
from kopf_scheduler.framework.runtime import Framework
from kopf_scheduler.framework.runtime.placement import status_error_text
from kopf_scheduler.framework.status import Code, Status
from kopf_scheduler.state.cache import Snapshot
from kopf_scheduler.state.pod_info import PodInfo

logger = logging.getLogger("kopf_scheduler")

#: Pod groups whose last placements are kept for ``/explain`` (the least recently scheduled are dropped).
MAX_GROUPS = 1000
#: Members named per placement in an explanation (the rest are counted).
MAX_MEMBERS = 10


class PodTrial(Protocol):
    """One member's outcome in a placement's trial (upstream ``algorithmResult``'s ``GetPod``/``GetNodeName``)."""

    @property
    def pod(self) -> PodInfo: ...

    @property
    def node_name(self) -> str:
        """The node the trial placed it on ("" when it was not placed)."""
        ...

    @property
    def status(self) -> Status: ...


class GroupTrial(Protocol):
    """The default algorithm's result in one placement (upstream ``podGroupAlgorithmResult``)."""

    status: Status
    waiting_on_preemption: bool

    @property
    def pod_trials(self) -> Sequence[PodTrial]: ...


R = TypeVar("R", bound=GroupTrial)


@dataclass(slots=True)
class PlacementTried:
    """One placement of a cycle, for ``/explain``: its size and what the group's trial in it came to."""

    name: str
    nodes: int
    status: Status
    waiting_on_preemption: bool = False
    #: Member name → its node, or why it was not placed (the members of this trial, in the order tried).
    members: list[tuple[str, str, bool]] = field(default_factory=list)
    score: int | None = None
    chosen: bool = False


@dataclass(slots=True)
class PlacementsTried:
    """The placements the last cycle of a pod group tried (upstream keeps nothing of them)."""

    at: float
    #: The PlacementGenerate plugin ("" without one) and, when it failed or left nothing, its status.
    generator: str
    generate_status: Status | None = None
    placements: list[PlacementTried] = field(default_factory=list)
    #: The cycle's verdict from the placement algorithm (Success, or why the group did not fit).
    status: Status | None = None
    #: Placements not tried: one the group fit in wholly came first, and none could outscore it.
    skipped: int = 0

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(self.at)),
            "generator": self.generator or None,
            "count": len(self.placements),
        }
        if self.generate_status is not None:
            out["generateStatus"] = _status_json(self.generate_status)
        if self.status is not None:
            out["status"] = _status_json(self.status)
        out["tried"] = [_placement_json(p) for p in self.placements]
        if self.skipped:
            out["notTried"] = self.skipped
        return out


def _status_json(status: Status) -> dict[str, Any]:
    out: dict[str, Any] = {"code": status.code.label, "message": status.message}
    if status.plugin:
        out["plugin"] = status.plugin
    return out


def _placement_json(placement: PlacementTried) -> dict[str, Any]:
    out: dict[str, Any] = {"name": placement.name, "nodes": placement.nodes, **_status_json(placement.status)}
    if placement.waiting_on_preemption:
        out["waitingOnPreemption"] = True
    if placement.score is not None:
        out["score"] = placement.score
    if placement.chosen:
        out["chosen"] = True
    shown = placement.members[:MAX_MEMBERS]
    out["members"] = [{"pod": pod, ("node" if placed else "message"): text} for pod, text, placed in shown]
    if len(placement.members) > len(shown):
        out["moreMembers"] = len(placement.members) - len(shown)
    return out


class PlacementHistory:
    """The last :class:`PlacementsTried` of each pod group, at most :data:`MAX_GROUPS` of them."""

    def __init__(self, limit: int = MAX_GROUPS) -> None:
        self._limit = limit
        self._tried: OrderedDict[tuple[str, str], PlacementsTried] = OrderedDict()

    def record(self, namespace: str, name: str, tried: PlacementsTried) -> None:
        key = (namespace, name)
        self._tried.pop(key, None)
        self._tried[key] = tried
        while len(self._tried) > self._limit:
            self._tried.popitem(last=False)

    def get(self, namespace: str, name: str) -> PlacementsTried | None:
        return self._tried.get((namespace, name))

    def __len__(self) -> int:
        return len(self._tried)


def placement_algorithm(
    framework: Framework,
    snapshot: Snapshot,
    group: PodGroupInfo,
    default_algorithm: Callable[[bool], R],
    failed: Callable[[Status], R],
    *,
    rng: random.Random,
    tried: PlacementsTried | None = None,
    release: Callable[[R], None] = lambda result: None,
) -> R:
    """Upstream ``podGroupSchedulingPlacementAlgorithm`` over ``snapshot``: ``default_algorithm`` runs the default
    pod-group algorithm on the snapshot as it is (with the placement assumed; told whether its trial placement
    may be kept, which it then is when the group is feasible: the result is the answer), ``release`` undoes such a
    kept trial, ``failed`` makes a result of a group-wide status alone. ``tried`` (if given) collects what
    happened, for ``/explain``.

    When every PlacementScore plugin knows the most it can give a placement (the placement holding every member,
    :meth:`Framework.run_placement_score_bounds`), the placements are tried best bound first, equal bounds in a
    random order, and the first the group fits in is the answer if it holds every member (any fitting one without
    PlacementScore plugins): the ones tried before it do not fit, the untried ones can at most tie with it, and
    upstream picks one of the best at random, which the first of them in a random order is, each with the same
    chance. A placement that fits a part of the group ends that: every placement is tried and scored, as
    upstream does. One trial instead of one per placement while the best placement has room. Errors are reported
    as upstream's walk in generation order meets them (:func:`_first_error`)."""
    # The pod-group cycle's own state (upstream ``podGroupCycleState``); its plugin metrics are always recorded.
    state = CycleState()
    state.record_plugin_metrics = True
    placements, status = framework.run_placement_generate_plugins(state, group, snapshot.order)
    if tried is not None:
        tried.generator = framework.placement_generate_plugins[0][0] if framework.placement_generate_plugins else ""
    if not status.is_success:
        if tried is not None:
            tried.generate_status = tried.status = status
        return failed(status)

    bounds = framework.run_placement_score_bounds(state, group, placements) if len(placements) > 1 else None
    order = list(range(len(placements))) if bounds is None else _best_first(bounds, rng)
    early = bounds is not None
    keep = len(placements) == 1 or early
    results: dict[int, R] = {}

    def trial(index: int) -> R:
        result = _trial(snapshot, group, placements[index], lambda: default_algorithm(keep), failed)
        results[index] = result
        if tried is not None:
            tried.placements.append(_tried(placements[index], result))
        return result

    for index in order:
        result = trial(index)
        if result.status.code is Code.ERROR:
            return _done(tried, _first_error(index, results, trial, release), skipped=len(placements) - len(results))
        if early and _fits(result):
            if not framework.placement_score_plugins or _holds_every_member(result, group):
                return _done(tried, result, placements[index], skipped=len(placements) - len(results))
            early = False  # a part of the group may outscore the untried placements
        if keep and len(placements) > 1:
            release(result)

    fitting = [(placements[i], results[i]) for i in range(len(placements)) if _fits(results[i])]
    if not fitting:
        first = results[0]
        # Which placement's account is reported is arbitrary upstream (its first in a Go map's order); ours is the
        # first generated.
        text = f"0/{len(placements)} placements are available, first placement status: "
        first.status = Status(Code.UNSCHEDULABLE, (text + status_error_text(first.status),))
        return _done(tried, first)
    if len(fitting) == 1:
        return _done(tried, fitting[0][1], fitting[0][0])
    best, status = find_best_placement(framework, state, group, fitting, rng, tried)
    if best is None:
        return _done(tried, failed(status))
    return _done(tried, best[1], best[0])


def _best_first(bounds: Sequence[int], rng: random.Random) -> list[int]:
    """Placement indexes by bound, highest first, equal bounds in a uniformly random order."""
    keys = [(-bound, rng.random()) for bound in bounds]
    return sorted(range(len(bounds)), key=keys.__getitem__)


def _holds_every_member(result: GroupTrial, group: PodGroupInfo) -> bool:
    return sum(1 for trial in result.pod_trials if trial.node_name) >= len(group.unscheduled_pods)


def _trial(
    snapshot: Snapshot,
    group: PodGroupInfo,
    placement: Placement,
    run: Callable[[], R],
    failed: Callable[[Status], R],
) -> R:
    """One placement assumed on the snapshot, the default algorithm in it, the placement forgotten (the trial's
    members stay assumed when it kept them)."""
    logger.debug("Assuming placement in snapshot: podGroup=%s placement=%s", group.key, placement.name)
    try:
        snapshot.assume_placement(placement.nodes)
    except LookupError as error:
        return failed(Status.as_error(RuntimeError(f"failed to assume pod group placement: {error}")))
    try:
        return run()
    finally:
        snapshot.forget_placement()


def _fits(result: GroupTrial) -> bool:
    """Upstream's successful result: feasible, or feasible once preemption's victims are gone."""
    return result.status.is_success or result.waiting_on_preemption


def _first_error(index: int, results: dict[int, R], trial: Callable[[int], R], release: Callable[[R], None]) -> R:
    """The error upstream's walk in generation order returns: that of the first placement with one. Placements
    before ``index`` that a random order had not reached are tried now (their kept trials undone)."""
    for earlier in range(index):
        result = results.get(earlier)
        if result is None:
            result = trial(earlier)
            if result.status.code is not Code.ERROR:
                release(result)
        if result.status.code is Code.ERROR:
            return result
    return results[index]


def find_best_placement(
    framework: Framework,
    state: CycleState,
    group: PodGroupInfo,
    fitting: Sequence[tuple[Placement, R]],
    rng: random.Random,
    tried: PlacementsTried | None = None,
) -> tuple[tuple[Placement, R] | None, Status]:
    """Upstream ``findBestPlacement``: the PlacementScore plugins score each fitting placement by the members its
    trial placed (``makePodGroupAssignments``); the highest total wins, ties at random."""
    assignments = [make_pod_group_assignments(placement, result) for placement, result in fitting]
    scores, status = framework.run_placement_score_plugins(state, group, assignments)
    if scores is None:
        return None, status
    if tried is not None:
        _record_scores(tried, scores)
    best_total = max(score.total_score for score in scores)
    best = [i for i, score in enumerate(scores) if score.total_score == best_total]
    index = best[0] if len(best) == 1 else best[rng.randrange(len(best))]
    return fitting[index], status


def make_pod_group_assignments(placement: Placement, result: GroupTrial) -> PodGroupAssignments:
    """Upstream ``makePodGroupAssignments`` for one placement: the members its trial put on a node."""
    proposed = tuple(ProposedAssignment(t.pod, t.node_name) for t in result.pod_trials if t.node_name)
    return PodGroupAssignments(placement, proposed)


def _tried(placement: Placement, result: GroupTrial) -> PlacementTried:
    members = [
        (t.pod.name, t.node_name, True) if t.node_name else (t.pod.name, t.status.message, False)
        for t in result.pod_trials
    ]
    return PlacementTried(placement.name, len(placement.nodes), result.status, result.waiting_on_preemption, members)


def _record_scores(tried: PlacementsTried, scores: Sequence[PlacementPluginScores]) -> None:
    by_name = {p.name: p for p in tried.placements}
    for score in scores:
        entry = by_name.get(score.placement.name)
        if entry is not None:
            entry.score = score.total_score


def _done(tried: PlacementsTried | None, result: R, chosen: Placement | None = None, *, skipped: int = 0) -> R:
    if tried is not None:
        tried.status = result.status
        tried.skipped = skipped
        if chosen is not None:
            for entry in tried.placements:
                entry.chosen = entry.name == chosen.name
    return result


__all__ = [
    "MAX_GROUPS",
    "GroupTrial",
    "PlacementHistory",
    "PlacementTried",
    "PlacementsTried",
    "PodTrial",
    "find_best_placement",
    "make_pod_group_assignments",
    "placement_algorithm",
]
