"""Profile → pipeline builder: upstream v1.36 defaults, merging, multiPoint expansion, validation and their texts.

Plugins here are small fake classes that only declare which interfaces they implement; the "upstream" registry
mirrors the interfaces of kube-scheduler's in-tree plugins so the default profile can be compared with
upstream's own fixture (``pkg/scheduler/apis/config/testing/defaults.ExpandedPluginsV1``).
"""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import BaseModel

from kopf_scheduler.api import args as A
from kopf_scheduler.api.profile import PluginEntry, PluginSet, SchedulerProfileSpec
from kopf_scheduler.framework import (
    BindPlugin,
    FilterPlugin,
    PermitPlugin,
    PlacementGeneratePlugin,
    PlacementScorePlugin,
    Plugin,
    PostBindPlugin,
    PostFilterPlugin,
    PreBindPlugin,
    PreEnqueuePlugin,
    PreFilterPlugin,
    PreScorePlugin,
    QueueSortPlugin,
    ReservePlugin,
    ScorePlugin,
)
from kopf_scheduler.framework.builder import (
    DEFAULT_MULTI_POINT,
    MergedPlugin,
    ProfileError,
    effective_plugins,
    merge_plugin_set,
    resolve_profile,
)
from kopf_scheduler.framework.extension_points import ExtensionPoint as E
from kopf_scheduler.framework.profile import ResolvedProfile

INTERFACES: dict[E, type[Plugin]] = {
    E.PRE_ENQUEUE: PreEnqueuePlugin,
    E.QUEUE_SORT: QueueSortPlugin,
    E.PRE_FILTER: PreFilterPlugin,
    E.FILTER: FilterPlugin,
    E.POST_FILTER: PostFilterPlugin,
    E.PRE_SCORE: PreScorePlugin,
    E.SCORE: ScorePlugin,
    E.RESERVE: ReservePlugin,
    E.PERMIT: PermitPlugin,
    E.PRE_BIND: PreBindPlugin,
    E.BIND: BindPlugin,
    E.POST_BIND: PostBindPlugin,
}


#: The placement points' interfaces (kept out of INTERFACES, which "implements everything" fakes are made of).
PLACEMENT_INTERFACES: dict[E, type[Plugin]] = {
    E.PLACEMENT_GENERATE: PlacementGeneratePlugin,
    E.PLACEMENT_SCORE: PlacementScorePlugin,
}


def fake(name: str, *points: E, args: type[BaseModel] | None = None) -> type[Plugin]:
    """A plugin class named ``name`` implementing ``points`` (what the builder reads off a real plugin)."""
    bases = tuple({**INTERFACES, **PLACEMENT_INTERFACES}[p] for p in points)
    return type(name, bases, {"name": name, "args_model": args})


def registry(*classes: type[Plugin]) -> dict[str, type[Plugin]]:
    return {cls.name: cls for cls in classes}


# The interfaces of upstream v1.36's default plugins (the `var _ fwk.XPlugin = &X{}` assertions).
UPSTREAM = registry(
    fake("SchedulingGates", E.PRE_ENQUEUE),
    fake("PrioritySort", E.QUEUE_SORT),
    fake("NodeUnschedulable", E.FILTER),
    fake("NodeName", E.FILTER),
    fake("TaintToleration", E.FILTER, E.PRE_SCORE, E.SCORE),
    fake("NodeAffinity", E.PRE_FILTER, E.FILTER, E.PRE_SCORE, E.SCORE, args=A.NodeAffinityArgs),
    fake("NodePorts", E.PRE_FILTER, E.FILTER),
    fake(
        "NodeResourcesFit",
        *(E.PRE_FILTER, E.FILTER, E.PRE_SCORE, E.SCORE, E.PLACEMENT_SCORE),
        args=A.NodeResourcesFitArgs,
    ),
    fake("VolumeRestrictions", E.PRE_FILTER, E.FILTER),
    fake("NodeVolumeLimits", E.PRE_FILTER, E.FILTER),
    fake(
        "VolumeBinding", E.PRE_FILTER, E.FILTER, E.RESERVE, E.PRE_BIND, E.PRE_SCORE, E.SCORE, args=A.VolumeBindingArgs
    ),
    fake("VolumeZone", E.PRE_FILTER, E.FILTER),
    fake("PodTopologySpread", E.PRE_FILTER, E.FILTER, E.PRE_SCORE, E.SCORE, args=A.PodTopologySpreadArgs),
    fake("InterPodAffinity", E.PRE_FILTER, E.FILTER, E.PRE_SCORE, E.SCORE, args=A.InterPodAffinityArgs),
    fake(
        "DynamicResources",
        *(E.PRE_ENQUEUE, E.PRE_FILTER, E.FILTER, E.POST_FILTER, E.SCORE, E.RESERVE, E.PRE_BIND),
        args=A.DynamicResourcesArgs,
    ),
    fake("DefaultPreemption", E.PRE_ENQUEUE, E.POST_FILTER, args=A.DefaultPreemptionArgs),
    fake("NodeResourcesBalancedAllocation", E.PRE_SCORE, E.SCORE, args=A.NodeResourcesBalancedAllocationArgs),
    fake("ImageLocality", E.SCORE),
    fake("DefaultBinder", E.BIND),
    fake("NodeDeclaredFeatures", E.PRE_FILTER, E.FILTER),
)
NOT_IMPLEMENTED_YET = (
    "VolumeRestrictions",
    "NodeVolumeLimits",
    "VolumeBinding",
    "VolumeZone",
    "DynamicResources",
    "DefaultPreemption",
    "NodeDeclaredFeatures",
)
OURS = {name: cls for name, cls in UPSTREAM.items() if name not in NOT_IMPLEMENTED_YET}

# Small fakes for the merge rules (names after upstream's framework_test.go).
EVERYWHERE = fake("TestPlugin", *INTERFACES)
QUEUE_SORT = fake("QueueSort", E.QUEUE_SORT)
BINDER = fake("Binder", E.BIND)
SCORE_1 = fake("Score1", E.PRE_SCORE, E.SCORE)
SCORE_2 = fake("Score2", E.SCORE)
SCORE_N = fake("ScoreWithNormalize", E.SCORE)
FILTER_1 = fake("Filter1", E.FILTER)
FILTER_2 = fake("Filter2", E.PRE_FILTER, E.FILTER)
RAW_ARGS = fake("RawArgs", E.FILTER)
SMALL = registry(EVERYWHERE, QUEUE_SORT, BINDER, SCORE_1, SCORE_2, SCORE_N, FILTER_1, FILTER_2, RAW_ARGS)
#: The smallest buildable default list for tests of merging: one queue sort, one binder.
BASE = (("QueueSort", None), ("Binder", None))


def spec(raw: dict[str, Any] | None = None) -> SchedulerProfileSpec:
    return SchedulerProfileSpec.model_validate(raw or {})


def resolve(
    raw: dict[str, Any] | None = None, reg: dict[str, type[Plugin]] = UPSTREAM, **kwargs: Any
) -> ResolvedProfile:
    return resolve_profile("p", spec(raw), reg, **kwargs)


def names(profile: ResolvedProfile, point: E) -> list[str]:
    return [ref.name for ref in profile.enabled(point)]


def weights(profile: ResolvedProfile) -> list[tuple[str, int]]:
    return [(ref.name, ref.weight) for ref in profile.enabled(E.SCORE)]


def error_of(raw: dict[str, Any], reg: dict[str, type[Plugin]] = UPSTREAM, **kwargs: Any) -> ProfileError:
    with pytest.raises(ProfileError) as info:
        resolve(raw, reg, **kwargs)
    return info.value


# -- the default profile (reference §1.1/§1.2, upstream v1.36) ----------------------------------------------------

# Upstream's ExpandedPluginsV1 fixture for v1.36 (DynamicResources and NodeDeclaredFeatures on by default).
UPSTREAM_DEFAULT_PROFILE: dict[E, list[str]] = {
    E.PRE_ENQUEUE: ["SchedulingGates", "DynamicResources", "DefaultPreemption"],
    E.QUEUE_SORT: ["PrioritySort"],
    E.PRE_FILTER: [
        "NodeAffinity",
        "NodePorts",
        "NodeResourcesFit",
        "VolumeRestrictions",
        "NodeVolumeLimits",
        "VolumeBinding",
        "VolumeZone",
        "PodTopologySpread",
        "InterPodAffinity",
        "DynamicResources",
        "NodeDeclaredFeatures",
    ],
    E.FILTER: [
        "NodeUnschedulable",
        "NodeName",
        "TaintToleration",
        "NodeAffinity",
        "NodePorts",
        "NodeResourcesFit",
        "VolumeRestrictions",
        "NodeVolumeLimits",
        "VolumeBinding",
        "VolumeZone",
        "PodTopologySpread",
        "InterPodAffinity",
        "DynamicResources",
        "NodeDeclaredFeatures",
    ],
    E.POST_FILTER: ["DynamicResources", "DefaultPreemption"],
    E.PRE_SCORE: [
        "TaintToleration",
        "NodeAffinity",
        "NodeResourcesFit",
        "VolumeBinding",
        "PodTopologySpread",
        "InterPodAffinity",
        "NodeResourcesBalancedAllocation",
    ],
    E.SCORE: [
        "TaintToleration",
        "NodeAffinity",
        "NodeResourcesFit",
        "VolumeBinding",
        "PodTopologySpread",
        "InterPodAffinity",
        "DynamicResources",
        "NodeResourcesBalancedAllocation",
        "ImageLocality",
    ],
    E.RESERVE: ["VolumeBinding", "DynamicResources"],
    E.PERMIT: [],
    E.PRE_BIND: ["VolumeBinding", "DynamicResources"],
    E.BIND: ["DefaultBinder"],
    E.POST_BIND: [],
    # Upstream's NodeResourcesFit is a PlacementScore plugin too (any gate): multiPoint expands it there, with weight
    # 1 (ExpandedPluginsV1). TopologyPlacementGenerator and PodGroupPodsCount join only with the gate on.
    E.PLACEMENT_GENERATE: [],
    E.PLACEMENT_SCORE: ["NodeResourcesFit"],
}
UPSTREAM_SCORE_WEIGHTS = [
    ("TaintToleration", 3),
    ("NodeAffinity", 2),
    ("NodeResourcesFit", 1),
    ("VolumeBinding", 1),
    ("PodTopologySpread", 2),
    ("InterPodAffinity", 2),
    ("DynamicResources", 2),
    ("NodeResourcesBalancedAllocation", 1),
    ("ImageLocality", 1),
]


def test_default_multi_point_list_is_upstream_1_36() -> None:
    assert [name for name, _ in DEFAULT_MULTI_POINT] == [
        "SchedulingGates",
        "PrioritySort",
        "NodeUnschedulable",
        "NodeName",
        "TaintToleration",
        "NodeAffinity",
        "NodePorts",
        "NodeResourcesFit",
        "VolumeRestrictions",
        "NodeVolumeLimits",
        "VolumeBinding",
        "VolumeZone",
        "PodTopologySpread",
        "InterPodAffinity",
        "DynamicResources",
        "DefaultPreemption",
        "NodeResourcesBalancedAllocation",
        "ImageLocality",
        "DefaultBinder",
        "NodeDeclaredFeatures",
    ]


@pytest.mark.parametrize("point", list(E), ids=[p.value for p in E])
def test_default_profile_matches_upstream_per_extension_point(point: E) -> None:
    assert names(resolve(), point) == UPSTREAM_DEFAULT_PROFILE[point]


def test_default_profile_score_weights() -> None:
    profile = resolve()
    assert weights(profile) == UPSTREAM_SCORE_WEIGHTS
    # Weights are a Score (and PlacementScore) matter; other points carry the neutral 1.
    assert {ref.weight for point in E if point is not E.SCORE for ref in profile.enabled(point)} == {1}
    assert [(ref.name, ref.weight) for ref in profile.enabled(E.PLACEMENT_SCORE)] == [("NodeResourcesFit", 1)]


@pytest.mark.parametrize(
    "raw",
    [
        pytest.param({}, id="no-plugins"),
        pytest.param({"plugins": {}}, id="empty-plugins"),
        pytest.param({"plugins": {"multiPoint": {}, "filter": {"enabled": [], "disabled": []}}}, id="empty-sets"),
    ],
)
def test_a_profile_without_plugins_is_the_default_profile(raw: dict[str, Any]) -> None:
    assert resolve(raw) == resolve()


def test_default_profile_has_typed_default_args_for_every_plugin_with_args() -> None:
    profile = resolve()
    assert profile.plugin_args == {
        "NodeAffinity": A.NodeAffinityArgs(),
        "NodeResourcesFit": A.NodeResourcesFitArgs(),
        "VolumeBinding": A.VolumeBindingArgs(),
        "PodTopologySpread": A.PodTopologySpreadArgs(),
        "InterPodAffinity": A.InterPodAffinityArgs(),
        "DefaultPreemption": A.DefaultPreemptionArgs(),
        "NodeResourcesBalancedAllocation": A.NodeResourcesBalancedAllocationArgs(),
        "DynamicResources": A.DynamicResourcesArgs(),
    }
    assert profile.omitted_defaults == ()
    assert profile.scheduler_name == "p"
    assert profile.percentage_of_nodes_to_score is None


def test_default_plugins_we_lack_are_omitted_and_reported() -> None:
    profile = resolve(reg=OURS)
    assert profile.omitted_defaults == NOT_IMPLEMENTED_YET
    for point in E:
        assert names(profile, point) == [n for n in UPSTREAM_DEFAULT_PROFILE[point] if n not in NOT_IMPLEMENTED_YET]
    assert weights(profile) == [(n, w) for n, w in UPSTREAM_SCORE_WEIGHTS if n not in NOT_IMPLEMENTED_YET]
    assert "DefaultPreemption" not in profile.plugin_args
    assert "VolumeBinding" not in profile.plugin_args


def test_a_disabled_missing_default_is_not_reported_as_omitted() -> None:
    profile = resolve({"plugins": {"multiPoint": {"disabled": [{"name": "VolumeBinding"}]}}}, OURS)
    assert "VolumeBinding" not in profile.omitted_defaults
    assert "VolumeZone" in profile.omitted_defaults


def test_explicitly_enabling_a_default_we_lack_is_an_error() -> None:
    error = error_of({"plugins": {"reserve": {"enabled": [{"name": "VolumeBinding"}]}}}, OURS)
    assert str(error) == (
        'plugins.reserve.enabled[0]: ReservePlugin "VolumeBinding" does not exist '
        "(a kube-scheduler default plugin that kopf-scheduler does not implement yet)"
    )
    error = error_of({"plugins": {"multiPoint": {"enabled": [{"name": "DefaultPreemption"}]}}}, OURS)
    assert error.field == "plugins.multiPoint.enabled[0]"
    assert 'PreFilterPlugin "DefaultPreemption" does not exist' in str(error)


def test_percentage_of_nodes_to_score_passes_through() -> None:
    assert resolve({"percentageOfNodesToScore": 0}).percentage_of_nodes_to_score == 0
    assert resolve({"percentageOfNodesToScore": 35}).percentage_of_nodes_to_score == 35


def test_effective_plugins_status_view() -> None:
    status = effective_plugins(resolve(reg=OURS)).to_api()
    assert status["queueSort"] == [{"name": "PrioritySort"}]
    assert status["score"][0] == {"name": "TaintToleration", "weight": 3}
    assert status["bind"] == [{"name": "DefaultBinder"}]
    assert status["permit"] == []
    assert [p["name"] for p in status["filter"]] == names(resolve(reg=OURS), E.FILTER)


# -- merging one plugin set (upstream TestMergePlugins) ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("defaults", "custom", "expected"),
    [
        pytest.param(
            ["D1", "D2"], {"enabled": [{"name": "Custom"}]}, [("D1", None), ("D2", None), ("Custom", None)], id="append"
        ),
        pytest.param(
            ["D1", "D2"],
            {"enabled": [{"name": "Custom"}, {"name": "D2"}], "disabled": [{"name": "D2"}]},
            [("D1", None), ("Custom", None), ("D2", None)],
            id="insert-after-default-by-disabling-it",
        ),
        pytest.param(
            ["D1", "D2"],
            {"enabled": [{"name": "Custom"}, {"name": "D1"}, {"name": "D2"}], "disabled": [{"name": "*"}]},
            [("Custom", None), ("D1", None), ("D2", None)],
            id="insert-before-all-with-star",
        ),
        pytest.param(
            ["D1", "D2"],
            {"enabled": [{"name": "D2"}, {"name": "D1"}], "disabled": [{"name": "*"}]},
            [("D2", None), ("D1", None)],
            id="reorder-defaults",
        ),
        pytest.param(
            ["P1", "P2", "P3"],
            {"enabled": [{"name": "P1", "weight": 2}, {"name": "P3", "weight": 3}]},
            [("P1", 2), ("P2", None), ("P3", 3)],
            id="override-default-in-place",
        ),
        pytest.param(
            ["P1", "P2", "P3"],
            {"enabled": [{"name": "P2", "weight": 2}, {"name": "P1", "weight": 1}]},
            [("P1", 1), ("P2", 2), ("P3", None)],
            id="override-keeps-default-order",
        ),
        pytest.param(
            ["P1", "P2", "P3"],
            {"enabled": [{"name": "P1"}, {"name": "P2", "weight": 2}, {"name": "P3"}, {"name": "P2", "weight": 4}]},
            [("P1", None), ("P2", 4), ("P3", None), ("P2", 2)],
            id="repeated-custom-last-one-replaces",
        ),
        pytest.param(["D1"], {"disabled": [{"name": "D1"}]}, [], id="only-disabled"),
        pytest.param(
            ["D1", "D2"], {"disabled": [{"name": "Unknown"}]}, [("D1", None), ("D2", None)], id="disable-unknown"
        ),
        pytest.param(["D1"], {}, [("D1", None)], id="nothing-custom"),
    ],
)
def test_merge_plugin_set(defaults: list[str], custom: dict[str, Any], expected: list[tuple[str, int | None]]) -> None:
    merged = merge_plugin_set(
        [MergedPlugin(n, None, None) for n in defaults], PluginSet.model_validate(custom), "plugins.filter"
    )
    assert [(e.name, e.weight) for e in merged.enabled] == expected


def test_merged_entries_remember_where_the_user_wrote_them() -> None:
    merged = merge_plugin_set(
        [MergedPlugin("D1", None, None), MergedPlugin("D2", None, None)],
        PluginSet.model_validate({"enabled": [{"name": "X"}, {"name": "D2", "weight": 5}]}),
        "plugins.multiPoint",
    )
    assert [(e.name, e.field) for e in merged.enabled] == [
        ("D1", None),
        ("D2", "plugins.multiPoint.enabled[1]"),
        ("X", "plugins.multiPoint.enabled[0]"),
    ]


# -- multiPoint expansion (upstream TestNewFrameworkMultiPointExpansion) --------------------------------------------


def expanded(profile: ResolvedProfile) -> dict[str, list[Any]]:
    out: dict[str, list[Any]] = {}
    for point in E:
        refs = profile.enabled(point)
        if refs:
            out[point.value] = [(r.name, r.weight) for r in refs] if point is E.SCORE else [r.name for r in refs]
    return out


EVERYWHERE_5 = {
    "preEnqueue": ["TestPlugin"],
    "queueSort": ["TestPlugin"],
    "preFilter": ["TestPlugin"],
    "filter": ["TestPlugin"],
    "postFilter": ["TestPlugin"],
    "preScore": ["TestPlugin"],
    "score": [("TestPlugin", 5)],
    "reserve": ["TestPlugin"],
    "permit": ["TestPlugin"],
    "preBind": ["TestPlugin"],
    "bind": ["TestPlugin"],
    "postBind": ["TestPlugin"],
}
REST = {k: v for k, v in EVERYWHERE_5.items() if k not in ("preScore", "score")}


@pytest.mark.parametrize(
    ("plugins", "expected"),
    [
        pytest.param({"multiPoint": {"enabled": [{"name": "TestPlugin", "weight": 5}]}}, EVERYWHERE_5, id="expansion"),
        pytest.param(
            {
                "multiPoint": {"enabled": [{"name": "TestPlugin"}]},
                "preScore": {"disabled": [{"name": "TestPlugin"}]},
                "score": {"disabled": [{"name": "TestPlugin"}]},
            },
            REST,
            id="disabled-at-some-points",
        ),
        pytest.param(
            {"multiPoint": {"enabled": [{"name": "TestPlugin"}, {"name": "Score1"}]}},
            {**REST, "preScore": ["TestPlugin", "Score1"], "score": [("TestPlugin", 1), ("Score1", 1)]},
            id="several-multi-point-plugins",
        ),
        pytest.param(
            {
                "multiPoint": {"enabled": [{"name": "TestPlugin"}, {"name": "Score1"}]},
                "preScore": {"disabled": [{"name": "*"}]},
            },
            {**REST, "score": [("TestPlugin", 1), ("Score1", 1)]},
            id="star-disables-expansion-at-a-point",
        ),
        pytest.param(
            {
                "multiPoint": {"enabled": [{"name": "Score1"}]},
                "score": {"enabled": [{"name": "Score2", "weight": 7}], "disabled": [{"name": "*"}]},
                "queueSort": {"enabled": [{"name": "TestPlugin"}]},
                "bind": {"enabled": [{"name": "Binder"}]},
            },
            {
                "queueSort": ["TestPlugin"],
                "preScore": ["Score1"],
                "score": [("Score2", 7)],
                "bind": ["Binder"],
            },
            id="star-keeps-explicit-plugins-of-the-point",
        ),
        pytest.param(
            {
                "multiPoint": {"enabled": [{"name": "ScoreWithNormalize"}, {"name": "TestPlugin"}, {"name": "Score1"}]},
                "score": {"enabled": [{"name": "Score1"}, {"name": "TestPlugin"}]},
            },
            {
                **REST,
                "preScore": ["TestPlugin", "Score1"],
                "score": [("Score1", 1), ("TestPlugin", 1), ("ScoreWithNormalize", 1)],
            },
            id="overrides-first-in-explicit-order",
        ),
        pytest.param(
            {
                "multiPoint": {"enabled": [{"name": "TestPlugin"}, {"name": "Score1"}]},
                "score": {"enabled": [{"name": "ScoreWithNormalize"}, {"name": "Score1"}, {"name": "TestPlugin"}]},
            },
            {
                **REST,
                "preScore": ["TestPlugin", "Score1"],
                "score": [("Score1", 1), ("TestPlugin", 1), ("ScoreWithNormalize", 1)],
            },
            id="explicit-only-plugins-after-multi-point",
        ),
        pytest.param(
            {
                "multiPoint": {"enabled": [{"name": "TestPlugin"}, {"name": "Score1"}]},
                "score": {"enabled": [{"name": "Score1", "weight": 5}, {"name": "TestPlugin", "weight": 3}]},
            },
            {**REST, "preScore": ["TestPlugin", "Score1"], "score": [("Score1", 5), ("TestPlugin", 3)]},
            id="explicit-score-weight-beats-multi-point",
        ),
        pytest.param(
            {
                "multiPoint": {"enabled": [{"name": "TestPlugin", "weight": 9}, {"name": "Score1", "weight": 8}]},
                "score": {
                    "enabled": [
                        {"name": "Score1", "weight": 5},
                        {"name": "Score2", "weight": 5},
                        {"name": "TestPlugin", "weight": 3},
                    ]
                },
            },
            {
                **REST,
                "preScore": ["TestPlugin", "Score1"],
                "score": [("Score1", 5), ("TestPlugin", 3), ("Score2", 5)],
            },
            id="override-weights-and-no-double-load",
        ),
        pytest.param(
            {
                "multiPoint": {
                    "enabled": [{"name": "QueueSort"}, {"name": "Binder"}, {"name": "Score1"}],
                    "disabled": [{"name": "*"}],
                }
            },
            {"queueSort": ["QueueSort"], "preScore": ["Score1"], "score": [("Score1", 1)], "bind": ["Binder"]},
            id="multi-point-star-then-enable",
        ),
        pytest.param(
            {
                "multiPoint": {
                    "enabled": [{"name": "Binder"}, {"name": "QueueSort"}, {"name": "Score1"}],
                    "disabled": [{"name": "Score1"}],
                }
            },
            {"queueSort": ["QueueSort"], "preScore": ["Score1"], "score": [("Score1", 1)], "bind": ["Binder"]},
            id="multi-point-enabled-beats-its-disabled",
        ),
    ],
)
def test_multi_point_expansion(plugins: dict[str, Any], expected: dict[str, list[Any]]) -> None:
    assert expanded(resolve({"plugins": plugins}, SMALL, default_plugins=())) == expected


@pytest.mark.parametrize(
    ("plugins", "expected_filter", "expected_score"),
    [
        pytest.param(
            {"multiPoint": {"enabled": [{"name": "Score1", "weight": 7}]}},
            ["Filter1"],
            [("Score2", 2), ("Score1", 7)],
            id="user-multi-point-appended-after-defaults",
        ),
        pytest.param(
            {"multiPoint": {"enabled": [{"name": "Score2", "weight": 9}]}},
            ["Filter1"],
            [("Score2", 9)],
            id="default-replaced-in-place-with-new-weight",
        ),
        pytest.param(
            {"multiPoint": {"disabled": [{"name": "Filter1"}]}},
            [],
            [("Score2", 2)],
            id="multi-point-disabled-removes-a-default",
        ),
        pytest.param(
            {"filter": {"disabled": [{"name": "Filter1"}]}},
            [],
            [("Score2", 2)],
            id="disabled-at-one-point-only",
        ),
        pytest.param(
            {"filter": {"enabled": [{"name": "Filter2"}]}, "score": {"enabled": [{"name": "Score1", "weight": 4}]}},
            ["Filter1", "Filter2"],
            [("Score2", 2), ("Score1", 4)],
            id="explicit-plugins-after-defaults",
        ),
        pytest.param(
            {"filter": {"enabled": [{"name": "Filter2"}, {"name": "Filter1"}]}},
            ["Filter1", "Filter2"],
            [("Score2", 2)],
            id="explicit-default-is-override-and-goes-first",
        ),
        pytest.param(
            {"score": {"enabled": [{"name": "Score2", "weight": 0}]}},
            ["Filter1"],
            [("Score2", 1)],
            id="explicit-weight-0-means-1-not-the-multi-point-weight",
        ),
        pytest.param(
            {"score": {"enabled": [{"name": "Score2", "weight": -2}]}},
            ["Filter1"],
            [("Score2", -2)],
            id="negative-weight-kept-as-upstream",
        ),
    ],
)
def test_merging_user_plugins_into_defaults(
    plugins: dict[str, Any], expected_filter: list[str], expected_score: list[tuple[str, int]]
) -> None:
    defaults = (*BASE, ("Filter1", None), ("Score2", 2))
    profile = resolve({"plugins": plugins}, SMALL, default_plugins=defaults)
    assert names(profile, E.FILTER) == expected_filter
    assert weights(profile) == expected_score


def test_unset_and_zero_weights_are_1() -> None:
    profile = resolve(
        {"plugins": {"multiPoint": {"enabled": [{"name": "Score1"}, {"name": "Score2", "weight": 0}]}}},
        SMALL,
        default_plugins=BASE,
    )
    assert weights(profile) == [("Score1", 1), ("Score2", 1)]


def test_explicit_default_score_weight_moves_the_plugin_first_as_upstream() -> None:
    # NodeResourcesFit listed under score is an override: it keeps its explicit weight and runs first.
    profile = resolve({"plugins": {"score": {"enabled": [{"name": "NodeResourcesFit", "weight": 5}]}}})
    assert weights(profile) == [("NodeResourcesFit", 5)] + [
        w for w in UPSTREAM_SCORE_WEIGHTS if w[0] != "NodeResourcesFit"
    ]


def test_docs_profiles() -> None:
    custom = registry(fake("MyCustomPluginA", E.SCORE), fake("MyCustomPluginB", E.SCORE))
    profile = resolve(
        {
            "plugins": {
                "score": {
                    "disabled": [{"name": "PodTopologySpread"}],
                    "enabled": [{"name": "MyCustomPluginA", "weight": 2}, {"name": "MyCustomPluginB", "weight": 1}],
                }
            }
        },
        {**UPSTREAM, **custom},
    )
    assert weights(profile) == [w for w in UPSTREAM_SCORE_WEIGHTS if w[0] != "PodTopologySpread"] + [
        ("MyCustomPluginA", 2),
        ("MyCustomPluginB", 1),
    ]
    assert "PodTopologySpread" in names(profile, E.PRE_SCORE)  # disabled at score only

    no_scoring = resolve(
        {"plugins": {"preScore": {"disabled": [{"name": "*"}]}, "score": {"disabled": [{"name": "*"}]}}}
    )
    assert names(no_scoring, E.PRE_SCORE) == []
    assert names(no_scoring, E.SCORE) == []
    assert names(no_scoring, E.FILTER) == UPSTREAM_DEFAULT_PROFILE[E.FILTER]


# -- framework construction errors ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("plugins", "message"),
    [
        pytest.param(
            {"filter": {"enabled": [{"name": "Nope"}]}},
            'plugins.filter.enabled[0]: FilterPlugin "Nope" does not exist',
            id="unknown-explicit",
        ),
        pytest.param(
            {"score": {"enabled": [{"name": "Nope"}]}},
            'plugins.score.enabled[0]: ScorePlugin "Nope" does not exist',
            id="unknown-score",
        ),
        pytest.param(
            {"preFilter": {"enabled": [{"name": "Nope1"}]}, "filter": {"enabled": [{"name": "Nope2"}]}},
            'plugins.preFilter.enabled[0]: PreFilterPlugin "Nope1" does not exist',
            id="unknown-pre-filter-checked-before-filter",
        ),
        pytest.param(
            {"multiPoint": {"enabled": [{"name": "Nope"}]}},
            'plugins.multiPoint.enabled[0]: PreFilterPlugin "Nope" does not exist',
            id="unknown-multi-point",
        ),
        pytest.param(
            {"multiPoint": {"enabled": [{"name": "Nope"}]}, "preFilter": {"disabled": [{"name": "*"}]}},
            'plugins.multiPoint.enabled[0]: FilterPlugin "Nope" does not exist',
            id="unknown-multi-point-named-at-first-expanded-point",
        ),
        pytest.param(
            {"filter": {"enabled": [{"name": "Score1"}]}},
            'plugins.filter.enabled[0]: plugin "Score1" does not extend FilterPlugin plugin',
            id="wrong-interface",
        ),
        pytest.param(
            {"queueSort": {"enabled": [{"name": "Binder"}]}},
            'plugins.queueSort.enabled[0]: plugin "Binder" does not extend QueueSortPlugin plugin',
            id="wrong-interface-queue-sort",
        ),
        pytest.param(
            {"filter": {"enabled": [{"name": "Filter1"}, {"name": "Filter2"}, {"name": "Filter1"}]}},
            'plugins.filter.enabled[2]: plugin "Filter1" already registered as "FilterPlugin"',
            id="duplicate-explicit",
        ),
        pytest.param(
            {"multiPoint": {"enabled": [{"name": "Filter2"}, {"name": "Filter2"}]}},
            'plugins.multiPoint.enabled[1]: plugin "Filter2" already registered as "PreFilterPlugin"',
            id="duplicate-multi-point",
        ),
        pytest.param(
            {"multiPoint": {"enabled": [{"name": "QueueSort"}, {"name": "QueueSort", "weight": 2}]}},
            'plugins.multiPoint.enabled[0]: plugin "QueueSort" already registered as "QueueSortPlugin"',
            id="duplicate-of-a-default-in-multi-point",
        ),
        pytest.param(
            {"filter": {"enabled": [{"name": "Nope"}]}, "preFilter": {"enabled": [{"name": "Score1"}]}},
            'plugins.preFilter.enabled[0]: plugin "Score1" does not extend PreFilterPlugin plugin',
            id="points-checked-in-upstream-order",
        ),
        pytest.param(
            {"multiPoint": {"disabled": [{"name": "*"}], "enabled": [{"name": "Binder"}]}},
            'plugins.queueSort: only one queue sort plugin required for profile with scheduler name "p", but got 0',
            id="no-queue-sort",
        ),
        pytest.param(
            {"queueSort": {"enabled": [{"name": "TestPlugin"}]}},
            'plugins.queueSort: only one queue sort plugin required for profile with scheduler name "p", but got 2',
            id="two-queue-sorts",
        ),
        pytest.param(
            {"bind": {"disabled": [{"name": "Binder"}]}},
            'plugins.bind: at least one bind plugin is needed for profile with scheduler name "p"',
            id="no-bind",
        ),
    ],
)
def test_framework_errors_name_the_field_with_upstream_text(plugins: dict[str, Any], message: str) -> None:
    error = error_of({"plugins": plugins}, SMALL, default_plugins=BASE)
    assert str(error) == message
    assert error.field == message.split(": ", 1)[0]
    assert isinstance(error, ValueError)


def test_score_weight_overflow_guard() -> None:
    # Weights are int32 in the API, so only a hand-built spec can reach the guard (as in upstream).
    big = PluginEntry.model_construct(name="Score1", weight=2**62)
    profile_spec = spec({"plugins": {"multiPoint": {"enabled": [{"name": "Score2", "weight": 2**31 - 1}]}}})
    profile_spec.plugins.score.enabled.append(big)
    with pytest.raises(ProfileError) as info:
        resolve_profile("p", profile_spec, SMALL, default_plugins=BASE)
    assert str(info.value) == "plugins.score: total score of Score plugins could overflow"


@pytest.mark.parametrize(
    ("plugins", "refused"),
    [
        # A negative weight followed by another Score plugin: upstream's int64 bound wraps and refuses it.
        pytest.param({"score": {"enabled": [{"name": "Score1", "weight": -5}]}}, True, id="negative-then-more"),
        pytest.param({"score": {"enabled": [{"name": "Score1", "weight": -1}]}}, True, id="minus-one"),
        pytest.param(
            {"score": {"enabled": [{"name": "Score2", "weight": -(2**31)}, {"name": "Score1", "weight": 2}]}},
            True,
            id="int32-min-then-more",
        ),
        # ... but nothing follows the last one, so a negative weight there passes (as upstream).
        pytest.param(
            {"multiPoint": {"enabled": [{"name": "Score1", "weight": 3}, {"name": "Score2", "weight": -5}]}},
            False,
            id="negative-last",
        ),
    ],
)
def test_negative_score_weight_is_refused_as_upstream_refuses_it(plugins: dict[str, Any], refused: bool) -> None:
    # Defaults: Score1 and Score2 (weight 1) after the queue sort and the binder.
    defaults = (*BASE, ("Score1", None), ("Score2", None))
    if refused:
        error = error_of({"plugins": plugins}, SMALL, default_plugins=defaults)
        assert str(error) == "plugins.score: total score of Score plugins could overflow"
    else:
        profile = resolve({"plugins": plugins}, SMALL, default_plugins=defaults)
        assert weights(profile) == [("Score1", 3), ("Score2", -5)]


def test_largest_int32_weights_do_not_overflow() -> None:
    profile = resolve(
        {
            "plugins": {
                "multiPoint": {
                    "enabled": [{"name": "Score1", "weight": 2**31 - 1}, {"name": "Score2", "weight": 2**31 - 1}]
                }
            }
        },
        SMALL,
        default_plugins=BASE,
    )
    assert weights(profile) == [("Score1", 2**31 - 1), ("Score2", 2**31 - 1)]


# -- config validation errors -----------------------------------------------------------------------------------------

V1 = '"kubescheduler.config.k8s.io/v1"'
# Upstream v1.36.3 prints the removal version as "v1" (see builder._removed).
REMOVED = f'was invalid in version "v1" (KubeSchedulerConfiguration is version {V1})'


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        pytest.param(
            {"percentageOfNodesToScore": 101},
            "percentageOfNodesToScore: Invalid value: 101: not in valid range [0-100]",
            id="percentage-101",
        ),
        pytest.param(
            {"percentageOfNodesToScore": -1},
            "percentageOfNodesToScore: Invalid value: -1: not in valid range [0-100]",
            id="percentage-negative",
        ),
        *[
            pytest.param(
                {"plugins": {"filter": {"enabled": [{"name": "NodePorts"}, {"name": removed}]}}},
                f'plugins.filter.enabled[1]: Invalid value: "{removed}": {REMOVED}',
                id=f"removed-{removed}",
            )
            for removed in ("AzureDiskLimits", "CinderLimits", "EBSLimits", "GCEPDLimits")
        ],
        pytest.param(
            {"plugins": {"multiPoint": {"enabled": [{"name": "EBSLimits"}]}}},
            f'plugins.multiPoint.enabled[0]: Invalid value: "EBSLimits": {REMOVED}',
            id="removed-in-multi-point",
        ),
        pytest.param(
            {"pluginConfig": [{"name": "GCEPDLimits", "args": {"foo": 1}}]},
            f'pluginConfig[0]: Invalid value: "GCEPDLimits": {REMOVED}',
            id="removed-in-plugin-config",
        ),
        pytest.param(
            {"pluginConfig": [{"name": "NodeResourcesFit"}, {"name": "ImageLocality"}, {"name": "NodeResourcesFit"}]},
            'pluginConfig[2]: Duplicate value: "NodeResourcesFit"',
            id="duplicate-plugin-config",
        ),
        pytest.param(
            {
                "pluginConfig": [
                    {
                        "name": "NodeResourcesFit",
                        "args": {
                            "scoringStrategy": {"type": "MostAllocated", "resources": [{"name": "cpu", "weight": 101}]}
                        },
                    }
                ]
            },
            "pluginConfig[0].args.scoringStrategy.resources[0].weight: Invalid value: 101: "
            "resource weight of cpu not in valid range (0, 100]",
            id="fit-args",
        ),
        pytest.param(
            {
                "pluginConfig": [
                    {"name": "ImageLocality"},
                    {"name": "InterPodAffinity", "args": {"hardPodAffinityWeight": 200}},
                ]
            },
            "pluginConfig[1].args.hardPodAffinityWeight: Invalid value: 200: not in valid range [0, 100]",
            id="inter-pod-affinity-args",
        ),
        pytest.param(
            {"pluginConfig": [{"name": "DefaultPreemption", "args": {"minCandidateNodesAbsolute": -1}}]},
            "pluginConfig[0].args.minCandidateNodesAbsolute: Invalid value: -1: not in valid range [0, inf)",
            id="args-of-a-plugin-we-lack-are-still-validated",
        ),
        pytest.param(
            {"pluginConfig": [{"name": "PodTopologySpread", "args": {"defaultingType": "List", "bogus": True}}]},
            "pluginConfig[0].args.bogus: Forbidden: unknown field",
            id="unknown-args-field",
        ),
        pytest.param(
            {"pluginConfig": [{"name": "NodeResourcesFit", "args": {"kind": "InterPodAffinityArgs"}}]},
            'pluginConfig[0].args.kind: Invalid value: "InterPodAffinityArgs": args for plugin NodeResourcesFit were '
            "not of type NodeResourcesFitArgs.kubescheduler.config.k8s.io",
            id="args-of-the-wrong-kind",
        ),
        pytest.param(
            {
                "pluginConfig": [
                    {"name": "NodeResourcesFit", "args": {"apiVersion": "kubescheduler.config.k8s.io/v1beta3"}}
                ]
            },
            'pluginConfig[0].args.apiVersion: Invalid value: "kubescheduler.config.k8s.io/v1beta3": '
            'must be "kubescheduler.config.k8s.io/v1"',
            id="args-of-another-version",
        ),
        pytest.param(
            {
                "percentageOfNodesToScore": 200,
                "plugins": {"filter": {"enabled": [{"name": "Nope"}]}},
                "pluginConfig": [{"name": "X"}, {"name": "X"}],
            },
            "[percentageOfNodesToScore: Invalid value: 200: not in valid range [0-100], "
            'pluginConfig[1]: Duplicate value: "X"]',
            id="validation-errors-together-and-before-framework-errors",
        ),
    ],
)
def test_validation_errors_name_the_field_with_upstream_text(raw: dict[str, Any], message: str) -> None:
    assert str(error_of(raw)) == message


def test_profile_error_lists_each_problem() -> None:
    error = error_of({"percentageOfNodesToScore": 200, "pluginConfig": [{"name": "X"}, {"name": "X"}]})
    assert [e.field for e in error.errors] == ["percentageOfNodesToScore", "pluginConfig[1]"]
    assert error.field == "percentageOfNodesToScore"
    assert error.message == str(error)


@pytest.mark.parametrize("value", [0, 100])
def test_percentage_bounds_are_valid(value: int) -> None:
    assert resolve({"percentageOfNodesToScore": value}).percentage_of_nodes_to_score == value


# -- args in the resolved profile ----------------------------------------------------------------------------------


def test_plugin_config_becomes_typed_args() -> None:
    profile = resolve(
        {
            "pluginConfig": [
                {
                    "name": "NodeResourcesFit",
                    "args": {
                        "apiVersion": "kubescheduler.config.k8s.io/v1",
                        "kind": "NodeResourcesFitArgs",
                        "scoringStrategy": {
                            "type": "MostAllocated",
                            "resources": [{"name": "cpu", "weight": 1}, {"name": "intel.com/foo", "weight": 3}],
                        },
                    },
                }
            ]
        }
    )
    args = profile.plugin_args["NodeResourcesFit"]
    assert isinstance(args, A.NodeResourcesFitArgs)
    assert args.scoring_strategy.type == "MostAllocated"
    assert [(r.name, r.weight) for r in args.scoring_strategy.resources] == [("cpu", 1), ("intel.com/foo", 3)]
    # The others keep their defaults.
    assert profile.plugin_args["InterPodAffinity"] == A.InterPodAffinityArgs()


def test_config_of_a_plugin_that_is_not_enabled_is_ignored() -> None:
    profile = resolve(
        {
            "plugins": {"multiPoint": {"disabled": [{"name": "InterPodAffinity"}]}},
            "pluginConfig": [{"name": "InterPodAffinity", "args": {"hardPodAffinityWeight": 5}}, {"name": "Stranger"}],
        }
    )
    assert "InterPodAffinity" not in profile.plugin_args
    assert "Stranger" not in profile.plugin_args


BAD_FIT_ARGS = {"name": "NodeResourcesFit", "args": {"scoringStrategy": {"type": "Nope"}}}
NOPE = 'Unsupported value: "Nope": supported values: "LeastAllocated", "MostAllocated", "RequestedToCapacityRatio"'


def test_fit_args_are_judged_only_when_the_plugin_is_needed_as_upstream() -> None:
    # kube-scheduler v1.36.3 validates NodeResourcesFit's args in the plugin's constructor only (its config
    # validator sits under the key "NodeResourcesFitArgs"): disabled everywhere, bad args start fine there.
    disabled = {"plugins": {"multiPoint": {"disabled": [{"name": "NodeResourcesFit"}]}}, "pluginConfig": [BAD_FIT_ARGS]}
    assert "NodeResourcesFit" not in resolve(disabled).plugin_args
    # Disabled at one point only, or enabled again at another: the plugin is constructed, the args refused.
    for plugins in (
        {"filter": {"disabled": [{"name": "NodeResourcesFit"}]}},
        {
            "multiPoint": {"disabled": [{"name": "NodeResourcesFit"}]},
            "score": {"enabled": [{"name": "NodeResourcesFit"}]},
        },
    ):
        error = error_of({"plugins": plugins, "pluginConfig": [BAD_FIT_ARGS]})
        assert str(error) == f"pluginConfig[0].args.scoringStrategy.type: {NOPE}"
    # What decoding refuses (an unknown field, a wrong type) is refused whether the plugin runs or not.
    for args in ({"bogus": 1}, {"ignoredResources": "x"}):
        spec = {**disabled, "pluginConfig": [{"name": "NodeResourcesFit", "args": args}]}
        assert error_of(spec).errors[0].field.startswith("pluginConfig[0].args.")


def test_fit_args_problems_are_reported_together_as_upstream_aggregates_them() -> None:
    error = error_of(
        {
            "pluginConfig": [
                {
                    "name": "NodeResourcesFit",
                    "args": {"ignoredResourceGroups": ["a/b"], "scoringStrategy": {"type": "Nope"}},
                }
            ]
        }
    )
    assert [e.field for e in error.errors] == [
        "pluginConfig[0].args.ignoredResourceGroups[0]",
        "pluginConfig[0].args.scoringStrategy.type",
    ]


def test_empty_plugin_names_are_judged_as_upstream() -> None:
    # kube-scheduler ignores "" in a disabled list and a pluginConfig entry for "", refuses it where it is enabled.
    resolve({"plugins": {"multiPoint": {"disabled": [{"name": ""}]}, "filter": {"disabled": [{"name": ""}]}}})
    resolve({"pluginConfig": [{"name": "", "args": {}}]})
    assert str(error_of({"plugins": {"filter": {"enabled": [{"name": ""}]}}})) == (
        'plugins.filter.enabled[0]: FilterPlugin "" does not exist'
    )
    assert str(error_of({"pluginConfig": [{"name": ""}, {"name": ""}]})) == 'pluginConfig[1]: Duplicate value: ""'


def test_args_of_plugins_without_args_model_stay_raw() -> None:
    raw = {"anything": [1, 2], "kind": "Whatever"}
    profile = resolve(
        {"plugins": {"filter": {"enabled": [{"name": "RawArgs"}]}}, "pluginConfig": [{"name": "RawArgs", "args": raw}]},
        SMALL,
        default_plugins=BASE,
    )
    assert profile.plugin_args == {"RawArgs": raw}


def test_plugin_without_args_model_and_config_has_no_args() -> None:
    profile = resolve({"plugins": {"filter": {"enabled": [{"name": "Filter1"}]}}}, SMALL, default_plugins=BASE)
    assert profile.plugin_args == {}


def test_registered_args_model_wins_over_upstream_one() -> None:
    class MyFitArgs(BaseModel):
        knob: int = 7

    mine = fake("NodeResourcesFit", E.FILTER, args=MyFitArgs)
    profile = resolve({}, {**SMALL, "NodeResourcesFit": mine}, default_plugins=(*BASE, ("NodeResourcesFit", None)))
    assert profile.plugin_args == {"NodeResourcesFit": MyFitArgs()}
    error = error_of(
        {"pluginConfig": [{"name": "NodeResourcesFit", "args": {"knob": "x"}}]},
        {**SMALL, "NodeResourcesFit": mine},
        default_plugins=BASE,
    )
    assert error.field == "pluginConfig[0].args.knob"


def test_resolved_profile_is_a_fresh_value_each_time() -> None:
    assert resolve() == resolve()
    assert resolve() is not resolve()
