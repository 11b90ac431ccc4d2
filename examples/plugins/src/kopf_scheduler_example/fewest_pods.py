"""FewestPods: a per-node Score plugin with NormalizeScore (an example of an out-of-tree plugin).

Written one node at a time (``NodeScorePlugin.score_node``): the simplest way to write a plugin, fine for
small clusters or cheap logic; the runtime loops over the candidate nodes for it. Raw scores are pod counts;
NormalizeScore turns them into 0..100 with fewer pods scoring higher, using the framework's helper. A Score
plugin never rejects a pod, so it registers no cluster events (the framework does not ask it).
"""

from __future__ import annotations

from typing import ClassVar

import numpy as np

from kopf_scheduler.framework import CycleState, NodeInfo, NodeScorePlugin, PodInfo, default_normalize_score


class FewestPods(NodeScorePlugin):
    name: ClassVar[str] = "FewestPods"
    has_normalize: ClassVar[bool] = True

    def score_node(self, state: CycleState, pod: PodInfo, node: NodeInfo) -> int:
        return len(node.pods)

    def normalize_score(self, state: CycleState, pod: PodInfo, nodes: np.ndarray, scores: np.ndarray) -> np.ndarray:
        return default_normalize_score(scores, reverse=True)
