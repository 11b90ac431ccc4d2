"""The PreFilter and Filter runners, with pods nominated onto nodes (upstream ``RunPreFilterPlugins``,
``RunPreFilterExtensionAddPod``/``RemovePod``, ``RunFilterPlugins`` and ``RunFilterPluginsWithNominatedPods`` of
``framework/runtime/framework.go``).

Upstream calls every Filter plugin once per node; here a Filter plugin judges an array of node-table slots at
once, and :meth:`FilterRunner.run_filter_plugins` runs the plugins in profile order on the *shrinking* set of
still-feasible nodes. Each node therefore meets plugins in upstream's order and stops at the first that rejects
it, which is exactly upstream's first-failing-plugin attribution, at the cost of one call per plugin instead of
one per node and plugin. Rejections are kept as the arrays the plugins returned
(:class:`~kopf_scheduler.framework.verdicts.FilterStatuses`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from kopf_scheduler.framework.cycle_state import CycleState
from kopf_scheduler.framework.interface import (
    FilterPlugin,
    FilterResult,
    Nominator,
    PreFilterPlugin,
    PreFilterResult,
)
from kopf_scheduler.framework.runtime.common import PluginTimer, wrapped_error
from kopf_scheduler.framework.status import SUCCESS, Code, Status
from kopf_scheduler.framework.verdicts import FilterOutcome, FilterStatuses
from kopf_scheduler.go_format import go_quote, go_string_list

if TYPE_CHECKING:
    from kopf_scheduler.state.cache import ClusterCache, NodeInfo, Snapshot
    from kopf_scheduler.state.pod_info import PodInfo

_REJECTED_CODES = (Code.UNSCHEDULABLE, Code.UNSCHEDULABLE_AND_UNRESOLVABLE)
_EMPTY_SLOTS = np.zeros(0, dtype=np.int64)
#: At most this many assumed copies of nominated pods are kept (then they are all dropped and made anew).
_MAX_BORROWED = 4096


class FilterRunner(PluginTimer):
    """PreFilter, its AddPod/RemovePod extensions and Filter over one profile's plugins (a part of the Framework)."""

    pre_filter_plugins: tuple[tuple[str, PreFilterPlugin], ...]
    filter_plugins: tuple[tuple[str, FilterPlugin], ...]
    #: The pods nominated onto nodes (every profile's), counted by Filter as if they ran there.
    nominator: Nominator
    #: Nominated pod uid → (the nominator's PodInfo, its node, the assumed copy Filter borrows, see ``_borrow``).
    _borrowed: dict[str, tuple[PodInfo, str, PodInfo]]

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
                        wrapped_error(f"running PreFilter plugin {go_quote(name)}", exc).with_plugin(name),
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
                        wrapped_error(f"running PreFilter plugin {go_quote(name)}", status).with_plugin(name),
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
                return wrapped_error(f"running {operation} on PreFilter plugin {go_quote(name)}", status)
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
                error = wrapped_error(f"running {go_quote(name)} filter plugin", exc).with_plugin(name)
                return FilterOutcome(_EMPTY_SLOTS, _EMPTY_SLOTS, statuses, error)
            if result is None:
                continue
            rejected = np.asarray(result.rejected, dtype=bool)
            if rejected.shape != remaining.shape:
                error = wrapped_error(
                    f"running {go_quote(name)} filter plugin",
                    ValueError(f"returned {rejected.size} verdicts for {len(remaining)} nodes"),
                ).with_plugin(name)
                return FilterOutcome(_EMPTY_SLOTS, _EMPTY_SLOTS, statuses, error)
            if not rejected.any():
                continue
            failure = _filter_error(name, result, rejected)
            if failure is not None:
                return FilterOutcome(_EMPTY_SLOTS, _EMPTY_SLOTS, statuses, failure)
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
                assumed = cache.assume(nominated_pod, node.name, dry_run=True)
                added.append(assumed)
                status = self.run_pre_filter_extension_add_pod(state_with, pod, assumed, node)
                if not status.is_success:
                    return FilterOutcome(_EMPTY_SLOTS, _EMPTY_SLOTS, statuses, status)
            first = self.run_filter_plugins(state_with, pod, one, snapshot, positions=at, statuses=scratch)
        finally:
            for assumed in added:
                cache.forget(assumed.uid, dry_run=True)
        if first.error is not None or not len(first.feasible_positions) or not added:
            statuses.extend(scratch)
            return FilterOutcome(first.feasible, first.feasible_positions, statuses, first.error)
        second = self.run_filter_plugins(state, pod, one, snapshot, positions=at, statuses=statuses)
        return second


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
    return wrapped_error(f"running {go_quote(name)} filter plugin", status).with_plugin(name)


__all__ = ["FilterRunner"]
