"""A seeded generator of SchedulerProfile specs, valid and broken, for the profile-validation comparison.

Why generated: the validation rules are many small ones spread over three layers upstream (strict decoding,
``ValidateKubeSchedulerConfiguration`` with the plugin-args validators, framework construction in
``runtime/framework.go``) and over three on our side (the CRD's OpenAPI schema, the pydantic models, the
profile builder). Hand-written cases test the rules somebody thought of; a generator mixes them. Each spec is
a function of its seed alone (``random.Random(seed)``), so a disagreement found by ``make conformance`` is
reproduced by the same seed, and ``make test`` runs a fixed range of seeds.

A spec is the ``spec`` of a SchedulerProfile, which is one KubeSchedulerConfiguration profile without
``schedulerName``. Each seed first picks a *category* (what the spec is about: score weights, duplicates,
one plugin's args, extension-point mixes, unknown plugins, percentageOfNodesToScore, a valid tweak) and then
draws the details. Specs name only plugins both sides know (the ones kopf-scheduler implements, listed here
with the extension points upstream's implementations have), upstream's removed ones, and names nobody
registers. Upstream defaults we do not implement (DefaultPreemption, ...) stay out of generated specs: our
builder leaves them out of the pipeline (``omitted_defaults``) and the upstream side disables them (see
:func:`tests.conformance.profile_validation.upstream_config`), except in the one category that is about them.

No spec is labelled in advance as one whose outcome may differ: every disagreement fails, whatever the
category of its seed (issue 37). Categories only steer what gets generated.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

#: Upstream's extension points of the plugins we implement (``pkg/scheduler/framework/plugins``, v1.36).
PLUGIN_POINTS: dict[str, tuple[str, ...]] = {
    "SchedulingGates": ("preEnqueue",),
    "PrioritySort": ("queueSort",),
    "NodeUnschedulable": ("filter",),
    "NodeName": ("filter",),
    "TaintToleration": ("filter", "preScore", "score"),
    "NodeAffinity": ("preFilter", "filter", "preScore", "score"),
    "NodePorts": ("preFilter", "filter"),
    "NodeResourcesFit": ("preFilter", "filter", "preScore", "score"),
    "PodTopologySpread": ("preFilter", "filter", "preScore", "score"),
    "InterPodAffinity": ("preFilter", "filter", "preScore", "score"),
    "NodeResourcesBalancedAllocation": ("preScore", "score"),
    "ImageLocality": ("score",),
    "DefaultBinder": ("bind",),
    "VolumeBinding": ("preFilter", "filter", "reserve", "preBind", "preScore", "score"),
}
SCORE_PLUGINS = tuple(name for name, points in PLUGIN_POINTS.items() if "score" in points)
POINTS = (
    "preEnqueue",
    "queueSort",
    "preFilter",
    "filter",
    "postFilter",
    "preScore",
    "score",
    "reserve",
    "permit",
    "preBind",
    "bind",
    "postBind",
)
#: Upstream defaults kopf-scheduler does not implement (our builder's ``omitted_defaults``): none since issue 12,
#: so upstream runs its unmodified default profile.
OMITTED_DEFAULTS: tuple[str, ...] = ()
#: Plugins removed from the v1 API (upstream ``invalidPluginsByVersion``).
REMOVED = ("AzureDiskLimits", "CinderLimits", "EBSLimits", "GCEPDLimits")
#: Unknown to kube-scheduler and to us (Coscheduling is ours since issue 36: an out-of-tree plugin of upstream's
#: scheduler-plugins that is still unknown here stands in for it).
UNKNOWN = ("NoSuchPlugin", "nodeaffinity", "CapacityScheduling", "Node Affinity")
INT32_MAX = 2**31 - 1
INT32_MIN = -(2**31)


@dataclass(frozen=True)
class SpecCase:
    """One generated spec: its seed, the category it was drawn from, the spec."""

    seed: int
    category: str
    spec: dict[str, Any]

    @property
    def name(self) -> str:
        """The SchedulerProfile name (and upstream schedulerName) of this case."""
        return f"validate-{self.seed}"


def _entry(name: str, weight: int | None = None) -> dict[str, Any]:
    return {"name": name} if weight is None else {"name": name, "weight": weight}


def _plugins(point: str, enabled: list[dict[str, Any]] | None = None, disabled: list[str] | None = None) -> dict:
    pset: dict[str, Any] = {}
    if enabled:
        pset["enabled"] = enabled
    if disabled:
        pset["disabled"] = [{"name": n} for n in disabled]
    return {point: pset}


def _score_point(rng: random.Random) -> str:
    return rng.choice(("score", "multiPoint"))


# -- categories -------------------------------------------------------------------------------------------------


def _valid(rng: random.Random) -> dict[str, Any]:
    spec: dict[str, Any] = {}
    if rng.random() < 0.5:
        spec["percentageOfNodesToScore"] = rng.choice((0, 1, 5, 50, 100))
    plugins: dict[str, Any] = {}
    if rng.random() < 0.6:
        chosen = rng.sample(SCORE_PLUGINS, rng.randint(1, 3))
        plugins.update(_plugins(_score_point(rng), [_entry(n, rng.choice((None, 1, 2, 10, 100))) for n in chosen]))
    if rng.random() < 0.4:
        point = rng.choice(("filter", "score", "preScore"))
        candidates = [n for n, p in PLUGIN_POINTS.items() if point in p]
        plugins.setdefault(point, {})["disabled"] = [{"name": rng.choice(candidates)}]
    if plugins:
        spec["plugins"] = plugins
    return spec


def _weight_zero(rng: random.Random) -> dict[str, Any]:
    name = rng.choice(SCORE_PLUGINS)
    return {"plugins": _plugins(_score_point(rng), [_entry(name, 0)])}


def _weight_negative(rng: random.Random) -> dict[str, Any]:
    name = rng.choice(SCORE_PLUGINS)
    weight = rng.choice((-1, -5, -100, INT32_MIN))
    entries = [_entry(name, weight)]
    if rng.random() < 0.3:  # a negative weight next to big positive ones
        other = rng.choice([n for n in SCORE_PLUGINS if n != name])
        entries.append(_entry(other, INT32_MAX))
    return {"plugins": _plugins(_score_point(rng), entries)}


def _weight_huge(rng: random.Random) -> dict[str, Any]:
    # int32 weights cannot overflow the int64 total (13 × 2³¹ × 100 ≪ 2⁶³); beyond int32 fails decoding.
    names = rng.sample(SCORE_PLUGINS, rng.randint(1, len(SCORE_PLUGINS)))
    weight = rng.choice((INT32_MAX, INT32_MAX, 2**31, 2**40, 2**63 - 1, 2**63))
    return {"plugins": _plugins(_score_point(rng), [_entry(n, weight) for n in names])}


def _weight_not_score(rng: random.Random) -> dict[str, Any]:
    # A weight given at a point where it means nothing (filter) or for a plugin that does not score.
    name = rng.choice([n for n, p in PLUGIN_POINTS.items() if "filter" in p])
    return {"plugins": _plugins("filter", [_entry(name, rng.choice((-3, 0, 7)))], [name])}


def _duplicate(rng: random.Random) -> dict[str, Any]:
    kind = rng.choice(("point", "multiPoint", "override", "pluginConfig", "disabledTwice"))
    if kind == "point":
        point = rng.choice(("filter", "score", "preFilter", "preScore"))
        name = rng.choice([n for n, p in PLUGIN_POINTS.items() if point in p])
        return {"plugins": _plugins(point, [_entry(name), _entry(name)], [name] if rng.random() < 0.5 else None)}
    if kind == "multiPoint":
        name = rng.choice(tuple(PLUGIN_POINTS))
        return {"plugins": _plugins("multiPoint", [_entry(name), _entry(name)], [name] if rng.random() < 0.5 else None)}
    if kind == "override":  # a default multiPoint plugin also listed at a single point: an override, valid
        name = rng.choice(SCORE_PLUGINS)
        return {"plugins": _plugins("score", [_entry(name, rng.randint(1, 50))])}
    if kind == "pluginConfig":
        name = rng.choice(("InterPodAffinity", "DefaultPreemption", "NodeAffinity"))
        return {"pluginConfig": [{"name": name, "args": {}}, {"name": name, "args": {}}]}
    name = rng.choice(tuple(PLUGIN_POINTS))
    return {"plugins": _plugins("multiPoint", None, [name, name])}


def _bad_fit(rng: random.Random) -> dict[str, Any]:
    choice = rng.randrange(9)
    if choice == 0:
        return {"scoringStrategy": {"type": rng.choice(("Nope", "leastAllocated", ""))}}
    if choice == 1:
        return {"scoringStrategy": {"resources": [{"name": "cpu"}]}}  # no type: Unsupported value ""
    if choice == 2:
        return {
            "scoringStrategy": {
                "type": "LeastAllocated",
                "resources": [{"name": "cpu", "weight": rng.choice((-1, 101, 1000))}],
            }
        }
    if choice == 3:
        return {"scoringStrategy": {"type": "RequestedToCapacityRatio"}}
    if choice == 4:
        shape = rng.choice(
            (
                [],
                [{"utilization": 50, "score": 5}, {"utilization": 10, "score": 1}],
                [{"utilization": 101, "score": 5}],
                [{"utilization": 10, "score": 11}],
                [{"utilization": -1, "score": -1}],
            )
        )
        return {"scoringStrategy": {"type": "RequestedToCapacityRatio", "requestedToCapacityRatio": {"shape": shape}}}
    if choice == 5:
        return {
            "scoringStrategy": {
                "type": "MostAllocated",
                "requestedToCapacityRatio": {"shape": [{"utilization": 0, "score": 0}]},
            }
        }
    if choice == 6:
        return {"ignoredResources": [rng.choice(("Bad Name", "-x", "example.com/ok", "a" * 64))]}
    if choice == 7:
        return {"ignoredResourceGroups": [rng.choice(("example.com/gpu", "UPPER_ok", "bad name"))]}
    return {"scoringStrategy": {"type": "LeastAllocated", "resources": [{"name": "cpu", "weight": 0}]}}  # 0 → 1: valid


def _bad_balanced(rng: random.Random) -> dict[str, Any]:
    return rng.choice(
        (
            {"resources": [{"name": "cpu", "weight": 2}]},
            {"resources": [{"name": "cpu", "weight": 1}, {"name": "cpu", "weight": 1}]},
            {"resources": [{"name": "memory", "weight": -1}]},
            {"resources": []},
            {"resources": [{"name": "cpu", "weight": 0}]},
        )
    )


def _bad_inter_pod(rng: random.Random) -> dict[str, Any]:
    return {"hardPodAffinityWeight": rng.choice((-1, 0, 50, 100, 101, INT32_MAX))}


def _bad_preemption(rng: random.Random) -> dict[str, Any]:
    return rng.choice(
        (
            {"minCandidateNodesPercentage": -1},
            {"minCandidateNodesPercentage": 101},
            {"minCandidateNodesAbsolute": -5},
            {"minCandidateNodesPercentage": 0, "minCandidateNodesAbsolute": 0},
            {"minCandidateNodesPercentage": 50, "minCandidateNodesAbsolute": 10},
        )
    )


def _bad_spread(rng: random.Random) -> dict[str, Any]:
    constraint: dict[str, Any] = {
        "maxSkew": 1,
        "topologyKey": "topology.kubernetes.io/zone",
        "whenUnsatisfiable": "ScheduleAnyway",
    }
    flaw = rng.randrange(7)
    if flaw == 0:
        constraint["maxSkew"] = rng.choice((0, -1))
    elif flaw == 1:
        constraint["topologyKey"] = rng.choice(("", "bad key!"))
    elif flaw == 2:
        constraint["whenUnsatisfiable"] = rng.choice(("", "Maybe"))
    elif flaw == 3:
        constraint["labelSelector"] = {"matchLabels": {"app": "x"}}
    elif flaw == 4:
        return {"defaultingType": "List", "defaultConstraints": [constraint, dict(constraint)]}
    elif flaw == 5:
        return {"defaultingType": "System", "defaultConstraints": [constraint]}
    else:
        return {"defaultingType": rng.choice(("List", "Other"))}
    return {"defaultingType": "List", "defaultConstraints": [constraint]}


def _bad_node_affinity(rng: random.Random) -> dict[str, Any]:
    term = rng.choice(
        (
            {"matchExpressions": [{"key": "zone", "operator": "Bogus", "values": ["a"]}]},
            {"matchExpressions": [{"key": "zone", "operator": "In"}]},
            {"matchExpressions": [{"key": "zone", "operator": "Exists", "values": ["a"]}]},
            {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]},
            {"matchExpressions": [{"key": "bad key", "operator": "In", "values": ["not a value!"]}]},
            {"matchExpressions": [{"key": "n", "operator": "Gt", "values": ["1", "x"]}]},
            {"matchFields": [{"key": "metadata.name", "operator": rng.choice(("In", "Exists")), "values": []}]},
        )
    )
    if rng.random() < 0.5:
        return {"addedAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [term]}}}
    return {"addedAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [{"weight": 1, "preference": term}]}}


def _bad_volume_binding(rng: random.Random) -> dict[str, Any]:
    return rng.choice(
        ({"bindTimeoutSeconds": -1}, {"bindTimeoutSeconds": 30}, {"shape": [{"utilization": 0, "score": 0}]})
    )


#: Plugin → generator of (mostly bad) args for it.
BAD_ARGS: dict[str, Callable[[random.Random], dict[str, Any]]] = {
    "NodeResourcesFit": _bad_fit,
    "NodeResourcesBalancedAllocation": _bad_balanced,
    "InterPodAffinity": _bad_inter_pod,
    "DefaultPreemption": _bad_preemption,
    "PodTopologySpread": _bad_spread,
    "NodeAffinity": _bad_node_affinity,
    "VolumeBinding": _bad_volume_binding,
}


def _args(rng: random.Random) -> dict[str, Any]:
    plugin = rng.choice(tuple(BAD_ARGS))
    spec: dict[str, Any] = {"pluginConfig": [{"name": plugin, "args": BAD_ARGS[plugin](rng)}]}
    if plugin in PLUGIN_POINTS and plugin != "NodeResourcesFit" and rng.random() < 0.3:
        # Args are validated at config load whether the plugin runs or not (NodeResourcesFit's only when it is
        # constructed: the fit-args-disabled category).
        spec["plugins"] = {"multiPoint": {"disabled": [{"name": plugin}]}}
    return spec


def _args_malformed(rng: random.Random) -> dict[str, Any]:
    plugin = rng.choice(("InterPodAffinity", "DefaultPreemption", "NodeResourcesFit", "PodTopologySpread"))
    flaw = rng.randrange(5)
    if flaw == 0:
        args: dict[str, Any] = {"noSuchField": 1}
    elif flaw == 1:
        args = {"kind": "SomethingElseArgs"}
    elif flaw == 2:
        args = {"apiVersion": "kubescheduler.config.k8s.io/v1", "kind": f"{plugin}Args"}  # valid
    elif flaw == 3:
        args = {"apiVersion": "kubescheduler.config.k8s.io/v1beta3"}
    else:
        field = {
            "InterPodAffinity": "hardPodAffinityWeight",
            "DefaultPreemption": "minCandidateNodesAbsolute",
            "NodeResourcesFit": "ignoredResources",
            "PodTopologySpread": "defaultConstraints",
        }[plugin]
        args = {field: "not-the-right-type"}
    return {"pluginConfig": [{"name": plugin, "args": args}]}


def _wrong_point(rng: random.Random) -> dict[str, Any]:
    point = rng.choice(POINTS)
    name = rng.choice([n for n, p in PLUGIN_POINTS.items() if point not in p])
    return {"plugins": _plugins(point, [_entry(name)])}


def _multi_point_mix(rng: random.Random) -> dict[str, Any]:
    kind = rng.randrange(6)
    if kind == 0:  # multiPoint entry with a weight, overridden at score with another
        name = rng.choice(SCORE_PLUGINS)
        return {
            "plugins": {
                "multiPoint": {"enabled": [_entry(name, rng.randint(1, 9))]},
                "score": {"enabled": [_entry(name, rng.randint(-3, 9))]},
            }
        }
    if kind == 1:  # disable everything, then enable a full pipeline by hand (or forget something)
        mp = [_entry("PrioritySort"), _entry("NodeResourcesFit", 2), _entry("DefaultBinder")]
        if rng.random() < 0.4:
            mp.pop(rng.randrange(len(mp)))
        return {"plugins": {"multiPoint": {"enabled": mp, "disabled": [{"name": "*"}]}}}
    if kind == 2:  # disabled * at one point: multiPoint does not expand there
        point = rng.choice(("filter", "score", "queueSort", "bind", "preFilter", "preEnqueue"))
        pset: dict[str, Any] = {"disabled": [{"name": "*"}]}
        if rng.random() < 0.5:
            candidates = [n for n, p in PLUGIN_POINTS.items() if point in p]
            pset["enabled"] = [_entry(rng.choice(candidates))]
        return {"plugins": {point: pset}}
    if kind == 3:  # disable a default, then enable it again (it moves to the end, with the user's weight)
        name = rng.choice(tuple(PLUGIN_POINTS))
        where = rng.choice(("multiPoint", *PLUGIN_POINTS[name]))
        return {"plugins": _plugins(where, [_entry(name, rng.choice((None, 3)))], [name])}
    if kind == 4:  # two queue sort or bind plugins
        point = rng.choice(("queueSort", "bind"))
        name = "PrioritySort" if point == "queueSort" else "DefaultBinder"
        return {"plugins": {point: {"enabled": [_entry(name)]}, "multiPoint": {"enabled": [_entry(name)]}}}
    # multiPoint enabled plugin disabled at one of its points
    name = rng.choice([n for n, p in PLUGIN_POINTS.items() if len(p) > 1])
    return {
        "plugins": {
            "multiPoint": {"disabled": [{"name": name}], "enabled": [_entry(name)]},
            rng.choice(PLUGIN_POINTS[name]): {"disabled": [{"name": name}]},
        }
    }


def _unknown(rng: random.Random) -> dict[str, Any]:
    name = rng.choice(UNKNOWN)
    kind = rng.randrange(4)
    if kind == 0:
        return {"plugins": _plugins(rng.choice((*POINTS, "multiPoint")), [_entry(name)])}
    if kind == 1:  # disabling an unknown name is no error upstream
        return {"plugins": _plugins(rng.choice((*POINTS, "multiPoint")), None, [name])}
    if kind == 2:  # args for a plugin nobody registered are passed on raw, never read
        return {"pluginConfig": [{"name": name, "args": {"anything": [1, 2]}}]}
    return {"plugins": _plugins(rng.choice(("filter", "multiPoint")), [_entry(rng.choice(REMOVED))])}


def _removed_config(rng: random.Random) -> dict[str, Any]:
    return {"pluginConfig": [{"name": rng.choice(REMOVED), "args": {}}]}


def _percentage(rng: random.Random) -> dict[str, Any]:
    return {"percentageOfNodesToScore": rng.choice((-1, 101, 1000, INT32_MIN, 0, 100, 2**31))}


def _schema(rng: random.Random) -> dict[str, Any]:
    """Shapes the strict decoders refuse (unknown keys, wrong types), and empty names (refused only where enabled)."""
    choice = rng.randrange(7)
    if choice == 0:
        return {"pluginConfig": [{"name": "", "args": {}}]}
    if choice == 1:
        return {"plugins": {"multiPoint": {"disabled": [{"name": ""}]}}}
    return (
        {"plugins": {"filter": {"enabled": [{"name": ""}]}}},
        {"plugins": {"score": {"enabled": [{"name": "ImageLocality", "weight": "high"}]}}},
        {"plugins": {"nonsense": {}}},
        {"percentageOfNodesToScore": "50"},
        {"plugins": {"filter": {"enabled": [{"name": "NodeName", "extra": 1}]}}},
    )[choice - 2]


def _fit_args_when_disabled(rng: random.Random) -> dict[str, Any]:
    # Upstream judges NodeResourcesFit's args only when it constructs the plugin: disabled, bad args pass.
    return {
        "plugins": {"multiPoint": {"disabled": [{"name": "NodeResourcesFit"}]}},
        "pluginConfig": [{"name": "NodeResourcesFit", "args": _bad_fit(rng)}],
    }


def _omitted_default(rng: random.Random) -> dict[str, Any]:
    # DefaultPreemption named explicitly at postFilter: once an omitted default, implemented since issue 11 (the
    # case stays so that every seed keeps its spec).
    return {"plugins": _plugins("postFilter", [_entry("DefaultPreemption")])}


def _placement_point(rng: random.Random) -> dict[str, Any]:
    # v1.36's alpha extension points (TopologyAwareWorkloadScheduling): in upstream's v1 API and ours (issue 35); a
    # Score plugin enabled there is refused on both sides (`plugin "X" does not extend PlacementScorePlugin plugin`).
    # Once a deliberate difference (an unknown field for us): the draws stay so that every seed keeps its spec.
    point = rng.choice(("placementGenerate", "placementScore"))
    pset = rng.choice(({}, {"disabled": [{"name": "*"}]}, {"enabled": [{"name": rng.choice(SCORE_PLUGINS)}]}))
    return {"plugins": {point: pset}}


#: (category, relative frequency, builder).
CATEGORIES: tuple[tuple[str, int, Callable[[random.Random], dict[str, Any]]], ...] = (
    ("valid", 6, _valid),
    ("weight-zero", 2, _weight_zero),
    ("weight-negative", 4, _weight_negative),
    ("weight-huge", 3, _weight_huge),
    ("weight-not-score", 1, _weight_not_score),
    ("duplicate", 4, _duplicate),
    ("args", 10, _args),
    ("args-malformed", 3, _args_malformed),
    ("wrong-point", 3, _wrong_point),
    ("multipoint-mix", 5, _multi_point_mix),
    ("unknown", 3, _unknown),
    ("removed-config", 1, _removed_config),
    ("percentage", 2, _percentage),
    ("schema", 2, _schema),
    ("fit-args-disabled", 1, _fit_args_when_disabled),
    ("omitted-default", 1, _omitted_default),
    ("placement-point", 1, _placement_point),
)


def generate_spec(seed: int) -> SpecCase:
    """The spec of ``seed``: a category drawn by frequency, then its details."""
    rng = random.Random(seed)
    names = [c[0] for c in CATEGORIES]
    category = rng.choices(names, weights=[c[1] for c in CATEGORIES])[0]
    return SpecCase(seed, category, dict((c[0], c[2]) for c in CATEGORIES)[category](rng))
