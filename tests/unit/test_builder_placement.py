"""The placement extension points in a profile (upstream v1.36's ``placementGenerate`` and ``placementScore``):
multiPoint expansion, weights, and ``NewFramework``'s checks with their texts (``framework/runtime/framework.go``).
"""

from __future__ import annotations

from typing import Any

import pytest

from kopf_scheduler.api.profile import SchedulerProfileSpec
from kopf_scheduler.framework import (
    BindPlugin,
    PermitPlugin,
    PlacementGeneratePlugin,
    PlacementScorePlugin,
    Plugin,
    PreEnqueuePlugin,
    QueueSortPlugin,
    ScorePlugin,
)
from kopf_scheduler.framework.builder import ProfileError, effective_plugins, resolve_profile
from kopf_scheduler.framework.extension_points import ExtensionPoint as E
from kopf_scheduler.framework.profile import ResolvedProfile
from kopf_scheduler.plugins.registry import in_tree_registry


def fake(name: str, *bases: type[Plugin]) -> type[Plugin]:
    return type(name, bases, {"name": name})


REGISTRY: dict[str, type[Plugin]] = {
    cls.name: cls
    for cls in (
        fake("QueueSort", QueueSortPlugin),
        fake("Binder", BindPlugin),
        fake("Gang", PreEnqueuePlugin, PermitPlugin),
        fake("Generator", PlacementGeneratePlugin),
        fake("Generator2", PlacementGeneratePlugin),
        fake("Counter", PlacementScorePlugin),
        fake("Counter2", PlacementScorePlugin),
        fake("NodeScore", ScorePlugin),
        fake("Both", ScorePlugin, PlacementScorePlugin),
    )
}
BASE = (("QueueSort", None), ("Binder", None))


def resolve(plugins: dict[str, Any]) -> ResolvedProfile:
    spec = SchedulerProfileSpec.model_validate({"plugins": plugins})
    return resolve_profile("p", spec, REGISTRY, default_plugins=BASE)


def refs(profile: ResolvedProfile, point: E) -> list[tuple[str, int]]:
    return [(ref.name, ref.weight) for ref in profile.enabled(point)]


def test_multi_point_expands_to_the_placement_points_with_weights() -> None:
    profile = resolve(
        {"multiPoint": {"enabled": [{"name": "Gang"}, {"name": "Generator"}, {"name": "Counter", "weight": 3}]}}
    )
    assert refs(profile, E.PLACEMENT_GENERATE) == [("Generator", 1)]
    assert refs(profile, E.PLACEMENT_SCORE) == [("Counter", 3)]
    assert refs(profile, E.PERMIT) == [("Gang", 1)]
    status = effective_plugins(profile).to_api()
    assert status["placementGenerate"] == [{"name": "Generator"}]
    assert status["placementScore"] == [{"name": "Counter", "weight": 3}]


def test_an_explicit_placement_score_weight_beats_the_multi_point_one() -> None:
    profile = resolve(
        {
            "multiPoint": {"enabled": [{"name": "Counter", "weight": 3}]},
            "placementScore": {"enabled": [{"name": "Counter", "weight": 5}]},
        }
    )
    assert refs(profile, E.PLACEMENT_SCORE) == [("Counter", 5)]


def test_score_and_placement_score_weights_are_kept_apart() -> None:
    # A plugin at both points: each weight comes from its own point (then multiPoint), as upstream's two
    # getValidScoreWeights calls.
    profile = resolve(
        {
            "multiPoint": {"enabled": [{"name": "Both", "weight": 4}]},
            "score": {"enabled": [{"name": "Both", "weight": 2}]},
        }
    )
    assert refs(profile, E.SCORE) == [("Both", 2)]
    assert refs(profile, E.PLACEMENT_SCORE) == [("Both", 4)]


def test_placement_points_can_be_disabled_like_any_other() -> None:
    profile = resolve(
        {
            "multiPoint": {"enabled": [{"name": "Generator"}, {"name": "Counter"}]},
            "placementScore": {"disabled": [{"name": "*"}]},
        }
    )
    assert refs(profile, E.PLACEMENT_GENERATE) == [("Generator", 1)]
    assert refs(profile, E.PLACEMENT_SCORE) == []


@pytest.mark.parametrize(
    ("plugins", "message"),
    [
        pytest.param(
            {"placementGenerate": {"enabled": [{"name": "Generator"}, {"name": "Generator2"}]}},
            "plugins.placementGenerate: at most one placement generate plugin is allowed for profile with scheduler "
            'name "p"',
            id="two-generators",
        ),
        pytest.param(
            {"multiPoint": {"enabled": [{"name": "Generator"}, {"name": "Generator2"}]}},
            "plugins.placementGenerate: at most one placement generate plugin is allowed for profile with scheduler "
            'name "p"',
            id="two-generators-through-multi-point",
        ),
        pytest.param(
            {"placementScore": {"enabled": [{"name": "NodeScore"}]}},
            'plugins.placementScore.enabled[0]: plugin "NodeScore" does not extend PlacementScorePlugin plugin',
            id="a-score-plugin-is-no-placement-scorer",
        ),
        pytest.param(
            {"placementGenerate": {"enabled": [{"name": "Counter"}]}},
            'plugins.placementGenerate.enabled[0]: plugin "Counter" does not extend PlacementGeneratePlugin plugin',
            id="a-scorer-is-no-generator",
        ),
        pytest.param(
            {"placementScore": {"enabled": [{"name": "Nope"}]}},
            'plugins.placementScore.enabled[0]: PlacementScorePlugin "Nope" does not exist',
            id="unknown",
        ),
        pytest.param(
            {"placementScore": {"enabled": [{"name": "Counter"}, {"name": "Counter"}]}},
            'plugins.placementScore.enabled[1]: plugin "Counter" already registered as "PlacementScorePlugin"',
            id="duplicate",
        ),
    ],
)
def test_framework_errors_at_the_placement_points(plugins: dict[str, Any], message: str) -> None:
    with pytest.raises(ProfileError) as caught:
        resolve(plugins)
    assert str(caught.value) == message


def test_placement_score_weight_overflow_is_checked_on_its_own() -> None:
    big = 2**31 - 1
    spec = SchedulerProfileSpec.model_validate(
        {"plugins": {"placementScore": {"enabled": [{"name": "Counter", "weight": big}]}}}
    )
    spec.plugins.placement_score.enabled.append(
        type(spec.plugins.placement_score.enabled[0]).model_construct(name="Counter2", weight=2**62)
    )
    with pytest.raises(ProfileError) as caught:
        resolve_profile("p", spec, REGISTRY, default_plugins=BASE)
    assert str(caught.value) == "plugins.placementScore: total score of Score plugins could overflow"


def test_the_in_tree_placement_plugins_implement_their_points_and_are_workload_aware() -> None:
    registry = in_tree_registry()
    generator, counter = registry["TopologyPlacementGenerator"], registry["PodGroupPodsCount"]
    assert generator.extension_points() == frozenset({E.PLACEMENT_GENERATE})
    assert counter.extension_points() == frozenset({E.PLACEMENT_SCORE})
    assert generator.workload_aware
    assert counter.workload_aware


def test_the_default_profile_has_upstreams_placement_plugins() -> None:
    # `spec: {}` is upstream's default profile: no generator, NodeResourcesFit at placementScore (weight 1), as
    # upstream's ExpandedPluginsV1 (its Fit implements PlacementScorePlugin whatever the gates).
    profile = resolve_profile("p", SchedulerProfileSpec(), in_tree_registry())
    assert profile.enabled(E.PLACEMENT_GENERATE) == ()
    assert [(ref.name, ref.weight) for ref in profile.enabled(E.PLACEMENT_SCORE)] == [("NodeResourcesFit", 1)]
