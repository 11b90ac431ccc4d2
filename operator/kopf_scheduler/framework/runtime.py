"""The framework runtime: one profile's plugins, run at each extension point with upstream's rules.

This restates upstream's ``frameworkImpl`` (``framework/runtime/framework.go``): one plugin instance per
name, shared by every extension point it is enabled at; PreFilter results intersected; Skip statuses
recorded in the CycleState; Filter stopping at the first failing plugin for a node; scores normalised,
range-checked and weighted; Reserve undone in reverse; Bind by the first plugin that does not Skip. Error
texts are upstream's, because they end up in events and pod conditions.

The difference is the shape of the hot path. Upstream calls every Filter plugin once per node; here a
Filter plugin judges an array of node-table slots at once, and the runtime runs plugins in profile order on
the *shrinking* set of still-feasible nodes. Each node therefore meets plugins in upstream's order and
stops at the first that rejects it, which is exactly upstream's first-failing-plugin attribution, at the
cost of one call per plugin instead of one per node and plugin. Rejections are kept as the arrays the
plugins returned (:class:`~kopf_scheduler.framework.verdicts.FilterStatuses`) and only turned into per-node
``Status`` objects when someone asks (PostFilter, explanations).

Profile validation is not repeated here: :mod:`kopf_scheduler.framework.builder` checks what upstream's
``NewFramework`` checks, and the framework only constructs the plugins of the profile it is given. The verdict
types, waiting pods and the nominator protocol have their own modules (``verdicts``, ``waiting_pods``,
``nominator``).
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np
from pydantic import BaseModel

from kopf_scheduler.framework.cycle_state import CycleState
from kopf_scheduler.framework.extension_points import ExtensionPoint
from kopf_scheduler.framework.interface import (
    MAX_NODE_SCORE,
    MIN_NODE_SCORE,
    BindPlugin,
    FilterPlugin,
    FilterResult,
    Handle,
    PermitPlugin,
    Plugin,
    PostBindPlugin,
    PostFilterPlugin,
    PostFilterResult,
    PreBindPlugin,
    PreEnqueuePlugin,
    PreFilterPlugin,
    PreFilterResult,
    PreScorePlugin,
    QueuedPod,
    QueueSortPlugin,
    ReservePlugin,
    ScorePlugin,
)
from kopf_scheduler.framework.nominator import Nominator, NoNominator
from kopf_scheduler.framework.profile import ResolvedProfile
from kopf_scheduler.framework.registry import Registry
from kopf_scheduler.framework.status import SUCCESS, Code, Status
from kopf_scheduler.framework.verdicts import FilterOutcome, FilterStatuses, NodeToStatusMap, ScoreOutcome
from kopf_scheduler.framework.waiting_pods import WaitingPod
from kopf_scheduler.go_format import go_quote, go_string_list

if TYPE_CHECKING:
    from kopf_scheduler.state.cache import ClusterCache, NodeInfo, Snapshot
    from kopf_scheduler.state.pod_info import PodInfo

logger = logging.getLogger(__name__)

#: Upstream caps any Permit wait at 15 minutes.
MAX_PERMIT_TIMEOUT = 15 * 60.0

_REJECTED_CODES = (Code.UNSCHEDULABLE, Code.UNSCHEDULABLE_AND_UNRESOLVABLE)
_EMPTY_SLOTS = np.zeros(0, dtype=np.int64)
#: At most this many assumed copies of nominated pods are kept (then they are all dropped and made anew).
_MAX_BORROWED = 4096
ObservePlugin = Callable[[str, str, str, float], None]


class FrameworkError(Exception):
    """A plugin of a valid profile cannot be constructed (its args do not validate, or its ``__init__`` fails)."""


def _error_text(error: BaseException) -> str:
    return str(error) or type(error).__name__


def _wrapped_error(prefix: str, status_or_error: Status | BaseException) -> Status:
    """Upstream's ``AsStatus(fmt.Errorf("<prefix>: %w", err))``: an Error status with a prefixed message.

    Like Go's ``%w``, the original exception stays reachable: it is the status's ``error`` (so a caller can
    still see, say, the HTTP code of an ``APIError`` raised by a Bind plugin).
    """
    if isinstance(status_or_error, BaseException):
        message, cause = _error_text(status_or_error), status_or_error
    else:
        message, cause = status_or_error.message, status_or_error.error
    text = f"{prefix}: {message}"
    return Status(Code.ERROR, (text,), "", cause if cause is not None else RuntimeError(text))


# -- the framework -------------------------------------------------------------------------------------


class Framework:
    """One profile's pipeline: plugin instances per extension point and the ``run_*`` methods over them.

    ``profile`` comes from :func:`kopf_scheduler.framework.builder.resolve_profile` with the same ``registry``,
    which has already checked it as upstream's framework construction does (every plugin exists and implements
    the extension points it is enabled at, no duplicates, exactly one QueueSort, at least one Bind, score weights
    that cannot overflow). The framework trusts that and only constructs the plugins.
    """

    def __init__(
        self,
        profile: ResolvedProfile,
        registry: Registry,
        handle: Handle,
        *,
        nominator: Nominator | None = None,
        observe_plugin: ObservePlugin | None = None,
    ) -> None:
        self.profile = profile
        #: ``scheduler_plugin_execution_duration_seconds`` (plugin, extension point, status code, seconds);
        #: called in sampled cycles only (``CycleState.record_plugin_metrics``).
        self.observe_plugin = observe_plugin
        self.profile_name = profile.scheduler_name
        self.percentage_of_nodes_to_score = profile.percentage_of_nodes_to_score
        self.handle = handle
        self.nominator: Nominator = nominator or NoNominator()
        #: Round-robin start of the Filter search over the node list (upstream ``nextStartNodeIndex``).
        self.next_start_node_index = 0
        self.waiting_pods: dict[str, WaitingPod] = {}
        #: Nominated pod uid → (the nominator's PodInfo, its node, the assumed copy Filter borrows, see ``_borrow``).
        self._borrowed: dict[str, tuple[PodInfo, str, PodInfo]] = {}

        self.plugins: dict[str, Plugin] = {
            name: _new_plugin(name, registry[name], handle, profile.plugin_args.get(name))
            for name in profile.plugin_names()
        }
        by_point: dict[ExtensionPoint, list[tuple[str, Any]]] = {
            point: [(ref.name, self.plugins[ref.name]) for ref in profile.enabled(point)] for point in ExtensionPoint
        }
        scores = profile.enabled(ExtensionPoint.SCORE)
        self.score_weights: dict[str, int] = {ref.name: ref.weight or 1 for ref in scores}  # 0 (unset) means 1

        self.pre_enqueue_plugins: tuple[tuple[str, PreEnqueuePlugin], ...] = tuple(by_point[ExtensionPoint.PRE_ENQUEUE])
        self.queue_sort_plugin: QueueSortPlugin = by_point[ExtensionPoint.QUEUE_SORT][0][1]
        self.pre_filter_plugins: tuple[tuple[str, PreFilterPlugin], ...] = tuple(by_point[ExtensionPoint.PRE_FILTER])
        self.filter_plugins: tuple[tuple[str, FilterPlugin], ...] = tuple(by_point[ExtensionPoint.FILTER])
        self.post_filter_plugins: tuple[tuple[str, PostFilterPlugin], ...] = tuple(by_point[ExtensionPoint.POST_FILTER])
        self.pre_score_plugins: tuple[tuple[str, PreScorePlugin], ...] = tuple(by_point[ExtensionPoint.PRE_SCORE])
        self.score_plugins: tuple[tuple[str, ScorePlugin], ...] = tuple(by_point[ExtensionPoint.SCORE])
        self.reserve_plugins: tuple[tuple[str, ReservePlugin], ...] = tuple(by_point[ExtensionPoint.RESERVE])
        self.permit_plugins: tuple[tuple[str, PermitPlugin], ...] = tuple(by_point[ExtensionPoint.PERMIT])
        self.pre_bind_plugins: tuple[tuple[str, PreBindPlugin], ...] = tuple(by_point[ExtensionPoint.PRE_BIND])
        self.bind_plugins: tuple[tuple[str, BindPlugin], ...] = tuple(by_point[ExtensionPoint.BIND])
        self.post_bind_plugins: tuple[tuple[str, PostBindPlugin], ...] = tuple(by_point[ExtensionPoint.POST_BIND])

    def __repr__(self) -> str:
        return f"<Framework {self.profile_name}>"

    def _started(self, state: CycleState) -> float | None:
        """A start time when this cycle's plugin durations are recorded (upstream samples 10% of cycles)."""
        return time.perf_counter() if state.record_plugin_metrics and self.observe_plugin is not None else None

    def _observe(self, started: float | None, plugin: str, point: str, status: Status) -> None:
        if started is not None and self.observe_plugin is not None:
            self.observe_plugin(plugin, point, status.code.label, time.perf_counter() - started)

    # -- introspection ---------------------------------------------------------------------------------
    @property
    def has_filter_plugins(self) -> bool:
        return bool(self.filter_plugins)

    @property
    def has_post_filter_plugins(self) -> bool:
        return bool(self.post_filter_plugins)

    @property
    def has_score_plugins(self) -> bool:
        return bool(self.score_plugins)

    def list_plugins(self) -> dict[ExtensionPoint, list[str]]:
        """Effective plugin names per extension point, in run order (for the profile's status)."""
        lists = {
            ExtensionPoint.PRE_ENQUEUE: self.pre_enqueue_plugins,
            ExtensionPoint.QUEUE_SORT: (("", self.queue_sort_plugin),),
            ExtensionPoint.PRE_FILTER: self.pre_filter_plugins,
            ExtensionPoint.FILTER: self.filter_plugins,
            ExtensionPoint.POST_FILTER: self.post_filter_plugins,
            ExtensionPoint.PRE_SCORE: self.pre_score_plugins,
            ExtensionPoint.SCORE: self.score_plugins,
            ExtensionPoint.RESERVE: self.reserve_plugins,
            ExtensionPoint.PERMIT: self.permit_plugins,
            ExtensionPoint.PRE_BIND: self.pre_bind_plugins,
            ExtensionPoint.BIND: self.bind_plugins,
            ExtensionPoint.POST_BIND: self.post_bind_plugins,
        }
        result = {point: [name or plugin.name for name, plugin in entries] for point, entries in lists.items()}
        return {point: names for point, names in result.items() if names}

    # -- queue -----------------------------------------------------------------------------------------
    def run_pre_enqueue_plugins(self, pod: PodInfo) -> Status:
        """First non-success verdict (stamped with its plugin) keeps the pod out of the active queue."""
        for name, plugin in self.pre_enqueue_plugins:
            try:
                status = plugin.pre_enqueue(pod)
            except Exception as exc:
                return _wrapped_error(f"running PreEnqueue plugin {go_quote(name)}", exc).with_plugin(name)
            if not status.is_success:
                if status.is_rejected:
                    return status.with_plugin(name)
                return _wrapped_error(f"running PreEnqueue plugin {go_quote(name)}", status).with_plugin(name)
        return SUCCESS

    def queue_sort_less(self, a: QueuedPod, b: QueuedPod) -> bool:
        return self.queue_sort_plugin.less(a, b)

    # -- PreFilter -------------------------------------------------------------------------------------
    def run_pre_filter_plugins(
        self, state: CycleState, pod: PodInfo, snapshot: Snapshot
    ) -> tuple[PreFilterResult | None, Status, set[str]]:
        """Run every PreFilter; returns (merged node restriction, status, plugins that restricted nodes).

        UUR aborts at once; U is remembered while the rest still run (preemption needs their state);
        Skip puts the plugin in ``state.skip_filter_plugins``; node-name results are intersected and an
        empty intersection is a UUR naming the plugins that restricted the set.
        """
        skip: set[str] = set()
        result: PreFilterResult | None = None
        plugins_with_nodes: set[str] = set()
        returned = SUCCESS
        try:
            for name, plugin in self.pre_filter_plugins:
                try:
                    started = self._started(state)
                    restriction, status = plugin.pre_filter(state, pod, snapshot)
                    self._observe(started, name, "PreFilter", status)
                except Exception as exc:
                    return (
                        None,
                        _wrapped_error(f"running PreFilter plugin {go_quote(name)}", exc).with_plugin(name),
                        set(),
                    )
                if status.is_skip:
                    skip.add(name)
                    continue
                if not status.is_success:
                    status = status.with_plugin(name)
                    if status.code is Code.UNSCHEDULABLE_AND_UNRESOLVABLE:
                        return None, status, set()
                    if status.code is Code.UNSCHEDULABLE:
                        returned = status
                        continue
                    return (
                        None,
                        _wrapped_error(f"running PreFilter plugin {go_quote(name)}", status).with_plugin(name),
                        set(),
                    )
                if restriction is not None and restriction.node_names is not None:
                    plugins_with_nodes.add(name)
                result = _merge_pre_filter_results(result, restriction)
                if result is not None and result.node_names is not None and not result.node_names:
                    if len(plugins_with_nodes) == 1:
                        message = f"node(s) didn't satisfy plugin {next(iter(plugins_with_nodes))}"
                    else:
                        message = (
                            f"node(s) didn't satisfy plugin(s) {go_string_list(plugins_with_nodes)} simultaneously"
                        )
                    return result, Status.unschedulable(message, unresolvable=True), plugins_with_nodes
            return result, returned, plugins_with_nodes
        finally:
            state.skip_filter_plugins = skip

    def run_pre_filter_extension_add_pod(
        self, state: CycleState, pod: PodInfo, pod_to_add: PodInfo, node: NodeInfo
    ) -> Status:
        return self._run_pre_filter_extension("AddPod", state, pod, pod_to_add, node)

    def run_pre_filter_extension_remove_pod(
        self, state: CycleState, pod: PodInfo, pod_to_remove: PodInfo, node: NodeInfo
    ) -> Status:
        return self._run_pre_filter_extension("RemovePod", state, pod, pod_to_remove, node)

    def _run_pre_filter_extension(
        self, operation: str, state: CycleState, pod: PodInfo, other: PodInfo, node: NodeInfo
    ) -> Status:
        skip = state.skip_filter_plugins
        for name, plugin in self.pre_filter_plugins:
            if name in skip:
                continue
            extensions = plugin.pre_filter_extensions()
            if extensions is None:
                continue
            try:
                if operation == "AddPod":
                    status = extensions.add_pod(state, pod, other, node)
                else:
                    status = extensions.remove_pod(state, pod, other, node)
            except Exception as exc:
                status = Status.as_error(exc)
            if not status.is_success:
                return _wrapped_error(f"running {operation} on PreFilter plugin {go_quote(name)}", status)
        return SUCCESS

    # -- Filter ----------------------------------------------------------------------------------------
    def run_filter_plugins(
        self,
        state: CycleState,
        pod: PodInfo,
        nodes: np.ndarray,
        snapshot: Snapshot,
        *,
        positions: np.ndarray | None = None,
        statuses: FilterStatuses | None = None,
    ) -> FilterOutcome:
        """Run Filter plugins in order on the shrinking set of still-feasible ``nodes``.

        ``positions`` are the nodes' processing positions (default ``0..len-1``), kept in the verdicts so
        the caller can cut the search after enough feasible nodes. Rejections are appended to ``statuses``
        (a new :class:`FilterStatuses` by default). A status that is neither success nor a rejection is a
        plugin error: the outcome then carries ``error`` and the cycle stops.
        """
        if statuses is None:
            statuses = FilterStatuses()
        if positions is None:
            positions = np.arange(len(nodes), dtype=np.int64)
        remaining = nodes
        skip = state.skip_filter_plugins
        for name, plugin in self.filter_plugins:
            if not len(remaining):
                break
            if skip and name in skip:
                continue
            try:
                started = self._started(state)
                result = plugin.filter(state, pod, remaining, snapshot)
                if started is not None:  # one call judged every remaining node (upstream: one call per node)
                    verdict = SUCCESS if result is None or not np.any(result.rejected) else result.statuses[0]
                    self._observe(started, name, "Filter", verdict)
            except Exception as exc:
                error = _wrapped_error(f"running {go_quote(name)} filter plugin", exc).with_plugin(name)
                return FilterOutcome(_EMPTY_SLOTS, _EMPTY_SLOTS, statuses, error)
            if result is None:
                continue
            rejected = np.asarray(result.rejected, dtype=bool)
            if rejected.shape != remaining.shape:
                error = _wrapped_error(
                    f"running {go_quote(name)} filter plugin",
                    ValueError(f"returned {rejected.size} verdicts for {len(remaining)} nodes"),
                ).with_plugin(name)
                return FilterOutcome(_EMPTY_SLOTS, _EMPTY_SLOTS, statuses, error)
            if not rejected.any():
                continue
            error = _filter_error(name, result, rejected)
            if error is not None:
                return FilterOutcome(_EMPTY_SLOTS, _EMPTY_SLOTS, statuses, error)
            index = None if result.status_index is None else np.asarray(result.status_index)[rejected]
            palette = tuple(status.with_plugin(name) for status in result.statuses)
            statuses.add(name, remaining[rejected], positions[rejected], palette, index)
            keep = ~rejected
            remaining = remaining[keep]
            positions = positions[keep]
        return FilterOutcome(remaining, positions, statuses)

    def run_filter_plugins_with_nominated_pods(
        self,
        state: CycleState,
        pod: PodInfo,
        nodes: np.ndarray,
        snapshot: Snapshot,
        *,
        positions: np.ndarray | None = None,
        statuses: FilterStatuses | None = None,
    ) -> FilterOutcome:
        """Filter, treating pods nominated onto a node (priority ≥ the pod's) as running there.

        Upstream's two passes (``RunFilterPluginsWithNominatedPods``): with the nominated pods added
        (resources, anti-affinity are stricter), then without them (pod affinity may need them absent); a
        node must pass both, and a node where no pod was added takes the first pass only. Nodes without such
        pods go through one vectorised pass. The nodes with nominated pods take two more vectorised passes when
        adding a pod to one node can change no other node's verdict (:meth:`pre_filter_extensions_idle`),
        else the per-node path, each node with its own clone of ``state`` kept right by the AddPod extensions.
        """
        if positions is None:
            positions = np.arange(len(nodes), dtype=np.int64)
        nominated = self._nominated_slots(pod, nodes, snapshot)
        if not nominated:
            return self.run_filter_plugins(state, pod, nodes, snapshot, positions=positions, statuses=statuses)
        if statuses is None:
            statuses = FilterStatuses()
        special = _slot_mask(snapshot, np.fromiter(nominated, dtype=np.int64, count=len(nominated)))[nodes]
        plain = self.run_filter_plugins(
            state, pod, nodes[~special], snapshot, positions=positions[~special], statuses=statuses
        )
        if plain.error is not None:
            return plain
        if self.pre_filter_extensions_idle(state):
            with_nominated = self._filter_nodes_with_nominated_pods(
                state, pod, nodes[special], positions[special], nominated, snapshot, statuses
            )
            if with_nominated.error is not None:
                return with_nominated
            return _merged_outcome([plain, with_nominated], statuses)
        outcomes = [plain]
        for i in np.flatnonzero(special):
            slot, position = int(nodes[i]), int(positions[i])
            outcome = self._filter_node_with_nominated_pods(
                state, pod, slot, position, nominated[slot], snapshot, statuses
            )
            if outcome.error is not None:
                return outcome
            outcomes.append(outcome)
        return _merged_outcome(outcomes, statuses)

    def pre_filter_extensions_idle(self, state: CycleState) -> bool:
        """Whether no PreFilter extension (AddPod/RemovePod) runs in this cycle: every plugin that has them
        was skipped at PreFilter.

        Then adding or removing a pod on one node changes that node's Filter verdict only: the Filter plugins
        without extensions judge a node by its own pods (node-table columns), and the cycle state that could
        carry other nodes' pods into a verdict (topology counts) belongs to plugins with extensions. Nominated
        pods and preemption victims on many nodes can then be put in place at once and judged in one pass.
        """
        skip = state.skip_filter_plugins
        return all(name in skip or plugin.pre_filter_extensions() is None for name, plugin in self.pre_filter_plugins)

    def _filter_nodes_with_nominated_pods(
        self,
        state: CycleState,
        pod: PodInfo,
        nodes: np.ndarray,
        positions: np.ndarray,
        nominated: dict[int, list[PodInfo]],
        snapshot: Snapshot,
        statuses: FilterStatuses,
    ) -> FilterOutcome:
        """Both passes of :meth:`run_filter_plugins_with_nominated_pods` over many nodes at once (extensions
        idle): every node's nominated pods are assumed on it for the first pass, then forgotten; the nodes
        that passed with pods added are judged again without them."""
        cache = snapshot.cache
        added: list[PodInfo] = []
        with_added: set[int] = set()
        try:
            for slot in nodes.tolist():
                node_name = snapshot.node_info(slot).name
                for nominated_pod in nominated[slot]:
                    if cache.pod(nominated_pod.uid) is not None:
                        continue
                    added.append(self._borrow(cache, nominated_pod, node_name))
                    with_added.add(slot)
            first = self.run_filter_plugins(state, pod, nodes, snapshot, positions=positions, statuses=statuses)
        finally:
            for placed in added:
                cache.take_off_node(placed)
        if first.error is not None or not with_added:
            return first
        again = np.fromiter(
            (slot in with_added for slot in first.feasible.tolist()), dtype=bool, count=len(first.feasible)
        )
        if not again.any():
            return first
        second = self.run_filter_plugins(
            state, pod, first.feasible[again], snapshot, positions=first.feasible_positions[again], statuses=statuses
        )
        if second.error is not None:
            return second
        done = FilterOutcome(first.feasible[~again], first.feasible_positions[~again], statuses)
        return _merged_outcome([done, second], statuses)

    def _borrow(self, cache: ClusterCache, pod: PodInfo, node_name: str) -> PodInfo:
        """Account a nominated pod on its node for one Filter pass (the caller takes it off afterwards).

        Only the node's own accounting (:meth:`ClusterCache.put_on_node`): this pass runs while no PreFilter
        extension does, so the Filter plugins read nothing else (at 5000 full nodes with 200 preemptors
        nominated, a plain pod's cycle took 1.18 ms of CPU with them assumed into the whole cache, 0.83 ms so,
        0.42 ms with none nominated: docs/benchmarks.md). The placed copy is kept and placed again the next
        time (the same nominated object on the same node), because every cycle borrows every nominated pod
        again and copying one costs more than accounting it.
        """
        kept = self._borrowed.get(pod.uid)
        if kept is None or kept[0] is not pod or kept[1] != node_name:
            if len(self._borrowed) >= _MAX_BORROWED:
                self._borrowed.clear()
            kept = self._borrowed[pod.uid] = (pod, node_name, cache.placed_copy(pod, node_name))
        cache.put_on_node(kept[2])
        return kept[2]

    def _nominated_slots(self, pod: PodInfo, nodes: np.ndarray, snapshot: Snapshot) -> dict[int, list[PodInfo]]:
        """Slot → the pods nominated there that count for ``pod`` (priority ≥ its own, not itself), for the
        slots among ``nodes`` that have any."""
        names = self.nominator.nodes_with_nominated_pods()
        if not names:
            return {}
        if len(nodes) <= len(names):  # few nodes (a dry run's one node): look each up
            slots = [(slot, name) for slot in nodes.tolist() if (name := snapshot.node_info(slot).name) in names]
        else:
            by_slot = {slot: name for name in names if (slot := snapshot.slot_of(name)) is not None}
            if not by_slot:
                return {}
            known = np.fromiter(by_slot, dtype=np.int64, count=len(by_slot))
            slots = [(slot, by_slot[slot]) for slot in known[_slot_mask(snapshot, nodes)[known]].tolist()]
        found: dict[int, list[PodInfo]] = {}
        for slot, name in slots:
            pods = [
                p
                for p in self.nominator.nominated_pods_for_node(name)
                if p.priority >= pod.priority and p.uid != pod.uid
            ]
            if pods:
                found[slot] = pods
        return found

    def _filter_node_with_nominated_pods(
        self,
        state: CycleState,
        pod: PodInfo,
        slot: int,
        position: int,
        nominated: list[PodInfo],
        snapshot: Snapshot,
        statuses: FilterStatuses,
    ) -> FilterOutcome:
        node = snapshot.node_info(slot)
        cache = snapshot.cache
        one = np.asarray([slot], dtype=np.int64)
        at = np.asarray([position], dtype=np.int64)
        state_with = state.clone()
        added: list[PodInfo] = []
        # Pass 1 with the nominated pods accounted on the node: the node-table columns are what plugins
        # read, so the pods are assumed into the cache for the duration of this one-node pass.
        scratch = FilterStatuses()
        try:
            for nominated_pod in nominated:
                if cache.pod(nominated_pod.uid) is not None:
                    continue
                assumed = cache.assume(nominated_pod, node.name)
                added.append(assumed)
                status = self.run_pre_filter_extension_add_pod(state_with, pod, assumed, node)
                if not status.is_success:
                    return FilterOutcome(_EMPTY_SLOTS, _EMPTY_SLOTS, statuses, status)
            first = self.run_filter_plugins(state_with, pod, one, snapshot, positions=at, statuses=scratch)
        finally:
            for assumed in added:
                cache.forget(assumed.uid)
        if first.error is not None or not len(first.feasible_positions) or not added:
            statuses.extend(scratch)
            return FilterOutcome(first.feasible, first.feasible_positions, statuses, first.error)
        second = self.run_filter_plugins(state, pod, one, snapshot, positions=at, statuses=statuses)
        return second

    # -- PostFilter ------------------------------------------------------------------------------------
    def run_post_filter_plugins(
        self, state: CycleState, pod: PodInfo, filtered: NodeToStatusMap
    ) -> tuple[PostFilterResult | None, Status]:
        """Until the first Success, UUR or Error; otherwise U with all plugins' reasons (joined by ", ")."""
        result: PostFilterResult | None = None
        reasons: list[str] = []
        rejector = ""
        for name, plugin in self.post_filter_plugins:
            # Upstream's plugins reach the framework through their Handle (it *is* the framework); ours are
            # handed it here, the one place that needs it (preemption's dry run re-runs the filters).
            attach = getattr(plugin, "attach_framework", None)
            if attach is not None:
                attach(self)
            try:
                outcome, status = plugin.post_filter(state, pod, filtered)
            except Exception as exc:
                return None, Status.as_error(exc, plugin=name)
            if status.is_success:
                return _after_earlier_rejections(outcome, reasons, rejector), status
            if status.code is Code.UNSCHEDULABLE_AND_UNRESOLVABLE:
                return outcome, status.with_plugin(name)
            if not status.is_rejected:
                return None, Status(Code.ERROR, status.reasons, name, status.error)
            # Upstream keeps a result whose mode is not Noop (a node, or Override with "" = clear_nomination);
            # one carrying only node_messages (ours, for explain) is as harmless as a Noop and kept too.
            if outcome is not None and (
                outcome.nominated_node_name is not None or outcome.clear_nomination or outcome.node_messages
            ):
                result = outcome
            reasons.extend(status.reasons)
            rejector = rejector or name
        return result, Status(Code.UNSCHEDULABLE, tuple(reasons), rejector)

    # -- PreScore / Score ------------------------------------------------------------------------------
    def run_pre_score_plugins(self, state: CycleState, pod: PodInfo, nodes: np.ndarray, snapshot: Snapshot) -> Status:
        skip: set[str] = set()
        try:
            for name, plugin in self.pre_score_plugins:
                try:
                    started = self._started(state)
                    status = plugin.pre_score(state, pod, nodes, snapshot)
                    self._observe(started, name, "PreScore", status)
                except Exception as exc:
                    return _wrapped_error(f"running PreScore plugin {go_quote(name)}", exc)
                if status.is_skip:
                    skip.add(name)
                    continue
                if not status.is_success:
                    return _wrapped_error(f"running PreScore plugin {go_quote(name)}", status)
            return SUCCESS
        finally:
            state.skip_score_plugins = skip

    def run_score_plugins(
        self, state: CycleState, pod: PodInfo, nodes: np.ndarray, snapshot: Snapshot
    ) -> tuple[ScoreOutcome | None, Status]:
        """Score, NormalizeScore (when the plugin has it), range check, weight; totals as int64."""
        skip = state.skip_score_plugins
        count = len(nodes)
        names: list[str] = []
        raw: list[np.ndarray] = []
        for name, plugin in self.score_plugins:
            if skip and name in skip:
                continue
            try:
                started = self._started(state)
                scores = np.asarray(plugin.score(state, pod, nodes, snapshot), dtype=np.int64)
                self._observe(started, name, "Score", SUCCESS)
                if scores.shape != (count,):
                    raise ValueError(f"returned {scores.shape[0] if scores.ndim else 0} scores for {count} nodes")
            except Exception as exc:
                return None, _wrapped_error(
                    "running Score plugins", RuntimeError(f"plugin {go_quote(name)} failed with: {_error_text(exc)}")
                )
            names.append(name)
            raw.append(scores)
        before_normalize = tuple(raw)  # kept for explanations (references only; normalising replaces items)
        for i, name in enumerate(names):
            plugin = self.plugins[name]
            assert isinstance(plugin, ScorePlugin)
            if not plugin.has_normalize:
                continue
            try:
                normalized = np.asarray(plugin.normalize_score(state, pod, nodes, raw[i]), dtype=np.int64)
                if normalized.shape != (count,):
                    raise ValueError(
                        f"normalized {normalized.shape[0] if normalized.ndim else 0} scores for {count} nodes"
                    )
            except Exception as exc:
                return None, _wrapped_error(
                    "running Normalize on Score plugins",
                    RuntimeError(f"plugin {go_quote(name)} failed with: {_error_text(exc)}"),
                )
            raw[i] = normalized
        if raw:
            stacked = np.vstack(raw)
            if stacked.size and (stacked.max() > MAX_NODE_SCORE or stacked.min() < MIN_NODE_SCORE):
                invalid = (stacked > MAX_NODE_SCORE) | (stacked < MIN_NODE_SCORE)
                # Report the first offending node in node order, and its first offending plugin.
                node_index = int(np.flatnonzero(invalid.any(axis=0))[0])
                plugin_index = int(np.flatnonzero(invalid[:, node_index])[0])
                message = (
                    f"plugin {go_quote(names[plugin_index])} returns an invalid score "
                    f"{int(stacked[plugin_index, node_index])}, it should in the range of "
                    f"[{MIN_NODE_SCORE}, {MAX_NODE_SCORE}] after normalizing"
                )
                return None, _wrapped_error("applying score defaultWeights on Score plugins", RuntimeError(message))
            weights = tuple(self.score_weights.get(name, 1) for name in names)
            product = stacked * np.asarray(weights, dtype=np.int64)[:, None]
            weighted = tuple(product)  # one row per plugin
            totals = product.sum(axis=0)
        else:
            weights, weighted = (), ()
            totals = np.zeros(count, dtype=np.int64)
        return ScoreOutcome(nodes, tuple(names), weights, weighted, totals, before_normalize), SUCCESS

    # -- Reserve / Permit ------------------------------------------------------------------------------
    def run_reserve_plugins_reserve(self, state: CycleState, pod: PodInfo, node_name: str) -> Status:
        for name, plugin in self.reserve_plugins:
            try:
                started = self._started(state)
                status = plugin.reserve(state, pod, node_name)
                self._observe(started, name, "Reserve", status)
            except Exception as exc:
                return _wrapped_error(f"running Reserve plugin {go_quote(name)}", exc)
            if not status.is_success:
                if status.is_rejected:
                    return status.with_plugin(name)
                return _wrapped_error(f"running Reserve plugin {go_quote(name)}", status)
        return SUCCESS

    def run_reserve_plugins_unreserve(self, state: CycleState, pod: PodInfo, node_name: str) -> None:
        """Every Reserve plugin's Unreserve, in reverse order; failures are logged, never raised."""
        for name, plugin in reversed(self.reserve_plugins):
            try:
                plugin.unreserve(state, pod, node_name)
            except Exception:
                logger.exception("Unreserve of plugin %s failed for pod %s", name, pod.key)

    def run_permit_plugins(self, state: CycleState, pod: PodInfo, node_name: str) -> Status:
        """Rejection or error stops at once; Wait from any plugin parks the pod as a :class:`WaitingPod`."""
        waits: dict[str, float] = {}
        for name, plugin in self.permit_plugins:
            try:
                started = self._started(state)
                status, timeout = plugin.permit(state, pod, node_name)
                self._observe(started, name, "Permit", status)
            except Exception as exc:
                return _wrapped_error(f"running Permit plugin {go_quote(name)}", exc).with_plugin(name)
            if status.is_success:
                continue
            if status.is_rejected:
                return status.with_plugin(name)
            if status.code is Code.WAIT:
                waits[name] = min(float(timeout), MAX_PERMIT_TIMEOUT)
                continue
            return _wrapped_error(f"running Permit plugin {go_quote(name)}", status).with_plugin(name)
        if waits:
            self.waiting_pods[pod.uid] = WaitingPod(pod, waits)
            return Status(
                Code.WAIT, (f"one or more plugins asked to wait and no plugin rejected pod {go_quote(pod.name)}",)
            )
        return SUCCESS

    def will_wait_on_permit(self, pod: PodInfo) -> bool:
        return pod.uid in self.waiting_pods

    def get_waiting_pod(self, uid: str) -> WaitingPod | None:
        return self.waiting_pods.get(uid)

    def reject_waiting_pod(self, uid: str) -> bool:
        waiting = self.waiting_pods.get(uid)
        if waiting is None:
            return False
        waiting.reject("", "removed")
        return True

    def preempt_waiting_pod(self, uid: str, plugin: str) -> bool:
        """Upstream's preemption of a pod waiting at Permit (``GetWaitingPod(uid).Preempt(plugin, "preempted")``):
        its binding cycle fails with an Error (``waiting on permit for pod: preempted``). True if it was waiting."""
        waiting = self.waiting_pods.get(uid)
        return waiting is not None and waiting.preempt(plugin, "preempted")

    async def wait_on_permit(self, pod: PodInfo) -> Status:
        waiting = self.waiting_pods.get(pod.uid)
        if waiting is None:
            return SUCCESS
        try:
            status = await waiting.wait()
        finally:
            self.waiting_pods.pop(pod.uid, None)
        if status.is_success or status.is_rejected:
            return status
        return _wrapped_error("waiting on permit for pod", status).with_plugin(status.plugin)

    # -- binding cycle ---------------------------------------------------------------------------------
    def run_pre_bind_pre_flights(self, state: CycleState, pod: PodInfo, node_name: str) -> Status:
        """Ask every PreBind plugin whether it has work: Success if any has, Skip if none, else an Error.

        Upstream ``RunPreBindPreFlights``: the plugins that answer Skip are remembered in ``state`` and their
        PreBind is not run; any other answer than Success, Skip or Error is itself an error.
        """
        skipped: set[str] = set()
        verdict = Status.skip()
        for name, plugin in self.pre_bind_plugins:
            try:
                status = plugin.pre_bind_pre_flight(state, pod, node_name)
            except Exception as exc:
                return _wrapped_error(f"running PreBindPreFlight {go_quote(name)}", exc)
            if status.code is Code.ERROR:
                return _wrapped_error(f"running PreBindPreFlight {go_quote(name)}", status)
            if status.is_success:
                verdict = SUCCESS
            elif status.is_skip:
                skipped.add(name)
            else:
                text = (
                    f"PreBindPreFlight {name} returned {go_quote(status.code.label)}, which is unsupported. "
                    "It is supposed to return Success, Skip, or Error status"
                )
                return Status.as_error(RuntimeError(text))
        state.skip_pre_bind_plugins = skipped
        return verdict

    async def run_pre_bind_plugins(self, state: CycleState, pod: PodInfo, node_name: str) -> Status:
        for name, plugin in self.pre_bind_plugins:
            if name in state.skip_pre_bind_plugins:
                continue
            try:
                started = self._started(state)
                status = await plugin.pre_bind(state, pod, node_name)
                self._observe(started, name, "PreBind", status)
            except Exception as exc:
                return _wrapped_error(f"running PreBind plugin {go_quote(name)}", exc)
            if not status.is_success:
                if status.is_rejected:
                    return status.with_plugin(name)
                return _wrapped_error(f"running PreBind plugin {go_quote(name)}", status)
        return SUCCESS

    async def run_bind_plugins(self, state: CycleState, pod: PodInfo, node_name: str) -> Status:
        """Bind plugins in order until one does not Skip; its verdict is the result."""
        status = Status.skip()
        for name, plugin in self.bind_plugins:
            try:
                started = self._started(state)
                status = await plugin.bind(state, pod, node_name)
                self._observe(started, name, "Bind", status)
            except Exception as exc:
                return _wrapped_error(f"running Bind plugin {go_quote(name)}", exc)
            if status.is_skip:
                continue
            if status.is_success:
                return status
            if status.is_rejected:
                return status.with_plugin(name)
            return _wrapped_error(f"running Bind plugin {go_quote(name)}", status)
        return status

    def run_post_bind_plugins(self, state: CycleState, pod: PodInfo, node_name: str) -> None:
        for name, plugin in self.post_bind_plugins:
            try:
                plugin.post_bind(state, pod, node_name)
            except Exception:
                logger.exception("PostBind of plugin %s failed for pod %s", name, pod.key)


# -- helpers -------------------------------------------------------------------------------------------
def _merge_pre_filter_results(current: PreFilterResult | None, new: PreFilterResult | None) -> PreFilterResult | None:
    """Upstream ``PreFilterResult.Merge`` where nil (None) and a nil node set both mean "all nodes"."""
    if new is None or new.node_names is None:
        return current
    if current is None or current.node_names is None:
        return new
    return PreFilterResult(current.node_names & new.node_names)


def _slot_mask(snapshot: Snapshot, slots: np.ndarray) -> np.ndarray:
    """A boolean per node-table slot, true at ``slots`` (membership without ``np.isin``'s sort)."""
    mask = np.zeros(len(snapshot.table.pod_count), dtype=bool)
    mask[slots] = True
    return mask


def _merged_outcome(outcomes: list[FilterOutcome], statuses: FilterStatuses) -> FilterOutcome:
    """The feasible nodes of several error-free outcomes, back in processing-position order."""
    positions = np.concatenate([outcome.feasible_positions for outcome in outcomes])
    order = np.argsort(positions, kind="stable")
    feasible = np.concatenate([outcome.feasible for outcome in outcomes])
    return FilterOutcome(feasible[order], positions[order], statuses)


def _filter_error(name: str, result: FilterResult, rejected: np.ndarray) -> Status | None:
    """An Error (or any non-rejection) status among the rejected nodes becomes the cycle's error."""
    bad = [i for i, status in enumerate(result.statuses) if status.code not in _REJECTED_CODES]
    if not bad:
        return None
    if result.status_index is None:
        status = result.statuses[0]
    else:
        used = np.asarray(result.status_index)[rejected]
        hits = np.isin(used, bad)
        if not hits.any():
            return None
        status = result.statuses[int(used[int(np.argmax(hits))])]
    return _wrapped_error(f"running {go_quote(name)} filter plugin", status).with_plugin(name)


def _new_plugin(name: str, cls: type[Plugin], handle: Handle, raw: BaseModel | dict[str, Any] | None) -> Plugin:
    """Plugin ``name``'s instance, with typed args; any failure is upstream's ``initializing plugin`` error."""
    args = _plugin_args(cls, raw)
    try:
        return cls(handle=handle, args=args)
    except Exception as exc:
        raise FrameworkError(f"initializing plugin {name!r}: {_error_text(exc)}") from exc


def _plugin_args(cls: type[Plugin], raw: BaseModel | dict[str, Any] | None) -> Any:
    """Typed args for the plugin: validate a raw dict against its ``args_model``, pass models through."""
    if raw is None or isinstance(raw, BaseModel) or cls.args_model is None:
        return raw
    try:
        return cls.args_model.model_validate(raw)
    except Exception as exc:
        raise FrameworkError(f"initializing plugin {cls.name!r}: {_error_text(exc)}") from exc


__all__ = ["MAX_PERMIT_TIMEOUT", "Framework", "FrameworkError"]


def _after_earlier_rejections(
    outcome: PostFilterResult | None, reasons: list[str], rejector: str
) -> PostFilterResult | None:
    """A pending result (a PostFilter plugin that still awaits extenders, ``PendingPostFilterResult``) after
    plugins that said Unschedulable: its final Unschedulable verdict carries their reasons first, as upstream's
    loop joins them (``no new claims to deallocate, preemption: ...``)."""
    finish = getattr(outcome, "finish", None)
    if finish is None or not reasons:
        return outcome
    earlier = tuple(reasons)

    async def joined() -> tuple[PostFilterResult | None, Status]:
        result, status = await finish()
        if status.code is Code.UNSCHEDULABLE:
            status = Status(Code.UNSCHEDULABLE, earlier + status.reasons, rejector or status.plugin)
        return result, status

    return dataclasses.replace(outcome, finish=joined)  # type: ignore[type-var]
