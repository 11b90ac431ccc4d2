"""DefaultPreemption's evaluator: candidates, dry runs and the pick (upstream ``framework/preemption/preemption.go``).

Upstream's ``Evaluator.Preempt``, restated as :class:`Evaluator`, which the plugin inherits (upstream embeds
it): re-read the preemptor and check it may preempt; ``findCandidates`` + ``DryRunPreemption`` (the nodes
Filter called Unschedulable, a sample of them from a random offset, each dry-run by the plugin's
``SelectVictimsOnNode``); ``callExtenders`` (HTTP extenders with a ``preempt`` verb may drop candidates or
change their victims; that is an await, so a profile with such extenders gets a
:class:`~kopf_scheduler.framework.extender.PendingPostFilterResult` from PostFilter, which its already async
extender cycle awaits; every other profile's PostFilter stays synchronous); ``SelectCandidate`` with
``pickOneNodeForPreemption``; then the executor (:mod:`.executor`) evicts the chosen node's victims.
The PodDisruptionBudgets as the dry run reads them (:class:`Budget`, upstream ``getPodDisruptionBudgets``) and
the per-node explanations of ``kopf-scheduler explain`` (:class:`NodeMessages`, ours) are here too.

Where we differ: upstream dry-runs nodes in parallel, so which nodes end up sampled can vary run to run;
here the verdicts are read one by one from the offset, which is one of upstream's possible outcomes. They are
computed a batch of nodes at a time (the plugin's ``select_victims_on_nodes``) while no PreFilter extension
runs; else node by node. The last ``pickOneNodeForPreemption`` tie-break is upstream's Go map order
(arbitrary); here the first candidate found. With preempt extenders, the candidates they keep are picked from
in the order the dry run found them (upstream: Go's map order).
"""

from __future__ import annotations

from collections.abc import Callable, Coroutine, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from kopf_scheduler.framework import (
    SUCCESS,
    Code,
    CycleState,
    Handle,
    PostFilterResult,
    Status,
    nominated_node_name,
)
from kopf_scheduler.framework.extender import (
    Extender,
    ExtenderError,
    PendingPostFilterResult,
    PreemptionVictims,
    process_preemption_with_extenders,
)
from kopf_scheduler.framework.interface import NodeToStatus
from kopf_scheduler.plugins.default_preemption.executor import PreemptionExecutor
from kopf_scheduler.plugins.default_preemption.victims import Candidate, Victims, pod_start_time
from kopf_scheduler.state.cache import NodeInfo, Snapshot
from kopf_scheduler.state.objects import POD_DISRUPTION_BUDGET
from kopf_scheduler.state.pod_info import PodInfo
from kopf_scheduler.state.selectors import LabelSelector

#: The fewest nodes dry-run together once the candidates still wanted are fewer (see ``find_candidates``).
MIN_DRY_RUN_BATCH = 16

#: One node's dry run: (victims, how many of them violate a PDB, status).
DryRunVerdict = tuple[list[PodInfo], int, Status]

# Upstream's texts (they end up, after "preemption: ", in FailedScheduling events and pod conditions).
NOT_ELIGIBLE_NEVER = "not eligible due to preemptionPolicy=Never."
NOT_HELPFUL = "Preemption is not helpful for scheduling"
NO_VICTIMS = "No preemption victims found for incoming pod"
NO_CANDIDATE = "no candidate node for preemption"
NO_NODES = "no nodes available"
PREEMPTION_PREFIX = "preemption: "

# Messages per node for ``kopf-scheduler explain`` (ours, not upstream's).
EXPLAIN_UNRESOLVABLE = "UnschedulableAndUnresolvable: preemption cannot help"
EXPLAIN_NO_VICTIMS = "not a candidate: no lower-priority pods"
EXPLAIN_NOT_EXAMINED = "not examined: enough candidates were found on other nodes"
EXPLAIN_DROPPED_BY_EXTENDER = "not a candidate: dropped by an extender's preempt verb"

#: Upstream's ``math.MaxInt32 + 1``: added to each victim priority so that sums compare as counts would.
PRIORITY_OFFSET = 2**31


@dataclass(slots=True)
class CandidateSearch:
    """What :meth:`Evaluator.find_candidates` found: candidates (non-violating first) and, per examined
    node that is not one, its status (upstream's ``NodeToStatus`` of the dry run)."""

    candidates: list[Candidate]
    statuses: dict[str, Status]
    errors: list[Status]
    #: Potential nodes (filter said Unschedulable), in the order they were tried.
    examined: list[str]
    potential: list[str]


# -- PodDisruptionBudgets ------------------------------------------------------------------------------
#: ``metav1.LabelSelectorAsSelector``'s operators.
_SELECTOR_OPERATORS = frozenset({"In", "NotIn", "Exists", "DoesNotExist"})


@dataclass(frozen=True, slots=True)
class Budget:
    """What preemption reads of one PodDisruptionBudget."""

    namespace: str
    selector: LabelSelector | None  # None: invalid, empty or nil selector (matches nothing)
    disruptions_allowed: int
    disrupted_pods: frozenset[str]

    @classmethod
    def from_obj(cls, obj: Mapping[str, Any]) -> Budget:
        meta = obj.get("metadata") or {}
        spec = obj.get("spec") or {}
        status = obj.get("status") or {}
        return cls(
            namespace=meta.get("namespace") or "",
            selector=_pdb_selector(spec.get("selector")),
            disruptions_allowed=int(status.get("disruptionsAllowed") or 0),
            disrupted_pods=frozenset((status.get("disruptedPods") or {}).keys()),
        )


def counting_budgets(pod: PodInfo, budgets: Sequence[Budget]) -> Iterator[int]:
    """The indexes of the budgets that count evicting ``pod`` against their allowed disruptions (upstream's loop
    in ``filterPodsWithPDBViolation``): same namespace, a selector matching its labels (a pod without labels
    matches none), and not already among the budget's ``disruptedPods``."""
    if not pod.labels:
        return
    for i, budget in enumerate(budgets):
        if budget.namespace != pod.namespace or budget.selector is None:
            continue
        if not budget.selector.matches(pod.labels) or pod.name in budget.disrupted_pods:
            continue
        yield i


def _pdb_selector(raw: Mapping[str, Any] | None) -> LabelSelector | None:
    """Upstream ``LabelSelectorAsSelector`` + ``Empty()``: nil, ``{}`` and invalid selectors match nothing."""
    if raw is None:
        return None
    for expr in raw.get("matchExpressions") or ():
        operator, values = expr.get("operator", ""), expr.get("values") or ()
        if operator not in _SELECTOR_OPERATORS:
            return None
        if (operator in ("In", "NotIn")) != bool(values):
            return None
    selector = LabelSelector.parse(raw)
    return None if selector.is_empty else selector


class Evaluator:
    """Upstream ``preemption.Evaluator``: the preemption algorithm, embedded in the plugin as upstream embeds it.

    DefaultPreemption inherits these methods (upstream's struct embedding promotes them) and provides the
    hooks below, upstream's ``PreemptionInterface`` (eligibility, the candidate count, the per-node dry run)
    plus what its Handle gives upstream's evaluator (the framework's filters, the extenders, the executor).
    """

    handle: Handle
    executor: PreemptionExecutor
    #: Start time of pods that have none yet (upstream ``time.Now()``).
    clock: Callable[[], float]

    # -- the plugin's part (upstream ``PreemptionInterface``) ----------------------------------------
    def eligible(self, pod: PodInfo, nominated_status: Status) -> tuple[bool, str]:
        """Upstream ``PodEligibleToPreemptOthers``: (may preempt, why not)."""
        raise NotImplementedError

    def is_preemption_allowed(self, node: NodeInfo, victim: PodInfo, preemptor: PodInfo) -> bool:
        """Whether ``victim`` may be evicted for ``preemptor`` (upstream ``isPreemptionAllowed``)."""
        raise NotImplementedError

    def offset_and_num_candidates(self, num_nodes: int) -> tuple[int, int]:
        """Upstream ``GetOffsetAndNumCandidates``: where the search starts and how many candidates it wants."""
        raise NotImplementedError

    def select_victims_on_node(
        self,
        state: CycleState,
        pod: PodInfo,
        node: NodeInfo,
        snapshot: Snapshot,
        budgets: Sequence[Budget],
        now: float,
    ) -> DryRunVerdict:
        """Upstream ``SelectVictimsOnNode``: one node's dry run."""
        raise NotImplementedError

    def select_victims_on_nodes(
        self,
        state: CycleState,
        pod: PodInfo,
        nodes: Sequence[NodeInfo],
        snapshot: Snapshot,
        budgets: Sequence[Budget],
        now: float,
    ) -> list[DryRunVerdict] | None:
        """:meth:`select_victims_on_node` for many nodes at once; None when the caller must go node by node."""
        raise NotImplementedError

    def preempting_extenders(self, pod: PodInfo) -> tuple[Extender, ...]:
        """The extenders whose ``preempt`` verb :meth:`process_extenders` calls for ``pod``."""
        raise NotImplementedError

    # -- 1. the algorithm, PostFilter to the executor -------------------------------------------------
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
                return None, prefixed(status)
            if self.handle.get_pod(pod.uid) is None:  # deleted during the calls: evict nobody for it
                return None, prefixed(Status.as_error(LookupError(f'pod "{pod.name}" not found')))
            messages.after_extenders(kept)
            result, status = self.conclude(pod, kept, messages, now)
            return result, prefixed(status)

        return finish

    # -- 2. candidates -------------------------------------------------------------------------------
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


def earliest_start_of_highest_priority(victims: Victims, now: float) -> float:
    """Upstream ``GetEarliestPodStartTime``: the earliest start among the victims of the highest priority."""
    top = max(pod.priority for pod in victims.pods)
    return min(pod_start_time(pod, now) for pod in victims.pods if pod.priority == top)


def pick_one_node_for_preemption(nodes_to_victims: Mapping[str, Victims], now: float) -> str:
    """Upstream ``pickOneNodeForPreemption``: the best node, each criterion breaking the previous one's ties.

    1. fewest PDB violations; 2. lowest highest victim priority; 3. smallest sum of (priority + 2^31);
    4. fewest victims; 5. latest earliest start among the highest-priority victims; 6. the first left
    (in the mapping's order). "" for no candidates.
    """
    candidates = list(nodes_to_victims)
    if not candidates:
        return ""
    criteria = (
        lambda v: -v.num_pdb_violations,
        lambda v: -v.pods[0].priority,
        lambda v: -sum(p.priority + PRIORITY_OFFSET for p in v.pods),
        lambda v: -len(v.pods),
        lambda v: earliest_start_of_highest_priority(v, now),
    )
    for score in criteria:
        scores = {node: score(nodes_to_victims[node]) for node in candidates}
        best = max(scores.values())
        candidates = [node for node in candidates if scores[node] == best]
        if len(candidates) == 1:
            break
    return candidates[0]


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
        found: list[str] = nodes_with_code(Code.UNSCHEDULABLE, names)
        return found
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


def prefixed(status: Status) -> Status:
    """Upstream's PostFilter: a message gets the ``preemption: `` prefix."""
    if not status.message:
        return status
    return Status(status.code, (PREEMPTION_PREFIX + status.message,), status.plugin, status.error)


def _pods_on(snapshot: Snapshot, name: str) -> tuple[PodInfo, ...] | None:
    node = snapshot.cache.node(name)
    return None if node is None else tuple(node.pods.values())


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
