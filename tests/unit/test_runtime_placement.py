"""The placement runners of the framework (upstream framework_test.go's TestRunPlacementGeneratePlugins and
TestRunPlacementScorePlugins): the generator's placements or its status, Unschedulable without placements; each
placement scored by every plugin, normalised where a plugin can, range-checked and weighted; upstream's error
texts; and the sampled plugin durations."""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np
import pytest

from kopf_scheduler.framework import (
    SUCCESS,
    CycleState,
    Placement,
    PlacementGeneratePlugin,
    PlacementScore,
    PlacementScorePlugin,
    PodGroupAssignments,
    PodGroupInfo,
    Status,
)
from kopf_scheduler.framework.extension_points import ExtensionPoint as E
from kopf_scheduler.framework.profile import PluginRef, ResolvedProfile
from kopf_scheduler.framework.registry import Registry
from kopf_scheduler.framework.runtime import Framework
from kopf_scheduler.framework.status import Code
from kopf_scheduler.plugins.default_binder import DefaultBinder
from kopf_scheduler.plugins.queue_sort import PrioritySort
from tests.unit.factories import FakeHandle, make_cache, make_node

GROUP = PodGroupInfo("default", "pg")
NODES = np.asarray([0, 1, 2], dtype=np.int64)


class Generator(PlacementGeneratePlugin):
    name: ClassVar[str] = "plugin[0]"
    result: ClassVar[list[Placement] | None] = None
    status: ClassVar[Status] = SUCCESS

    def generate_placements(
        self, state: CycleState, pod_group: PodGroupInfo, parent: Placement
    ) -> tuple[list[Placement] | None, Status]:
        return self.result, self.status


def build(plugins: list[type[Any]], points: dict[E, tuple[PluginRef, ...]]) -> Framework:
    registry = Registry([PrioritySort, DefaultBinder, *plugins])
    refs = {E.QUEUE_SORT: (PluginRef("PrioritySort"),), E.BIND: (PluginRef("DefaultBinder"),), **points}
    profile = ResolvedProfile("test-scheduler", plugins=refs)
    observed: list[tuple[str, str, str]] = []
    framework = Framework(
        profile,
        registry,
        FakeHandle(make_cache([make_node("n1")])),
        observe_plugin=lambda plugin, point, code, _: observed.append((plugin, point, code)),
    )
    framework.observed = observed  # type: ignore[attr-defined]
    return framework


# -- RunPlacementGeneratePlugins ------------------------------------------------------------------------------------
def test_without_a_generator_one_placement_of_the_given_nodes() -> None:
    [placement], status = build([], {}).run_placement_generate_plugins(CycleState(), GROUP, NODES)
    assert status.is_success
    assert placement.name == ""
    assert placement.nodes is NODES


def test_the_generators_placements() -> None:
    foo, bar = Placement("foo", NODES[:2]), Placement("bar", NODES[1:])
    Generator.result, Generator.status = [foo, bar], SUCCESS
    framework = build([Generator], {E.PLACEMENT_GENERATE: (PluginRef("plugin[0]"),)})
    placements, status = framework.run_placement_generate_plugins(CycleState(), GROUP, NODES)
    assert status.is_success
    assert placements == [foo, bar]


def test_a_failing_generator_returns_its_status_stamped() -> None:
    Generator.result, Generator.status = None, Status(Code.ERROR, ("error for test",))
    framework = build([Generator], {E.PLACEMENT_GENERATE: (PluginRef("plugin[0]"),)})
    placements, status = framework.run_placement_generate_plugins(CycleState(), GROUP, NODES)
    assert placements == []
    assert (status.code, status.message, status.plugin) == (Code.ERROR, "error for test", "plugin[0]")


def test_no_placements_is_unschedulable() -> None:
    Generator.result, Generator.status = [], SUCCESS
    framework = build([Generator], {E.PLACEMENT_GENERATE: (PluginRef("plugin[0]"),)})
    state = CycleState()
    state.record_plugin_metrics = True
    placements, status = framework.run_placement_generate_plugins(state, GROUP, NODES)
    assert placements == []
    assert (status.code, status.message, status.plugin) == (
        Code.UNSCHEDULABLE,
        "no feasible placements found",
        "plugin[0]",
    )
    assert framework.observed == [("plugin[0]", "PlacementGenerate", "Success")]  # type: ignore[attr-defined]


# -- RunPlacementScorePlugins ---------------------------------------------------------------------------------------
PLACEMENTS = [Placement(str(i), NODES[i : i + 1]) for i in range(3)]


def scorer(name: str, scores: list[int], errors: dict[int, Status] | None = None, normalize: Any = None) -> type[Any]:
    """A PlacementScore plugin answering ``scores`` by placement index (``errors`` instead where given)."""

    class Scorer(PlacementScorePlugin):
        has_placement_normalize: ClassVar[bool] = normalize is not None

        def score_placement(
            self, state: CycleState, pod_group: PodGroupInfo, assignments: PodGroupAssignments
        ) -> tuple[int, Status]:
            index = PLACEMENTS.index(assignments.placement)
            return scores[index], (errors or {}).get(index, SUCCESS)

        def normalize_placement_score(
            self, state: CycleState, pod_group: PodGroupInfo, rows: list[PlacementScore]
        ) -> Status:
            return normalize(rows)  # type: ignore[no-any-return]

    Scorer.name = name
    return Scorer


def run_scores(*plugins: tuple[type[Any], int]) -> tuple[list[tuple[list[tuple[str, int]], int]] | None, Status]:
    framework = build(
        [cls for cls, _ in plugins],
        {E.PLACEMENT_SCORE: tuple(PluginRef(cls.name, weight) for cls, weight in plugins)},
    )
    assignments = [PodGroupAssignments(p, ()) for p in PLACEMENTS]
    scores, status = framework.run_placement_score_plugins(CycleState(), GROUP, assignments)
    if scores is None:
        return None, status
    assert [s.placement for s in scores] == PLACEMENTS
    return [(list(s.scores), s.total_score) for s in scores], status


def test_all_success_weights_and_totals() -> None:
    scores, status = run_scores((scorer("plugin1", [0, 50, 100]), 1), (scorer("plugin2", [0, 50, 0]), 2))
    assert status.is_success
    assert scores == [
        ([("plugin1", 0), ("plugin2", 0)], 0),
        ([("plugin1", 50), ("plugin2", 100)], 150),
        ([("plugin1", 100), ("plugin2", 0)], 100),
    ]


def test_no_plugins_scores_every_placement_zero() -> None:
    scores, status = run_scores()
    assert status.is_success
    assert scores == [([], 0), ([], 0), ([], 0)]


def test_any_error_is_upstreams_error() -> None:
    failing = scorer("plugin2", [0, 50, 0], {1: Status(Code.ERROR, ("error for test",))})
    scores, status = run_scores((scorer("plugin1", [0, 50, 100]), 1), (failing, 2))
    assert scores is None
    assert (status.code, status.message) == (
        Code.ERROR,
        'running PlacementScore plugins: plugin "plugin2" failed with: error for test',
    )


def _scale_by_last(rows: list[PlacementScore]) -> Status:
    for row in rows:
        row.score = int(row.score / rows[2].score * 100)
    return SUCCESS


def test_normalize_success() -> None:
    normalizing = scorer("plugin2", [100, 200, 400], normalize=_scale_by_last)
    scores, status = run_scores((scorer("plugin1", [0, 50, 100]), 1), (normalizing, 2))
    assert status.is_success
    assert scores == [
        ([("plugin1", 0), ("plugin2", 50)], 50),
        ([("plugin1", 50), ("plugin2", 100)], 150),
        ([("plugin1", 100), ("plugin2", 200)], 300),
    ]


def test_normalize_failure() -> None:
    failing = scorer("plugin2", [0, 50, 100], normalize=lambda rows: Status(Code.ERROR, ("error for test",)))
    scores, status = run_scores((scorer("plugin1", [0, 50, 100]), 1), (failing, 2))
    assert scores is None
    assert status.message == (
        'running NormalizePlacementScore on PlacementScore plugins: plugin "plugin2" failed with: error for test'
    )


@pytest.mark.parametrize("bad", [101, -1], ids=["above-max", "below-min"])
def test_a_score_out_of_range_after_normalizing_is_an_error(bad: int) -> None:
    scores, status = run_scores((scorer("plugin1", [0, bad, 100]), 1))
    assert scores is None
    assert (status.code, status.message) == (
        Code.ERROR,
        f'applying score defaultWeights on PlacementScore plugins: plugin "plugin1" returns an invalid score {bad}, '
        "it should in the range of [0, 100] after normalizing",
    )
