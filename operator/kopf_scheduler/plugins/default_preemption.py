"""DefaultPreemption: evict lower-priority pods so a pod that fits nowhere gets a node (upstream v1.36.3).

Restates upstream's ``plugins/defaultpreemption/default_preemption.go`` with the evaluator of
``framework/preemption/preemption.go`` and the asynchronous executor of ``framework/preemption/executor.go``
(SchedulerAsyncPreemption, on in 1.36; reference §6 and §0.1). The steps, each its own method:

1. PostFilter counts an attempt, re-reads the preemptor and checks it may preempt (:meth:`eligible`).
2. :meth:`find_candidates`: the nodes Filter called Unschedulable (not UUR), a sample of them from a random
   offset, each dry-run by :meth:`select_victims_on_node` (lower-priority pods out, filters with nominated
   pods, PDB split, reprieve). HTTP extenders with a ``preempt`` verb may then drop candidates or change their
   victims (:meth:`process_extenders`, upstream ``callExtenders``). That is an await, so a profile with such
   extenders gets a :class:`~kopf_scheduler.framework.extender.PendingPostFilterResult` from PostFilter, which
   its (already async) extender cycle awaits; every other profile's PostFilter stays synchronous.
3. :meth:`select_candidate`: ``pickOneNodeForPreemption``'s criteria (:mod:`._preemption`).
4. :class:`PreemptionExecutor` evicts the victims off the cycle (``Handle.spawn``) while the preemptor is held
   at PreEnqueue; it is re-activated if an API call fails.

Where we differ: upstream dry-runs nodes in parallel, so which nodes end up sampled can vary run to run;
here the verdicts are read one by one from the offset, which is one of upstream's possible outcomes. They are
computed a batch of nodes at a time, all victims off at once and one Filter pass per reprieve round, while no
PreFilter extension runs (no pod affinity, topology spread or ReadWriteOncePod claim in play); else node by
node. The last
``pickOneNodeForPreemption`` tie-break is upstream's Go map order (arbitrary); here the first candidate found.
``PostFilterResult.node_messages`` (for ``kopf-scheduler explain``) is ours. With preempt extenders, the
candidates they keep are picked from in the order the dry run found them (upstream: Go's map order).
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections.abc import Callable, Coroutine, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, ClassVar

import numpy as np

from kopf_scheduler.api.args import DefaultPreemptionArgs
from kopf_scheduler.framework import (
    QUEUE,
    QUEUE_SKIP,
    SUCCESS,
    ActionType,
    ClusterEvent,
    ClusterEventWithHint,
    Code,
    CycleState,
    EventResource,
    Handle,
    PostFilterPlugin,
    PostFilterResult,
    PreEnqueuePlugin,
    QueueingHint,
    Status,
    nominated_node_name,
)
from kopf_scheduler.framework.events import as_pod
from kopf_scheduler.framework.extender import (
    Extender,
    ExtenderError,
    PendingPostFilterResult,
    PreemptionVictims,
    process_preemption_with_extenders,
)
from kopf_scheduler.framework.interface import APIError, NodeToStatus
from kopf_scheduler.framework.verdicts import FilterOutcome
from kopf_scheduler.plugins._preemption import (
    Budget,
    DryRunRemoval,
    NodesDryRun,
    Victims,
    calculate_num_candidates,
    pick_one_node_for_preemption,
    pod_terminating_by_preemption,
    sort_by_importance,
    split_by_pdb_violation,
)
from kopf_scheduler.state.cache import NodeInfo, Snapshot
from kopf_scheduler.state.objects import POD_DISRUPTION_BUDGET
from kopf_scheduler.state.pod_info import PodInfo

log = logging.getLogger(__name__)

#: The fewest nodes dry-run together once the candidates still wanted are fewer (see ``find_candidates``).
MIN_DRY_RUN_BATCH = 16

#: One node's dry run: (victims, how many of them violate a PDB, status).
DryRunVerdict = tuple[list[PodInfo], int, Status]

NAME = "DefaultPreemption"

# Upstream's texts (they end up, after "preemption: ", in FailedScheduling events and pod conditions).
NOT_ELIGIBLE_NEVER = "not eligible due to preemptionPolicy=Never."
NOT_ELIGIBLE_TERMINATING = "not eligible due to a terminating pod on the nominated node."
NOT_HELPFUL = "Preemption is not helpful for scheduling"
NO_VICTIMS = "No preemption victims found for incoming pod"
NO_CANDIDATE = "no candidate node for preemption"
NO_NODES = "no nodes available"
WAITING_FOR_PREEMPTION = "waiting for the preemption for this pod to be finished"
PREEMPTION_PREFIX = "preemption: "

# Messages per node for ``kopf-scheduler explain`` (ours, not upstream's).
EXPLAIN_UNRESOLVABLE = "UnschedulableAndUnresolvable: preemption cannot help"
EXPLAIN_NO_VICTIMS = "not a candidate: no lower-priority pods"
EXPLAIN_NOT_EXAMINED = "not examined: enough candidates were found on other nodes"
EXPLAIN_DROPPED_BY_EXTENDER = "not a candidate: dropped by an extender's preempt verb"


@dataclass(frozen=True, slots=True)
class Candidate:
    """A node where evicting ``victims`` would let the preemptor fit (upstream ``preemption.Candidate``)."""

    name: str
    victims: Victims


@dataclass(slots=True)
class CandidateSearch:
    """What :meth:`DefaultPreemption.find_candidates` found: candidates (non-violating first) and, per examined
    node that is not one, its status (upstream's ``NodeToStatus`` of the dry run)."""

    candidates: list[Candidate]
    statuses: dict[str, Status]
    errors: list[Status]
    #: Potential nodes (filter said Unschedulable), in the order they were tried.
    examined: list[str]
    potential: list[str]


class DefaultPreemption(PreEnqueuePlugin, PostFilterPlugin):
    name: ClassVar[str] = NAME
    args_model = DefaultPreemptionArgs

    def __init__(self, *, handle: Handle, args: Any = None) -> None:
        super().__init__(handle=handle, args=args)
        self.args: DefaultPreemptionArgs = args if isinstance(args, DefaultPreemptionArgs) else DefaultPreemptionArgs()
        #: The random offset of the candidate search (upstream ``getOffsetRand``); tests seed or replace it.
        self.rng = random.Random()
        #: Start time of pods that have none yet (upstream ``time.Now()``); tests replace it.
        self.clock: Callable[[], float] = time.time
        self.executor = PreemptionExecutor(handle, NAME)

    def preempting_extenders(self, pod: PodInfo) -> tuple[Extender, ...]:
        """The extenders :meth:`process_extenders` would call for ``pod``: a preempt verb and interested in it.

        Upstream rebuilds the candidate list from a map whenever any extender is configured; with none of these
        that is the same list (in Go's map order), so only a profile with one of these pays for an await.
        """
        return tuple(e for e in self.handle.extenders if e.supports_preemption and e.is_interested(pod))

    # -- PreEnqueue / events -------------------------------------------------------------------------
    def pre_enqueue(self, pod: PodInfo) -> Status:
        if self.executor.is_pod_running_preemption(pod.uid):
            return Status.unschedulable(WAITING_FOR_PREEMPTION, plugin=self.name, unresolvable=True)
        return SUCCESS

    def events_to_register(self) -> list[ClusterEventWithHint]:
        """Pod/Delete: registered so a deletion may lift the PreEnqueue hold (upstream's hint always says
        QueueSkip; ours says Queue for the deletion that lifts the hold, see :meth:`after_victim_deletion`)."""
        return [ClusterEventWithHint(ClusterEvent(EventResource.POD, ActionType.DELETE), self.after_victim_deletion)]

    def after_victim_deletion(self, pod: PodInfo, old: Any, new: Any) -> QueueingHint:
        """Queue the preemptor when this deletion took the last of its victims off the node, else Skip.

        Upstream's hint is always QueueSkip: the plugins that rejected the pod decide, and its hold ends with the
        last victim, whose deletion their hints see. Ours holds until *every* victim is watched gone (see
        :class:`PreemptionExecutor`), so the deletion that ends the hold may be one no rejecting plugin cares
        about (a victim without the host port that was in the way): without this the preemptor waited in the
        unschedulable pool for the periodic flush (conformance seed 81, p13)."""
        victim = as_pod(old)
        if victim is None or not self.executor.is_victim_of(pod.uid, victim.uid):
            return QUEUE_SKIP
        return QUEUE_SKIP if self.executor.is_pod_running_preemption(pod.uid) else QUEUE

    # -- PostFilter ----------------------------------------------------------------------------------
    def post_filter(
        self, state: CycleState, pod: PodInfo, filtered: NodeToStatus
    ) -> tuple[PostFilterResult | None, Status]:
        try:
            result, status = self.preempt(state, pod, filtered)
        finally:
            self.handle.metrics.preemption_attempt()
        return result, _prefixed(status)

    def preempt(
        self, state: CycleState, pod: PodInfo, filtered: NodeToStatus
    ) -> tuple[PostFilterResult | None, Status]:
        """Upstream ``Evaluator.Preempt`` (its message without the ``preemption: `` prefix)."""
        latest = self.handle.get_pod(pod.uid)
        if latest is None:
            return None, Status.as_error(LookupError(f'pod "{pod.name}" not found'))
        pod = latest
        nominated = nominated_node_name(pod)
        ok, message = self.eligible(pod, status_of(filtered, nominated))
        if not ok:
            # Upstream returns no result (the nomination stays); ours carries only the explanation (a Noop).
            names = [info.name for info in self.handle.snapshot().node_infos()]
            explained = SameForAll(names, f"preemption not attempted: {message}")
            return PostFilterResult(node_messages=explained), Status.unschedulable(message)

        snapshot = self.handle.snapshot()
        all_nodes = [info.name for info in snapshot.node_infos()]
        if not all_nodes:
            return None, Status.as_error(RuntimeError(NO_NODES))
        now = self.clock()
        search = self.find_candidates(state, pod, filtered, snapshot, now)
        messages = NodeMessages(all_nodes, filtered, search)
        if search.errors and not search.candidates:
            return None, aggregate_error(search.errors)
        if not search.candidates:
            text = fit_error_message(len(all_nodes), search.statuses, NOT_HELPFUL)
            return PostFilterResult(clear_nomination=True, node_messages=messages), Status.unschedulable(text)

        extenders = self.preempting_extenders(pod)
        if extenders:
            finish = self._finish_with_extenders(extenders, pod, search.candidates, snapshot, messages, now)
            return PendingPostFilterResult(node_messages=messages, finish=finish), SUCCESS
        return self.conclude(pod, search.candidates, messages, now)

    def conclude(
        self, pod: PodInfo, candidates: Sequence[Candidate], messages: NodeMessages, now: float
    ) -> tuple[PostFilterResult | None, Status]:
        """Upstream ``Preempt`` after ``callExtenders``: pick the best candidate and start evicting its victims."""
        best = self.select_candidate(candidates, now)
        if best is None or not best.name:
            return None, Status.unschedulable(NO_CANDIDATE)
        messages.chosen = best.name
        self.executor.start(best, pod)
        return PostFilterResult(nominated_node_name=best.name, node_messages=messages), SUCCESS

    def _finish_with_extenders(
        self,
        extenders: Sequence[Extender],
        pod: PodInfo,
        candidates: Sequence[Candidate],
        snapshot: Snapshot,
        messages: NodeMessages,
        now: float,
    ) -> Callable[[], Coroutine[Any, Any, tuple[PostFilterResult | None, Status]]]:
        """The rest of :meth:`preempt` once the preempt extenders answered (``PendingPostFilterResult.finish``).

        The pods on the candidate nodes are taken now, as the cycle's snapshot holds them (upstream's
        ``convertToVictims`` reads the snapshot), so a victim deleted during the call is still found by its UID.
        """
        pods_on = {c.name: _pods_on(snapshot, c.name) for c in candidates}

        def pods_on_node(name: str) -> Sequence[PodInfo] | None:
            return pods_on[name] if name in pods_on else _pods_on(self.handle.snapshot(), name)

        async def finish() -> tuple[PostFilterResult | None, Status]:
            kept, status = await self.process_extenders(extenders, pod, candidates, pods_on_node)
            if not status.is_success:
                return None, _prefixed(status)
            if self.handle.get_pod(pod.uid) is None:  # deleted during the calls: evict nobody for it
                return None, _prefixed(Status.as_error(LookupError(f'pod "{pod.name}" not found')))
            messages.after_extenders(kept)
            result, status = self.conclude(pod, kept, messages, now)
            return result, _prefixed(status)

        return finish

    # -- 1. eligibility ------------------------------------------------------------------------------
    def eligible(self, pod: PodInfo, nominated_status: Status) -> tuple[bool, str]:
        """Upstream ``PodEligibleToPreemptOthers``: (may preempt, why not)."""
        spec = pod.obj.get("spec") or {}
        if spec.get("preemptionPolicy") == "Never":
            return False, NOT_ELIGIBLE_NEVER
        nominated = nominated_node_name(pod)
        if nominated:
            if nominated_status.code is Code.UNSCHEDULABLE_AND_UNRESOLVABLE:
                return True, ""
            node = self.handle.snapshot().cache.node(nominated)
            if node is not None:
                for other in node.pods.values():
                    if self.is_preemption_allowed(node, other, pod) and pod_terminating_by_preemption(other):
                        return False, NOT_ELIGIBLE_TERMINATING
        return True, ""

    def is_preemption_allowed(self, node: NodeInfo, victim: PodInfo, preemptor: PodInfo) -> bool:
        """Upstream ``isPreemptionAllowed`` with the default ``IsEligiblePod`` (always true): lower priority."""
        return victim.priority < preemptor.priority

    # -- 2. candidates -------------------------------------------------------------------------------
    def offset_and_num_candidates(self, num_nodes: int) -> tuple[int, int]:
        """Upstream ``GetOffsetAndNumCandidates``: a random start in [0, n) and how many candidates to find."""
        args = self.args
        count = calculate_num_candidates(
            num_nodes, args.min_candidate_nodes_percentage, args.min_candidate_nodes_absolute
        )
        return self.rng.randrange(num_nodes), count

    def find_candidates(
        self, state: CycleState, pod: PodInfo, filtered: NodeToStatus, snapshot: Snapshot, now: float
    ) -> CandidateSearch:
        """Upstream ``findCandidates`` + ``DryRunPreemption``: nodes tried in order from the offset.

        While no PreFilter extension runs (:meth:`Framework.pre_filter_extensions_idle`) the nodes are dry-run a
        batch at a time (:meth:`select_victims_on_nodes`), each batch as large as the candidates still wanted;
        the verdicts are then read in node order and the search stops exactly where the one-by-one search would
        have, so nodes judged beyond that point are forgotten.
        """
        potential = potential_nodes(filtered, snapshot.node_names())
        search = CandidateSearch([], {}, [], [], potential)
        if not potential:
            return search
        budgets = [Budget.from_obj(obj) for obj in snapshot.cache.objects.all(POD_DISRUPTION_BUDGET)]
        offset, wanted = self.offset_and_num_candidates(len(potential))
        order = potential[offset:] + potential[:offset]
        batched = self.handle.plugins_runner.pre_filter_extensions_idle(state)
        non_violating: list[Candidate] = []
        violating: list[Candidate] = []
        start = 0
        while start < len(order):
            size = max(wanted - len(non_violating) - len(violating), MIN_DRY_RUN_BATCH) if batched else 1
            batch = order[start : start + size]
            start += len(batch)
            for name, verdict in zip(
                batch, self._dry_run_batch(state, pod, batch, snapshot, budgets, now), strict=True
            ):
                if verdict is None:
                    continue
                search.examined.append(name)
                victims, violations, status = verdict
                if status.is_success and victims:
                    (violating if violations else non_violating).append(
                        Candidate(name, Victims(tuple(victims), violations))
                    )
                    if non_violating and len(non_violating) + len(violating) >= wanted:
                        search.candidates = non_violating + violating
                        return search
                    continue
                if status.is_success:
                    status = Status.as_error(RuntimeError(f'expected at least one victim pod on node "{name}"'))
                if status.code is Code.ERROR:
                    search.errors.append(status)
                search.statuses[name] = status
        search.candidates = non_violating + violating
        return search

    def _dry_run_batch(
        self,
        state: CycleState,
        pod: PodInfo,
        names: Sequence[str],
        snapshot: Snapshot,
        budgets: Sequence[Budget],
        now: float,
    ) -> list[DryRunVerdict | None]:
        """Per node of ``names``: its dry run's (victims, PDB violations, status), None for a node gone.

        A node without lower-priority pods is settled before anything is cloned (the common case for a pod of
        the lowest priority). Several nodes to dry-run go through :meth:`select_victims_on_nodes`; should one of
        its filter passes fail with an Error, the nodes are dry-run again one by one (so that error lands on
        its own node, as upstream's).
        """
        verdicts: list[DryRunVerdict | None] = []
        to_run: dict[int, NodeInfo] = {}
        for i, name in enumerate(names):
            node = snapshot.cache.node(name)
            if node is not None and not any(self.is_preemption_allowed(node, p, pod) for p in node.pods.values()):
                verdicts.append(([], 0, Status.unschedulable(NO_VICTIMS, unresolvable=True)))
                continue
            verdicts.append(None)
            if node is not None:
                to_run[i] = node
        together = None
        if len(to_run) > 1:
            together = self.select_victims_on_nodes(state.clone(), pod, list(to_run.values()), snapshot, budgets, now)
        if together is not None:
            verdicts_of = dict(zip(to_run, together, strict=True))
        else:
            verdicts_of = {
                i: self.select_victims_on_node(state.clone(), pod, node, snapshot, budgets, now)
                for i, node in to_run.items()
            }
        for i, verdict in verdicts_of.items():
            verdicts[i] = verdict
        return verdicts

    def select_victims_on_nodes(
        self,
        state: CycleState,
        pod: PodInfo,
        nodes: Sequence[NodeInfo],
        snapshot: Snapshot,
        budgets: Sequence[Budget],
        now: float,
    ) -> list[DryRunVerdict] | None:
        """:meth:`select_victims_on_node` for many nodes at once, while no PreFilter extension runs.

        Every node's lower-priority pods are taken off together and the nodes judged in one Filter pass; then
        the reprieve goes in rounds: round *k* puts back each node's *k*-th pod (most important first, PDB
        violators first) and judges those nodes together; a node where it no longer fits loses that pod again.
        Each node meets the same pods in the same order as alone, and with no extension a node's verdict
        depends only on its own pods, so the verdicts are the one-by-one ones. For the same reason the victims
        leave only their nodes' own accounting (:class:`NodesDryRun`), not the cluster-wide indexes, each step's
        victims of every node together: ≈ 3600 removals and as many re-adds per preemptor at 5000 nodes. None
        when a Filter pass returned an Error (the caller then dry-runs the nodes one by one). The cache is as
        before on return.
        """
        framework = self.handle.plugins_runner
        with NodesDryRun(snapshot.cache, nodes) as dry_run:
            reprieves = [
                _Reprieve(node, [p for p in node.pods.values() if self.is_preemption_allowed(node, p, pod)])
                for node in nodes
            ]
            dry_run.remove([victim for reprieve in reprieves for victim in reprieve.potential])
            slots = np.asarray([node.slot for node in nodes], dtype=np.int64)
            outcome = framework.run_filter_plugins_with_nominated_pods(state, pod, slots, snapshot)
            if outcome.error is not None:
                return None
            fitting = set(outcome.feasible.tolist())
            verdicts: list[DryRunVerdict] = []
            for reprieve in reprieves:
                if reprieve.node.slot in fitting:
                    reprieve.order_by_importance(budgets, now)
                    verdicts.append(([], 0, SUCCESS))
                else:
                    reprieve.done = True
                    verdicts.append(([], 0, outcome.statuses.get(reprieve.node.slot) or Status.unschedulable()))
            round_ = 0
            while active := [r for r in reprieves if not r.done and round_ < len(r.queue)]:
                dry_run.restore([reprieve.queue[round_][0] for reprieve in active])
                slots = np.asarray([r.node.slot for r in active], dtype=np.int64)
                outcome = framework.run_filter_plugins_with_nominated_pods(state, pod, slots, snapshot)
                if outcome.error is not None:
                    return None
                fitting = set(outcome.feasible.tolist())
                dry_run.remove([r.evict(round_) for r in active if r.node.slot not in fitting])
                round_ += 1
        return [
            verdict if reprieve.done else reprieve.verdict(now)
            for verdict, reprieve in zip(verdicts, reprieves, strict=True)
        ]

    def select_victims_on_node(
        self,
        state: CycleState,
        pod: PodInfo,
        node: NodeInfo,
        snapshot: Snapshot,
        budgets: Sequence[Budget],
        now: float,
    ) -> tuple[list[PodInfo], int, Status]:
        """Upstream ``SelectVictimsOnNode``: the fewest pods (least important first) to evict from ``node``.

        Works on the shared cache through :class:`DryRunRemoval` (so the node is exactly as before on return)
        and on ``state``, a clone the caller made, kept right by the PreFilter extensions.
        """
        framework = self.handle.plugins_runner
        potential = [p for p in node.pods.values() if self.is_preemption_allowed(node, p, pod)]
        one = np.asarray([node.slot], dtype=np.int64)
        with DryRunRemoval(snapshot.cache, node) as dry_run:

            def remove(victim: PodInfo) -> Status:
                dry_run.remove(victim)
                return framework.run_pre_filter_extension_remove_pod(state, pod, victim, node)

            def add(victim: PodInfo) -> Status:
                dry_run.restore(victim.uid)
                return framework.run_pre_filter_extension_add_pod(state, pod, victim, node)

            def fits() -> Status:
                return _node_status(framework.run_filter_plugins_with_nominated_pods(state, pod, one, snapshot), node)

            for victim in potential:
                status = remove(victim)
                if not status.is_success:
                    return [], 0, _as_error(status)
            if not potential:
                return [], 0, Status.unschedulable(NO_VICTIMS, unresolvable=True)
            status = fits()
            if not status.is_success:
                return [], 0, status
            ordered = sort_by_importance(potential, now)
            violating, non_violating = split_by_pdb_violation(ordered, budgets)
            victims: list[PodInfo] = []
            num_violating = 0
            for group, counts in ((violating, True), (non_violating, False)):
                for victim in group:
                    status = add(victim)
                    if not status.is_success:
                        return [], 0, _as_error(status)
                    if not fits().is_success:  # an Error counts as not fitting, as upstream
                        status = remove(victim)
                        if not status.is_success:
                            return [], 0, _as_error(status)
                        victims.append(victim)
                        num_violating += counts
        if violating and non_violating:
            victims = sort_by_importance(victims, now)
        return victims, num_violating, SUCCESS

    async def process_extenders(
        self,
        extenders: Sequence[Extender],
        pod: PodInfo,
        candidates: Sequence[Candidate],
        pods_on_node: Callable[[str], Sequence[PodInfo] | None],
    ) -> tuple[list[Candidate], Status]:
        """Upstream ``callExtenders``: HTTP extenders with a ``preempt`` verb may drop candidates or change victims.

        A non-ignorable extender's error (or a node it left without victims) is an Error with its text; an
        ignorable one is skipped. The candidates kept come in the dry run's order, then any node only an extender
        named (upstream takes those too).
        """
        sent = {c.name: PreemptionVictims(c.victims.pods, c.victims.num_pdb_violations) for c in candidates}
        try:
            answer = await process_preemption_with_extenders(extenders, pod, sent, pods_on_node)
        except ExtenderError as exc:
            return [], Status.as_error(exc)
        order = [c.name for c in candidates if c.name in answer] + [n for n in answer if n not in sent]
        return [Candidate(n, Victims(answer[n].pods, answer[n].num_pdb_violations)) for n in order], SUCCESS

    # -- 3. the pick ---------------------------------------------------------------------------------
    def select_candidate(self, candidates: Sequence[Candidate], now: float) -> Candidate | None:
        """Upstream ``SelectCandidate``: the only one, or ``pickOneNodeForPreemption`` among several."""
        if not candidates:
            return None
        if len(candidates) == 1:
            return candidates[0]
        by_node = {c.name: c for c in candidates}
        picked = pick_one_node_for_preemption({name: c.victims for name, c in by_node.items()}, now)
        return by_node.get(picked, candidates[0])


@dataclass(slots=True)
class _Reprieve:
    """One node's state in :meth:`DefaultPreemption.select_victims_on_nodes`."""

    node: NodeInfo
    potential: list[PodInfo]
    #: (pod, whether it violates a PDB) in the order they are put back.
    queue: list[tuple[PodInfo, bool]] = field(default_factory=list)
    victims: list[PodInfo] = field(default_factory=list)
    num_violating: int = 0
    mixed: bool = False
    done: bool = False

    def order_by_importance(self, budgets: Sequence[Budget], now: float) -> None:
        violating, non_violating = split_by_pdb_violation(sort_by_importance(self.potential, now), budgets)
        self.queue = [(p, True) for p in violating] + [(p, False) for p in non_violating]
        self.mixed = bool(violating and non_violating)

    def evict(self, index: int) -> PodInfo:
        """The pod put back in round ``index`` is a victim after all (returned, for the caller to take off)."""
        victim, violates = self.queue[index]
        self.victims.append(victim)
        self.num_violating += violates
        return victim

    def verdict(self, now: float) -> DryRunVerdict:
        victims = sort_by_importance(self.victims, now) if self.mixed else self.victims
        return victims, self.num_violating, SUCCESS


# -- helpers -------------------------------------------------------------------------------------------
def status_of(filtered: NodeToStatus, name: str) -> Status:
    """Upstream ``NodeToStatus.Get``: the node's status, or that of absent nodes (UUR unless said otherwise)."""
    found = filtered.get(name) if name else None
    if found is not None:
        return found
    absent = getattr(filtered, "absent_nodes_status", None)
    return absent if isinstance(absent, Status) else Status(Code.UNSCHEDULABLE_AND_UNRESOLVABLE)


def potential_nodes(filtered: NodeToStatus, names: Iterator[str] | Sequence[str]) -> list[str]:
    """Upstream ``NodesForStatusCode(Unschedulable)``: nodes whose status (explicit or absent) is U."""
    nodes_with_code = getattr(filtered, "nodes_with_code", None)  # the cycle's own map: one dict lookup a node
    if nodes_with_code is not None:
        return nodes_with_code(Code.UNSCHEDULABLE, names)  # type: ignore[no-any-return]
    return [name for name in names if status_of(filtered, name).code is Code.UNSCHEDULABLE]


def fit_error_message(num_all_nodes: int, statuses: Mapping[str, Status], absent_reason: str) -> str:
    """Upstream ``FitError.Error()`` for the dry run's verdicts, absent nodes having ``absent_reason``."""
    counts: dict[str, int] = {}
    for status in statuses.values():
        for reason in status.reasons:
            counts[reason] = counts.get(reason, 0) + 1
    if len(statuses) < num_all_nodes:
        counts[absent_reason] = counts.get(absent_reason, 0) + num_all_nodes - len(statuses)
    text = f"0/{num_all_nodes} nodes are available:"
    histogram = sorted(f"{count} {reason}" for reason, count in counts.items())
    if histogram:
        text += " " + ", ".join(histogram) + "."
    return text


def aggregate_error(errors: Sequence[Status]) -> Status:
    """Upstream ``utilerrors.NewAggregate``: one error as itself, several as ``[a, b]``."""
    if len(errors) == 1:
        return Status(Code.ERROR, errors[0].reasons, "", errors[0].error)
    text = "[" + ", ".join(e.message for e in errors) + "]"
    return Status(Code.ERROR, (text,), "", RuntimeError(text))


def _prefixed(status: Status) -> Status:
    """Upstream's PostFilter: a message gets the ``preemption: `` prefix."""
    if not status.message:
        return status
    return Status(status.code, (PREEMPTION_PREFIX + status.message,), status.plugin, status.error)


def _pods_on(snapshot: Snapshot, name: str) -> tuple[PodInfo, ...] | None:
    node = snapshot.cache.node(name)
    return None if node is None else tuple(node.pods.values())


def _as_error(status: Status) -> Status:
    return status if status.code is Code.ERROR else Status(Code.ERROR, status.reasons, status.plugin, status.error)


def _node_status(outcome: FilterOutcome, node: NodeInfo) -> Status:
    """One node's verdict from a :class:`FilterOutcome` over just that node."""
    if outcome.error is not None:
        return outcome.error
    if len(outcome.feasible):
        return SUCCESS
    found = outcome.statuses.get(node.slot)
    return found if found is not None else Status.unschedulable()


class NodeMessages(Mapping[str, str]):
    """Per node, why preemption did or did not help (``PostFilterResult.node_messages``), built on demand."""

    def __init__(self, names: Sequence[str], filtered: NodeToStatus, search: CandidateSearch) -> None:
        self._names = names
        self._filtered = filtered
        self._candidates = {c.name: c for c in search.candidates}
        self._statuses = search.statuses
        self._examined = set(search.examined)
        self._potential = set(search.potential)
        self._known: set[str] | None = None
        self._dropped: set[str] = set()
        self.chosen = ""

    def after_extenders(self, kept: Sequence[Candidate]) -> None:
        """The candidates as the preempt extenders left them (dropped ones say so, changed victims show)."""
        self._dropped = set(self._candidates) - {c.name for c in kept}
        self._candidates = {c.name: c for c in kept}

    def __getitem__(self, name: str) -> str:
        if self._known is None:
            self._known = set(self._names)
        if name not in self._known:
            raise KeyError(name)
        candidate = self._candidates.get(name)
        if candidate is not None:
            return explain_candidate(candidate.victims, chosen=name == self.chosen)
        if name in self._dropped:
            return EXPLAIN_DROPPED_BY_EXTENDER
        if name in self._statuses:
            status = self._statuses[name]
            if NO_VICTIMS in status.reasons:
                return EXPLAIN_NO_VICTIMS
            return f"not a candidate: {status.code.label}: {status.message}"
        if name in self._potential and name not in self._examined:
            return EXPLAIN_NOT_EXAMINED
        status = status_of(self._filtered, name)
        if status.code is Code.UNSCHEDULABLE_AND_UNRESOLVABLE:
            return EXPLAIN_UNRESOLVABLE
        return f"not a candidate: {status.code.label}"

    def __iter__(self) -> Iterator[str]:
        return iter(self._names)

    def __len__(self) -> int:
        return len(self._names)


class SameForAll(Mapping[str, str]):
    """One message for every node (the preemptor was not eligible), without building a dict per cycle."""

    def __init__(self, names: Sequence[str], message: str) -> None:
        self._names = names
        self._message = message
        self._known: set[str] | None = None

    def __getitem__(self, name: str) -> str:
        if self._known is None:
            self._known = set(self._names)
        if name not in self._known:
            raise KeyError(name)
        return self._message

    def __iter__(self) -> Iterator[str]:
        return iter(self._names)

    def __len__(self) -> int:
        return len(self._names)


def explain_candidate(victims: Victims, *, chosen: bool = False) -> str:
    count = len(victims.pods)
    top = max(p.priority for p in victims.pods)
    text = f"evicting {count} pod{'s' if count != 1 else ''} of priority ≤ {top} would fit the pod"
    if victims.num_pdb_violations:
        text += f" ({victims.num_pdb_violations} against a PodDisruptionBudget)"
    return f"chosen: {text}" if chosen else text


# -- 4. the executor -----------------------------------------------------------------------------------
class PreemptionExecutor:
    """Upstream ``preemption.Executor`` in async mode: evicts a candidate's victims off the scheduling cycle.

    ``start`` marks the preemptor as preempting (PreEnqueue holds it) and spawns the API work: first the
    lower-priority nominations on the node are cleared, then all victims but the last are preempted
    concurrently, then the last one. On any failure the preemptor is re-activated; on success it waits for the
    victims' deletion events like any pod rejected by Filter.

    Where ours differs: upstream stops holding the preemptor once its *last* victim is gone from the informer
    (or terminating), because one informer delivers the victims' deletions in order. kopf hands each object's
    events to its own worker, so the last victim's deletion can be watched before an earlier one's; released
    then, the preemptor found a victim still on the node, failed, and preempted again elsewhere (seen in the
    PreemptionAsync benchmark: one preemptor evicted pods on eight nodes). So the hold lasts until *every*
    victim is watched gone from the node (deleted, terminating, or no longer bound there), also after the API
    work finished.
    """

    def __init__(self, handle: Handle, plugin_name: str) -> None:
        self.handle = handle
        self.plugin_name = plugin_name
        self._preempting: set[str] = set()
        #: preemptor uid → uid of the last victim being preempted.
        self._last_victim: dict[str, str] = {}
        #: preemptor uid → (node, victim uids) until every victim is watched gone from that node.
        self._victims: dict[str, tuple[str, tuple[str, ...]]] = {}

    def is_victim_of(self, preemptor_uid: str, victim_uid: str) -> bool:
        """Whether ``victim_uid`` is one of the victims the preemptor's hold still waits for."""
        pending = self._victims.get(preemptor_uid)
        return pending is not None and victim_uid in pending[1]

    def is_pod_running_preemption(self, uid: str) -> bool:
        """Upstream ``IsPodRunningPreemption``, holding until every victim is watched gone (see the class)."""
        if uid in self._preempting and uid not in self._last_victim:
            return True  # the API work has not reached the last victim yet
        pending = self._victims.get(uid)
        if pending is None:
            return False
        node, victims = pending
        if any(self._still_on_node(victim, node) for victim in victims):
            return True
        del self._victims[uid]
        return False

    def _still_on_node(self, uid: str, node: str) -> bool:
        victim = self.handle.get_pod(uid)
        return victim is not None and not victim.terminating and victim.node_name == node

    def start(self, candidate: Candidate, preemptor: PodInfo) -> None:
        """Upstream ``prepareCandidateAsync``."""
        to_delete = [v for v in candidate.victims.pods if not v.terminating]
        if not to_delete:
            return
        self.handle.metrics.preemption_victims(len(candidate.victims.pods))
        self._preempting.add(preemptor.uid)
        self._victims[preemptor.uid] = (candidate.name, tuple(v.uid for v in to_delete))
        self.handle.spawn(self.run(candidate, preemptor, to_delete), name=f"preemption for pod {preemptor.key}")

    async def run(self, candidate: Candidate, preemptor: PodInfo, victims: Sequence[PodInfo]) -> None:
        failed = False
        try:
            try:
                await self.clear_lower_nominations(candidate.name, preemptor)
            except Exception:
                log.exception("Cannot clear 'NominatedNodeName' of lower-priority pods on node %s", candidate.name)
                failed = True
            preempt_last = True
            if len(victims) > 1:
                results = await asyncio.gather(
                    *(self.preempt_pod(candidate, preemptor, v) for v in victims[:-1]), return_exceptions=True
                )
                errors = [r for r in results if isinstance(r, BaseException)]
                if errors:
                    log.error("Error occurred during async preemption for pod %s: %s", preemptor.key, errors[0])
                    failed, preempt_last = True, False
            if preempt_last:
                last = victims[-1]
                self._last_victim[preemptor.uid] = last.uid
                try:
                    await self.preempt_pod(candidate, preemptor, last)
                except Exception:
                    log.exception("Error occurred during async preemption of the last victim %s", last.key)
                    failed = True
        except BaseException:
            failed = True
            raise
        finally:
            self._preempting.discard(preemptor.uid)
            self._last_victim.pop(preemptor.uid, None)
            if failed:
                self._victims.pop(preemptor.uid, None)
                self.handle.activate([preemptor])

    async def preempt_pod(self, candidate: Candidate, preemptor: PodInfo, victim: PodInfo) -> None:
        """Upstream ``Executor.PreemptPod``: preempt it at Permit (no API call), or mark it DisruptionTarget and
        delete it. Where ours differs: upstream also cancels a victim still in PreBind instead of deleting it."""
        note = f"Preempted by pod {preemptor.uid} on node {candidate.name}"
        if self.handle.preempt_waiting_pod(victim.uid, self.plugin_name):
            note += " (in kube-scheduler memory)."
        else:
            client = self.handle.client
            if client is None:
                raise RuntimeError("no API client to preempt pods with")
            condition = disruption_condition(victim, preemptor)
            try:
                if condition is not None:
                    patch = {"status": {"conditions": [condition]}}
                    await client.patch_pod_status(namespace=victim.namespace, name=victim.name, patch=patch)
                await client.delete_pod(namespace=victim.namespace, name=victim.name, uid=victim.uid)
            except APIError as exc:
                if exc.status == 404:
                    return  # already deleted: no event, as upstream
                raise
        self.handle.record_event(
            victim, event_type="Normal", reason="Preempted", action="Preempting", note=note, related=preemptor
        )

    async def clear_lower_nominations(self, node_name: str, preemptor: PodInfo) -> None:
        """Upstream ``getLowerPriorityNominatedPods`` + ``clearNominatedNodeName``: every one tried, errors after."""
        nominator = self.handle.nominator
        lower = [p for p in nominator.nominated_pods_for_node(node_name) if p.priority < preemptor.priority]
        errors: list[Exception] = []
        for pod in lower:
            nominator.delete_nominated_pod_if_exists(pod)
            if not nominated_node_name(pod):
                continue
            client = self.handle.client
            if client is None:
                continue
            try:
                patch = {"status": {"nominatedNodeName": None}}
                await client.patch_pod_status(namespace=pod.namespace, name=pod.name, patch=patch)
            except Exception as exc:
                errors.append(exc)
        if errors:
            raise errors[0]


def disruption_condition(victim: PodInfo, preemptor: PodInfo) -> dict[str, Any] | None:
    """The DisruptionTarget condition to patch in, or None when the victim already has exactly it
    (upstream ``UpdatePodCondition`` returning false)."""
    scheduler = (preemptor.obj.get("spec") or {}).get("schedulerName") or preemptor.scheduler_name
    message = f"{scheduler}: preempting to accommodate a higher priority pod"
    condition: dict[str, Any] = {
        "type": "DisruptionTarget",
        "status": "True",
        "reason": "PreemptionByScheduler",
        "message": message,
        "lastTransitionTime": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
    }
    generation = (victim.obj.get("metadata") or {}).get("generation")
    if generation:
        condition["observedGeneration"] = generation
    for old in (victim.obj.get("status") or {}).get("conditions") or ():
        if old.get("type") != "DisruptionTarget":
            continue
        if old.get("status") == "True":
            if old.get("lastTransitionTime"):
                condition["lastTransitionTime"] = old["lastTransitionTime"]
            if (
                old.get("reason") == condition["reason"]
                and old.get("message") == message
                and not old.get("lastProbeTime")
            ):
                return None
        break
    return condition
