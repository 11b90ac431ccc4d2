"""The PreScore and Score runners: scores normalised, range-checked and weighted (upstream ``RunPreScorePlugins``
and ``RunScorePlugins`` of ``framework/runtime/framework.go``).

A Score plugin answers one int64 array for all feasible nodes, so normalising, the range check and the weights
are array operations over one row per plugin (:class:`~kopf_scheduler.framework.verdicts.ScoreOutcome`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from kopf_scheduler.framework.cycle_state import CycleState
from kopf_scheduler.framework.interface import MAX_NODE_SCORE, MIN_NODE_SCORE, PreScorePlugin, ScorePlugin
from kopf_scheduler.framework.runtime.common import PluginTimer, error_text, wrapped_error
from kopf_scheduler.framework.status import SUCCESS, Status
from kopf_scheduler.framework.verdicts import ScoreOutcome
from kopf_scheduler.go_format import go_quote

if TYPE_CHECKING:
    from kopf_scheduler.state.cache import Snapshot
    from kopf_scheduler.state.pod_info import PodInfo


class ScoreRunner(PluginTimer):
    """PreScore and Score over one profile's plugins (a part of the Framework)."""

    pre_score_plugins: tuple[tuple[str, PreScorePlugin], ...]
    score_plugins: tuple[tuple[str, ScorePlugin], ...]
    #: Score plugin name → its weight in the profile.
    score_weights: dict[str, int]

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
                    return wrapped_error(f"running PreScore plugin {go_quote(name)}", exc)
                if status.is_skip:
                    skip.add(name)
                    continue
                if not status.is_success:
                    return wrapped_error(f"running PreScore plugin {go_quote(name)}", status)
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
        scored: list[ScorePlugin] = []
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
                return None, wrapped_error(
                    "running Score plugins", RuntimeError(f"plugin {go_quote(name)} failed with: {error_text(exc)}")
                )
            names.append(name)
            scored.append(plugin)
            raw.append(scores)
        before_normalize = tuple(raw)  # kept for explanations (references only; normalising replaces items)
        for i, (name, scorer) in enumerate(zip(names, scored, strict=True)):
            if not scorer.has_normalize:
                continue
            try:
                normalized = np.asarray(scorer.normalize_score(state, pod, nodes, raw[i]), dtype=np.int64)
                if normalized.shape != (count,):
                    raise ValueError(
                        f"normalized {normalized.shape[0] if normalized.ndim else 0} scores for {count} nodes"
                    )
            except Exception as exc:
                return None, wrapped_error(
                    "running Normalize on Score plugins",
                    RuntimeError(f"plugin {go_quote(name)} failed with: {error_text(exc)}"),
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
                return None, wrapped_error("applying score defaultWeights on Score plugins", RuntimeError(message))
            weights = tuple(self.score_weights.get(name, 1) for name in names)
            product = stacked * np.asarray(weights, dtype=np.int64)[:, None]
            weighted = tuple(product)  # one row per plugin
            totals = product.sum(axis=0)
        else:
            weights, weighted = (), ()
            totals = np.zeros(count, dtype=np.int64)
        return ScoreOutcome(nodes, tuple(names), weights, weighted, totals, before_normalize), SUCCESS


__all__ = ["ScoreRunner"]
