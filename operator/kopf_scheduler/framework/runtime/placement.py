"""The PlacementGenerate and PlacementScore runners (upstream ``RunPlacementGeneratePlugins`` and
``RunPlacementScorePlugins`` of ``framework/runtime/framework.go``).

A workload-aware profile's pod-group cycle asks the (at most one) PlacementGenerate plugin for the placements to
try the group in, and the PlacementScore plugins to rank the placements it fits in: each plugin scores every
placement, plugins with a normaliser rewrite their row, every score must then lie in [0, 100], and the weighted
rows add up to each placement's total. Upstream runs placements in parallel and reports the first error any
goroutine hits; here they run in order, so the first error in (placement, plugin) order is the one reported.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from kopf_scheduler.framework.cycle_state import CycleState
from kopf_scheduler.framework.interface import (
    MAX_NODE_SCORE,
    MIN_NODE_SCORE,
    PlacementGeneratePlugin,
    PlacementScorePlugin,
)
from kopf_scheduler.framework.placement import (
    Placement,
    PlacementPluginScores,
    PlacementScore,
    PodGroupAssignments,
    PodGroupInfo,
)
from kopf_scheduler.framework.runtime.common import PluginTimer, error_text, wrapped_error
from kopf_scheduler.framework.status import SUCCESS, Code, Status
from kopf_scheduler.go_format import go_quote

#: Upstream's Unschedulable reason when the generator leaves no placement.
NO_FEASIBLE_PLACEMENTS = "no feasible placements found"


def status_error_text(status: Status) -> str:
    """Upstream ``status.AsError().Error()``: the status's error when it carries one, else its message."""
    return error_text(status.error) if status.error is not None else status.message


class PlacementRunner(PluginTimer):
    """PlacementGenerate and PlacementScore over one profile's plugins (a part of the Framework)."""

    placement_generate_plugins: tuple[tuple[str, PlacementGeneratePlugin], ...]
    placement_score_plugins: tuple[tuple[str, PlacementScorePlugin], ...]
    #: PlacementScore plugin name → its weight in the profile.
    placement_score_weights: dict[str, int]

    def run_placement_generate_plugins(
        self, state: CycleState, pod_group: PodGroupInfo, nodes: np.ndarray
    ) -> tuple[list[Placement], Status]:
        """The placements to try ``pod_group`` in: one placement (named "") of ``nodes`` without a PlacementGenerate
        plugin; else the plugin's, Unschedulable when it leaves none, its own status (stamped) when it fails."""
        parent = Placement("", nodes)
        if not self.placement_generate_plugins:
            return [parent], SUCCESS
        name, plugin = self.placement_generate_plugins[0]
        started = self._started(state)
        try:
            placements, status = plugin.generate_placements(state, pod_group, parent)
        except Exception as exc:
            status, placements = Status.as_error(exc), None
        self._observe(started, name, "PlacementGenerate", status)
        if not status.is_success:
            return [], status.with_plugin(name)
        if not placements:
            return [], Status(Code.UNSCHEDULABLE, (NO_FEASIBLE_PLACEMENTS,), name)
        return list(placements), SUCCESS

    def run_placement_score_plugins(
        self, state: CycleState, pod_group: PodGroupInfo, assignments: Sequence[PodGroupAssignments]
    ) -> tuple[list[PlacementPluginScores] | None, Status]:
        """Each placement's weighted score per plugin and total, or None and upstream's Error."""
        plugins = self.placement_score_plugins
        rows: dict[str, list[PlacementScore]] = {name: [] for name, _ in plugins}
        for assignment in assignments:
            for name, plugin in plugins:
                started = self._started(state)
                try:
                    score, status = plugin.score_placement(state, pod_group, assignment)
                except Exception as exc:
                    score, status = 0, Status.as_error(exc)
                self._observe(started, name, "PlacementScore", status)
                if not status.is_success:
                    return None, _plugin_failed("running PlacementScore plugins", name, status_error_text(status))
                rows[name].append(PlacementScore(assignment.placement, int(score)))
        for name, plugin in plugins:
            if not plugin.has_placement_normalize:
                continue
            started = self._started(state)
            try:
                status = plugin.normalize_placement_score(state, pod_group, rows[name])
            except Exception as exc:
                status = Status.as_error(exc)
            self._observe(started, name, "PlacementScoreExtensionNormalize", status)
            if not status.is_success:
                text = status_error_text(status)
                return None, _plugin_failed("running NormalizePlacementScore on PlacementScore plugins", name, text)
        return self._weighted(assignments, rows)

    def run_placement_score_bounds(
        self, state: CycleState, pod_group: PodGroupInfo, placements: Sequence[Placement]
    ) -> list[int] | None:
        """Each placement's highest weighted total if its trial placed every member
        (:meth:`PlacementScorePlugin.placement_score_bound`); None when a plugin does not know its bound. Not an
        upstream extension point: it orders the placements, and no plugin is timed for it."""
        totals = [0] * len(placements)
        for name, plugin in self.placement_score_plugins:
            weight = self.placement_score_weights.get(name, 1)
            for i, placement in enumerate(placements):
                try:
                    bound = plugin.placement_score_bound(state, pod_group, placement)
                except Exception:
                    return None  # the plugin's own errors are for its PlacementScore to report
                if bound is None:
                    return None
                totals[i] += bound * weight
        return totals

    def _weighted(
        self, assignments: Sequence[PodGroupAssignments], rows: dict[str, list[PlacementScore]]
    ) -> tuple[list[PlacementPluginScores] | None, Status]:
        """Range check and weights: each placement's (plugin, weighted score) and their sum."""
        result: list[PlacementPluginScores] = []
        for index, assignment in enumerate(assignments):
            scores: list[tuple[str, int]] = []
            for name, _ in self.placement_score_plugins:
                score = rows[name][index].score
                if not MIN_NODE_SCORE <= score <= MAX_NODE_SCORE:
                    message = (
                        f"plugin {go_quote(name)} returns an invalid score {score}, it should in the range of "
                        f"[{MIN_NODE_SCORE}, {MAX_NODE_SCORE}] after normalizing"
                    )
                    return None, wrapped_error("applying score defaultWeights on PlacementScore plugins", _E(message))
                scores.append((name, score * self.placement_score_weights.get(name, 1)))
            result.append(PlacementPluginScores(assignment.placement, tuple(scores), sum(s for _, s in scores)))
        return result, SUCCESS


class _E(RuntimeError):
    """An error that is just its text (Go's ``fmt.Errorf``)."""


def _plugin_failed(prefix: str, name: str, text: str) -> Status:
    return wrapped_error(prefix, _E(f"plugin {go_quote(name)} failed with: {text}"))


__all__ = ["NO_FEASIBLE_PLACEMENTS", "PlacementRunner", "status_error_text"]
