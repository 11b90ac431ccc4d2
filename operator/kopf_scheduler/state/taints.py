"""Which nodes carry a taint the pod does not tolerate, answered per distinct taint set, not per node.

Nodes in a cluster share very few distinct taint lists (most have none, a pool shares one), and the node
table interns each list once (``NodeTable.taint_set`` / ``taint_sets``). Matching a pod's tolerations is
therefore done once per taint set and mapped onto nodes by array indexing. TaintToleration's Filter and
Score and PodTopologySpread's ``nodeTaintsPolicy: Honor`` all use these helpers.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

import numpy as np

from kopf_scheduler.state.tolerations import Taint, Toleration, first_untolerated

if TYPE_CHECKING:
    from kopf_scheduler.state.node_table import NodeTable

#: The effects that keep a pod off a node (upstream ``DoNotScheduleTaintsFilterFunc``).
DO_NOT_SCHEDULE_EFFECTS: frozenset[str] = frozenset({"NoSchedule", "NoExecute"})
#: The soft effect TaintToleration's Score counts.
PREFER_NO_SCHEDULE = "PreferNoSchedule"


def _per_set(
    table: NodeTable, nodes: np.ndarray, dtype: type, judge: Callable[[tuple[Taint, ...]], int | bool]
) -> np.ndarray:
    """Evaluate ``judge(taints)`` once per taint set used by ``nodes`` and spread the answers onto nodes."""
    num_sets = len(table.taint_sets)
    if num_sets <= 32:
        answers = [judge(taints) if taints else 0 for taints in table.taint_sets]
        if not any(answers):  # e.g. no node has taints: nothing to spread
            return np.zeros(len(nodes), dtype=dtype)
        spread: np.ndarray = np.asarray(answers, dtype=dtype)[table.taint_set[nodes]]
        return spread
    # Interned sets are never forgotten, so judge only the sets these nodes actually use when there are many.
    set_ids: np.ndarray = table.taint_set[nodes]
    lookup: np.ndarray = np.zeros(num_sets, dtype=dtype)
    for set_id in np.unique(set_ids).tolist():
        taints = table.taint_sets[set_id]
        if taints:
            lookup[set_id] = judge(taints)
    judged: np.ndarray = lookup[set_ids]
    return judged


def untolerated_taint_set_mask(
    table: NodeTable,
    nodes: np.ndarray,
    tolerations: Sequence[Toleration],
    effects: frozenset[str] = DO_NOT_SCHEDULE_EFFECTS,
) -> np.ndarray:
    """Bool mask aligned with ``nodes``: True where the node has a taint with one of ``effects`` that no
    toleration tolerates (upstream ``FindMatchingUntoleratedTaint`` found one)."""
    return _per_set(table, nodes, bool, lambda taints: first_untolerated(taints, tolerations, effects) is not None)


def count_untolerated_taints(
    table: NodeTable,
    nodes: np.ndarray,
    tolerations: Sequence[Toleration],
    effect: str = PREFER_NO_SCHEDULE,
) -> np.ndarray:
    """int64 array aligned with ``nodes``: how many of each node's taints with ``effect`` are not tolerated."""

    def count(taints: tuple[Taint, ...]) -> int:
        return sum(1 for taint in taints if taint.effect == effect and not any(t.tolerates(taint) for t in tolerations))

    return _per_set(table, nodes, np.int64, count)
