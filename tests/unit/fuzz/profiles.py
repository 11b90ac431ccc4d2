"""SchedulerProfile specs, valid and invalid, for the fuzzed profile changes.

Three sources, mixed: the default profile (``{}``) and small valid variations (scoring strategies, weights,
plugins disabled); the conformance suite's spec generator (``tests/conformance/profile_specs.py``: every
category of upstream's validation errors, from a drawn seed); and structured noise from hypothesis itself
(plugins of the registry and unknown names at any extension point, weights of any int32, plugin args of the
right and wrong types, unknown fields, and values that are not objects at all).
"""

from __future__ import annotations

from typing import Any

from hypothesis import strategies as st

from kopf_scheduler.plugins.registry import IN_TREE_PLUGINS
from tests.conformance.profile_specs import POINTS, generate_spec

PLUGIN_NAMES = tuple(sorted(cls.name for cls in IN_TREE_PLUGINS))
NAMES = (*PLUGIN_NAMES, "NoSuchPlugin", "*", "")
INT32 = st.one_of(st.sampled_from([0, 1, 2, 100, -1, 2**31 - 1, -(2**31), 2**31]), st.integers(-5, 5))

#: Args values that are sometimes right, often wrong in type or range, for the fields plugins read.
ARG_VALUES: dict[str, dict[str, st.SearchStrategy[Any]]] = {
    "NodeResourcesFit": {
        "scoringStrategy": st.one_of(
            st.fixed_dictionaries(
                {"type": st.sampled_from(["LeastAllocated", "MostAllocated", "RequestedToCapacityRatio", "Bogus"])}
            ),
            st.fixed_dictionaries(
                {
                    "type": st.just("RequestedToCapacityRatio"),
                    "requestedToCapacityRatio": st.fixed_dictionaries(
                        {
                            "shape": st.lists(
                                st.fixed_dictionaries(
                                    {"utilization": st.integers(-1, 101), "score": st.integers(-1, 11)}
                                ),
                                max_size=3,
                            )
                        }
                    ),
                }
            ),
            st.just({"resources": [{"name": "cpu", "weight": 0}]}),
        ),
        "ignoredResources": st.lists(st.sampled_from(["example.com/gpu", "cpu", ""]), max_size=2),
        "ignoredResourceGroups": st.lists(st.sampled_from(["example.com", "a/b"]), max_size=2),
    },
    "InterPodAffinity": {"hardPodAffinityWeight": INT32, "ignorePreferredTermsOfExistingPods": st.booleans()},
    "DefaultPreemption": {"minCandidateNodesPercentage": INT32, "minCandidateNodesAbsolute": INT32},
    "PodTopologySpread": {
        "defaultingType": st.sampled_from(["System", "List", "Other"]),
        "defaultConstraints": st.lists(
            st.fixed_dictionaries(
                {
                    "maxSkew": INT32,
                    "topologyKey": st.sampled_from(["topology.kubernetes.io/zone", ""]),
                    "whenUnsatisfiable": st.sampled_from(["ScheduleAnyway", "DoNotSchedule", "Maybe"]),
                }
            ),
            max_size=2,
        ),
    },
    "NodeResourcesBalancedAllocation": {
        "resources": st.lists(
            st.fixed_dictionaries({"name": st.sampled_from(["cpu", "memory", "example.com/gpu", ""]), "weight": INT32}),
            max_size=3,
        )
    },
    "VolumeBinding": {"bindTimeoutSeconds": st.one_of(INT32, st.just("ten"))},
    "NodeAffinity": {
        "addedAffinity": st.one_of(
            st.just({}),
            st.just(
                {
                    "requiredDuringSchedulingIgnoredDuringExecution": {
                        "nodeSelectorTerms": [{"matchExpressions": [{"key": "disk", "operator": "Exists"}]}]
                    }
                }
            ),
            st.just({"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": []}}),
        )
    },
}


@st.composite
def plugin_config(draw: st.DrawFn) -> dict[str, Any]:
    plugin = draw(st.sampled_from((*ARG_VALUES, "NoSuchPlugin")))
    fields = ARG_VALUES.get(plugin, {})
    args: dict[str, Any] = {}
    for field, values in fields.items():
        if draw(st.booleans()):
            args[field] = draw(values)
    if draw(st.integers(0, 6)) == 0:
        args["noSuchField"] = 1
    return {"name": plugin, "args": args}


@st.composite
def plugin_set(draw: st.DrawFn) -> dict[str, Any]:
    entry = st.fixed_dictionaries({"name": st.sampled_from(NAMES)}, optional={"weight": INT32})
    found: dict[str, Any] = {}
    if draw(st.booleans()):
        found["enabled"] = draw(st.lists(entry, max_size=2))
    if draw(st.booleans()):
        found["disabled"] = draw(st.lists(st.fixed_dictionaries({"name": st.sampled_from(NAMES)}), max_size=2))
    return found


@st.composite
def structured_spec(draw: st.DrawFn) -> dict[str, Any]:
    spec: dict[str, Any] = {}
    if draw(st.integers(0, 3)) == 0:
        spec["percentageOfNodesToScore"] = draw(st.one_of(st.integers(-1, 101), st.just("50")))
    if draw(st.booleans()):
        points = draw(st.lists(st.sampled_from((*POINTS, "multiPoint")), max_size=2, unique=True))
        spec["plugins"] = {point: draw(plugin_set()) for point in points}
    if draw(st.booleans()):
        spec["pluginConfig"] = draw(st.lists(plugin_config(), max_size=2))
    if draw(st.integers(0, 8)) == 0:
        spec["explain"] = {"successes": draw(st.booleans())}
    if draw(st.integers(0, 10)) == 0:
        spec["extenders"] = [{"urlPrefix": "http://127.0.0.1:1", "filterVerb": "filter"}]
    if draw(st.integers(0, 10)) == 0:
        spec[draw(st.sampled_from(["unknownField", "schedulerName"]))] = "x"
    return spec


def profile_spec() -> st.SearchStrategy[Any]:
    """A SchedulerProfile spec as a user may apply it, valid or not (None: an object with no spec)."""
    return st.one_of(
        st.just({}),
        st.none(),
        st.sampled_from(
            [
                {
                    "pluginConfig": [
                        {"name": "NodeResourcesFit", "args": {"scoringStrategy": {"type": "MostAllocated"}}}
                    ]
                },
                {"plugins": {"score": {"disabled": [{"name": "*"}]}}},
                {"plugins": {"multiPoint": {"disabled": [{"name": "NodeResourcesFit"}]}}},
                {"percentageOfNodesToScore": 50},
            ]
        ),
        st.integers(0, 2**32 - 1).map(lambda seed: generate_spec(seed).spec),
        structured_spec(),
        st.one_of(st.just([]), st.just("spec"), st.just({"plugins": []}), st.just({"pluginConfig": [{"args": {}}]})),
    )
