"""Plugin args: upstream v1 defaults, defaulting before validation, and validation with upstream's messages.

Expected texts are kube-scheduler v1.36's (``validation_pluginargs.go`` through Go's ``field.Error``), with the
``pluginConfig[0].args`` prefix our builder puts in front.
"""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import BaseModel, ValidationError

from kopf_scheduler.api.args import (
    DefaultPreemptionArgs,
    DynamicResourcesArgs,
    FieldError,
    InterPodAffinityArgs,
    NodeAffinityArgs,
    NodeResourcesBalancedAllocationArgs,
    NodeResourcesFitArgs,
    PodTopologySpreadArgs,
    ResourceSpec,
    UtilizationShapePoint,
    VolumeBindingArgs,
    aggregate_message,
    explain_validation_error,
    go_value,
    label_key_errors,
    validation_field_errors,
)
from kopf_scheduler.plugins.registry import in_tree_registry

P = "pluginConfig[0].args"
CPU_MEMORY = [ResourceSpec(name="cpu", weight=1), ResourceSpec(name="memory", weight=1)]


REQ = "requiredDuringSchedulingIgnoredDuringExecution"
PREF = "preferredDuringSchedulingIgnoredDuringExecution"
EXISTS_WITH_VALUE = {"key": "z", "operator": "Exists", "values": ["a"]}


def explain(model: type[BaseModel], raw: dict[str, Any]) -> str:
    with pytest.raises(ValidationError) as info:
        model.model_validate(raw)
    return explain_validation_error(info.value, P)


# -- defaults -------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("model", "expected"),
    [
        pytest.param(
            NodeResourcesFitArgs,
            {
                "ignoredResources": [],
                "ignoredResourceGroups": [],
                "scoringStrategy": {
                    "type": "LeastAllocated",
                    "resources": [{"name": "cpu", "weight": 1}, {"name": "memory", "weight": 1}],
                    "requestedToCapacityRatio": None,
                },
            },
            id="NodeResourcesFit",
        ),
        pytest.param(
            NodeResourcesBalancedAllocationArgs,
            {"resources": [{"name": "cpu", "weight": 1}, {"name": "memory", "weight": 1}]},
            id="NodeResourcesBalancedAllocation",
        ),
        pytest.param(
            PodTopologySpreadArgs, {"defaultConstraints": [], "defaultingType": "System"}, id="PodTopologySpread"
        ),
        pytest.param(
            InterPodAffinityArgs,
            {"hardPodAffinityWeight": 1, "ignorePreferredTermsOfExistingPods": False},
            id="InterPodAffinity",
        ),
        pytest.param(
            DefaultPreemptionArgs,
            {"minCandidateNodesPercentage": 10, "minCandidateNodesAbsolute": 100},
            id="DefaultPreemption",
        ),
        pytest.param(VolumeBindingArgs, {"bindTimeoutSeconds": 600, "shape": None}, id="VolumeBinding"),
        pytest.param(DynamicResourcesArgs, {"filterTimeout": "10s", "bindingTimeout": "10m0s"}, id="DynamicResources"),
        pytest.param(NodeAffinityArgs, {"addedAffinity": None}, id="NodeAffinity"),
    ],
)
def test_defaults_match_upstream_v1(model: type[BaseModel], expected: dict[str, Any]) -> None:
    assert model().model_dump(by_alias=True) == expected
    assert model.model_validate({}) == model()


def test_every_upstream_args_kind_has_a_model() -> None:
    # The upstream plugins with v1 args types: their in-tree classes name the model.
    registry = in_tree_registry()
    assert {name for name, cls in registry.items() if cls.args_model is not None} == {
        "Coscheduling",  # scheduler-plugins' CoschedulingArgs (tests/unit/plugins/test_coscheduling.py)
        "DefaultPreemption",
        "DynamicResources",
        "InterPodAffinity",
        "NodeAffinity",
        "NodeResourcesBalancedAllocation",
        "NodeResourcesFit",
        "PodTopologySpread",
        "VolumeBinding",
    }


@pytest.mark.parametrize(
    ("model", "raw", "attribute", "expected"),
    [
        pytest.param(
            NodeResourcesFitArgs,
            {"scoringStrategy": {"type": "MostAllocated", "resources": [{"name": "cpu", "weight": 0}]}},
            lambda a: a.scoring_strategy.resources,
            [ResourceSpec(name="cpu", weight=1)],
            id="fit-weight-0-means-1",
        ),
        pytest.param(
            NodeResourcesFitArgs,
            {"scoringStrategy": {"type": "MostAllocated", "resources": [{"name": "nvidia.com/gpu"}]}},
            lambda a: a.scoring_strategy.resources,
            [ResourceSpec(name="nvidia.com/gpu", weight=1)],
            id="fit-weight-unset-means-1",
        ),
        pytest.param(
            NodeResourcesFitArgs,
            {"scoringStrategy": {"type": "MostAllocated"}},
            lambda a: (a.scoring_strategy.type, a.scoring_strategy.resources),
            ("MostAllocated", CPU_MEMORY),
            id="fit-strategy-without-resources-gets-cpu-memory",
        ),
        pytest.param(
            NodeResourcesFitArgs,
            {"scoringStrategy": {"type": "MostAllocated", "resources": []}},
            lambda a: a.scoring_strategy.resources,
            CPU_MEMORY,
            id="fit-empty-resources-get-cpu-memory",
        ),
        pytest.param(
            NodeResourcesFitArgs,
            {"scoringStrategy": None},
            lambda a: a.scoring_strategy.type,
            "LeastAllocated",
            id="fit-null-strategy-is-defaulted",
        ),
        pytest.param(
            NodeResourcesBalancedAllocationArgs,
            {"resources": [{"name": "cpu", "weight": 0}, {"name": "example.com/foo"}]},
            lambda a: a.resources,
            [ResourceSpec(name="cpu", weight=1), ResourceSpec(name="example.com/foo", weight=1)],
            id="balanced-weight-0-or-unset-means-1",
        ),
        pytest.param(
            NodeResourcesBalancedAllocationArgs,
            {"resources": []},
            lambda a: a.resources,
            CPU_MEMORY,
            id="balanced-empty-resources-get-cpu-memory",
        ),
        pytest.param(
            PodTopologySpreadArgs,
            {"defaultingType": ""},
            lambda a: a.defaulting_type,
            "System",
            id="spread-empty-defaulting-type-is-System",
        ),
    ],
)
def test_defaulting_before_validation(
    model: type[BaseModel], raw: dict[str, Any], attribute: Any, expected: Any
) -> None:
    assert attribute(model.model_validate(raw)) == expected


# -- validation: accepted -----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("model", "raw"),
    [
        pytest.param(
            NodeAffinityArgs,
            {"addedAffinity": {PREF: [{"weight": 0, "preference": {"matchExpressions": [EXISTS_WITH_VALUE]}}]}},
            id="node-affinity-weight-0-term-is-skipped",
        ),
        pytest.param(InterPodAffinityArgs, {"hardPodAffinityWeight": 0}, id="hard-weight-0"),
        pytest.param(InterPodAffinityArgs, {"hardPodAffinityWeight": 100}, id="hard-weight-100"),
        pytest.param(
            DefaultPreemptionArgs,
            {"minCandidateNodesPercentage": 0, "minCandidateNodesAbsolute": 1},
            id="preemption-percentage-0-alone",
        ),
        pytest.param(
            DefaultPreemptionArgs,
            {"minCandidateNodesPercentage": 100, "minCandidateNodesAbsolute": 0},
            id="preemption-absolute-0-alone",
        ),
        pytest.param(VolumeBindingArgs, {"bindTimeoutSeconds": 0}, id="bind-timeout-0"),
        pytest.param(
            NodeResourcesFitArgs,
            {
                "ignoredResources": ["example.com/foo"],
                "ignoredResourceGroups": ["example.com"],
                "scoringStrategy": {"type": "LeastAllocated", "resources": [{"name": "cpu", "weight": 100}]},
            },
            id="fit-weight-100-and-ignored",
        ),
        pytest.param(
            NodeResourcesFitArgs,
            {
                "scoringStrategy": {
                    "type": "RequestedToCapacityRatio",
                    "requestedToCapacityRatio": {
                        "shape": [{"utilization": 0, "score": 10}, {"utilization": 100, "score": 0}]
                    },
                }
            },
            id="fit-rtcr-valid-shape",
        ),
        pytest.param(
            NodeResourcesBalancedAllocationArgs,
            {"resources": [{"name": "cpu", "weight": 1}, {"name": "example.com/foo", "weight": 1}]},
            id="balanced-extended",
        ),
        pytest.param(
            PodTopologySpreadArgs,
            {
                "defaultingType": "List",
                "defaultConstraints": [
                    {"maxSkew": 1, "topologyKey": "topology.kubernetes.io/zone", "whenUnsatisfiable": "ScheduleAnyway"},
                    {"maxSkew": 2, "topologyKey": "topology.kubernetes.io/zone", "whenUnsatisfiable": "DoNotSchedule"},
                ],
            },
            id="spread-list-two-actions-same-key",
        ),
        pytest.param(PodTopologySpreadArgs, {"defaultingType": "List"}, id="spread-list-empty"),
    ],
)
def test_valid_args_are_accepted(model: type[BaseModel], raw: dict[str, Any]) -> None:
    model.model_validate(raw)


# -- validation: refused, with upstream's text -------------------------------------------------------------------------

RANGE_0_10 = "not in valid range [0, 10]"
RTCR = f"{P}.scoringStrategy.requestedToCapacityRatio"


@pytest.mark.parametrize(
    ("model", "raw", "message"),
    [
        # NodeAffinity: addedAffinity is parsed as upstream's nodeaffinity package parses it, at config load
        pytest.param(
            NodeAffinityArgs,
            {"addedAffinity": {REQ: {"nodeSelectorTerms": [{"matchExpressions": [{"key": "z", "operator": "Is"}]}]}}},
            f"{P}.addedAffinity.{REQ}.nodeSelectorTerms[0].matchExpressions[0].operator: "
            'Unsupported value: "Is": supported values: "In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt"',
            id="node-affinity-operator",
        ),
        pytest.param(
            NodeAffinityArgs,
            {
                "addedAffinity": {
                    REQ: {"nodeSelectorTerms": [{}, {"matchExpressions": [{"key": "z", "operator": "In"}]}]}
                }
            },
            f"{P}.addedAffinity.{REQ}.nodeSelectorTerms[1].matchExpressions[0].values: "
            "Invalid value: null: for 'in', 'notin' operators, values set can't be empty",
            id="node-affinity-in-without-values",
        ),
        pytest.param(
            NodeAffinityArgs,
            {"addedAffinity": {PREF: [{"weight": 1, "preference": {"matchExpressions": [EXISTS_WITH_VALUE]}}]}},
            f"{P}.addedAffinity.{PREF}[0].matchExpressions[0].values: "
            'Invalid value: ["a"]: values set must be empty for exists and does not exist',
            id="node-affinity-preferred-path-skips-preference",
        ),
        pytest.param(
            NodeAffinityArgs,
            {
                "addedAffinity": {
                    REQ: {
                        "nodeSelectorTerms": [
                            {"matchExpressions": [{"key": "n", "operator": "Gt", "values": ["1", "x"]}]}
                        ]
                    }
                }
            },
            f"[{P}.addedAffinity.{REQ}.nodeSelectorTerms[0].matchExpressions[0].values: "
            "Invalid value: [\"1\",\"x\"]: for 'Gt', 'Lt' operators, exactly one value is required, "
            f"{P}.addedAffinity.{REQ}.nodeSelectorTerms[0].matchExpressions[0].values[1]: "
            "Invalid value: \"x\": for 'Gt', 'Lt' operators, the value must be an integer]",
            id="node-affinity-gt",
        ),
        pytest.param(
            NodeAffinityArgs,
            {
                "addedAffinity": {
                    REQ: {
                        "nodeSelectorTerms": [
                            {"matchFields": [{"key": "metadata.name", "operator": "In", "values": []}]}
                        ]
                    }
                }
            },
            f"{P}.addedAffinity.{REQ}.nodeSelectorTerms[0].matchFields[0].values: "
            "Invalid value: []: must have one element",
            id="node-affinity-match-fields",
        ),
        # InterPodAffinity
        pytest.param(
            InterPodAffinityArgs,
            {"hardPodAffinityWeight": -1},
            f"{P}.hardPodAffinityWeight: Invalid value: -1: not in valid range [0, 100]",
            id="hard-weight-negative",
        ),
        pytest.param(
            InterPodAffinityArgs,
            {"hardPodAffinityWeight": 101},
            f"{P}.hardPodAffinityWeight: Invalid value: 101: not in valid range [0, 100]",
            id="hard-weight-101",
        ),
        # NodeResourcesFit
        pytest.param(
            NodeResourcesFitArgs,
            {"scoringStrategy": {"type": "MostAllocated", "resources": [{"name": "cpu", "weight": 101}]}},
            f"{P}.scoringStrategy.resources[0].weight: Invalid value: 101: "
            "resource weight of cpu not in valid range (0, 100]",
            id="fit-weight-101",
        ),
        pytest.param(
            NodeResourcesFitArgs,
            {
                "scoringStrategy": {
                    "type": "MostAllocated",
                    "resources": [{"name": "cpu"}, {"name": "memory", "weight": -3}],
                }
            },
            f"{P}.scoringStrategy.resources[1].weight: Invalid value: -3: "
            "resource weight of memory not in valid range (0, 100]",
            id="fit-weight-negative",
        ),
        pytest.param(
            NodeResourcesFitArgs,
            {"scoringStrategy": {"resources": [{"name": "cpu", "weight": 1}]}},
            f'{P}.scoringStrategy.type: Unsupported value: "": supported values: '
            '"LeastAllocated", "MostAllocated", "RequestedToCapacityRatio"',
            id="fit-strategy-without-type",
        ),
        pytest.param(
            NodeResourcesFitArgs,
            {"scoringStrategy": {"type": "Mostallocated"}},
            f'{P}.scoringStrategy.type: Unsupported value: "Mostallocated": supported values: '
            '"LeastAllocated", "MostAllocated", "RequestedToCapacityRatio"',
            id="fit-strategy-unknown-type",
        ),
        pytest.param(
            NodeResourcesFitArgs,
            {"ignoredResourceGroups": ["example.com/aa"]},
            f"{P}.ignoredResourceGroups[0]: Invalid value: \"example.com/aa\": resource group name can't contain '/'",
            id="fit-resource-group-with-slash",
        ),
        pytest.param(
            NodeResourcesFitArgs,
            {"ignoredResources": ["-bad"]},
            f'{P}.ignoredResources[0]: Invalid value: "-bad": name part must consist of alphanumeric characters, '
            "'-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  "
            "or '123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')",
            id="fit-ignored-resource-bad-name",
        ),
        pytest.param(
            NodeResourcesFitArgs,
            {"scoringStrategy": {"type": "RequestedToCapacityRatio"}},
            f"{RTCR}: Required value: must be specified when type is RequestedToCapacityRatio",
            id="fit-rtcr-shape-required",
        ),
        pytest.param(
            NodeResourcesFitArgs,
            {"scoringStrategy": {"type": "RequestedToCapacityRatio", "requestedToCapacityRatio": {}}},
            f"{RTCR}.shape: Required value: at least one point must be specified",
            id="fit-rtcr-empty-shape",
        ),
        pytest.param(
            NodeResourcesFitArgs,
            {
                "scoringStrategy": {
                    "type": "MostAllocated",
                    "requestedToCapacityRatio": {"shape": [{"utilization": 0, "score": 0}]},
                }
            },
            f"{RTCR}: Forbidden: must be nil when type is not RequestedToCapacityRatio",
            id="fit-rtcr-shape-forbidden-for-other-types",
        ),
        pytest.param(
            NodeResourcesFitArgs,
            {
                "scoringStrategy": {
                    "type": "RequestedToCapacityRatio",
                    "requestedToCapacityRatio": {
                        "shape": [{"utilization": 10, "score": 1}, {"utilization": 10, "score": 2}]
                    },
                }
            },
            f"{RTCR}.shape[1].utilization: Invalid value: 10: values must be sorted in increasing order",
            id="fit-rtcr-utilization-not-strictly-increasing",
        ),
        pytest.param(
            NodeResourcesFitArgs,
            {
                "scoringStrategy": {
                    "type": "RequestedToCapacityRatio",
                    "requestedToCapacityRatio": {
                        "shape": [{"utilization": -10, "score": 11}, {"utilization": 101, "score": -1}]
                    },
                }
            },
            f"[{RTCR}.shape[0].utilization: Invalid value: -10: not in valid range [0, 100], "
            f"{RTCR}.shape[0].score: Invalid value: 11: {RANGE_0_10}, "
            f"{RTCR}.shape[1].utilization: Invalid value: 101: not in valid range [0, 100], "
            f"{RTCR}.shape[1].score: Invalid value: -1: {RANGE_0_10}]",
            id="fit-rtcr-point-ranges",
        ),
        pytest.param(
            NodeResourcesFitArgs,
            {
                "scoringStrategy": {
                    "type": "RequestedToCapacityRatio",
                    "requestedToCapacityRatio": {
                        "shape": [
                            {"utilization": 50, "score": 1},
                            {"utilization": 40, "score": 2},
                            {"utilization": 30, "score": 3},
                        ]
                    },
                }
            },
            f"{RTCR}.shape[1].utilization: Invalid value: 40: values must be sorted in increasing order",
            id="fit-rtcr-only-first-unsorted-pair-reported",
        ),
        # NodeResourcesBalancedAllocation
        pytest.param(
            NodeResourcesBalancedAllocationArgs,
            {"resources": [{"name": "cpu", "weight": 2}]},
            f"{P}.resources[0].weight: Invalid value: 2: must be 1",
            id="balanced-weight-not-1",
        ),
        pytest.param(
            NodeResourcesBalancedAllocationArgs,
            {"resources": [{"name": "cpu"}, {"name": "memory"}, {"name": "cpu"}]},
            f'{P}.resources[2].name: Duplicate value: "cpu"',
            id="balanced-duplicate",
        ),
        # PodTopologySpread
        pytest.param(
            PodTopologySpreadArgs,
            {"defaultingType": "Custom"},
            f'{P}.defaultingType: Unsupported value: "Custom": supported values: "System", "List"',
            id="spread-unknown-defaulting-type",
        ),
        pytest.param(
            PodTopologySpreadArgs,
            {
                "defaultConstraints": [
                    {"maxSkew": 1, "topologyKey": "kubernetes.io/hostname", "whenUnsatisfiable": "ScheduleAnyway"}
                ]
            },
            f'{P}.defaultingType: Invalid value: "System": when .defaultConstraints are not empty',
            id="spread-system-forbids-constraints",
        ),
        pytest.param(
            PodTopologySpreadArgs,
            {
                "defaultingType": "List",
                "defaultConstraints": [{"maxSkew": 0, "topologyKey": "zone", "whenUnsatisfiable": "DoNotSchedule"}],
            },
            f"{P}.defaultConstraints[0].maxSkew: Invalid value: 0: not in valid range (0, inf)",
            id="spread-max-skew-0",
        ),
        pytest.param(
            PodTopologySpreadArgs,
            {"defaultingType": "List", "defaultConstraints": [{"maxSkew": 1, "whenUnsatisfiable": "DoNotSchedule"}]},
            f"{P}.defaultConstraints[0].topologyKey: Required value: can not be empty",
            id="spread-topology-key-required",
        ),
        pytest.param(
            PodTopologySpreadArgs,
            {"defaultingType": "List", "defaultConstraints": [{"maxSkew": 1, "topologyKey": "zone"}]},
            f"{P}.defaultConstraints[0].whenUnsatisfiable: Required value: can not be empty",
            id="spread-when-unsatisfiable-required",
        ),
        pytest.param(
            PodTopologySpreadArgs,
            {
                "defaultingType": "List",
                "defaultConstraints": [{"maxSkew": 1, "topologyKey": "zone", "whenUnsatisfiable": "Sometimes"}],
            },
            f'{P}.defaultConstraints[0].whenUnsatisfiable: Unsupported value: "Sometimes": '
            'supported values: "DoNotSchedule", "ScheduleAnyway"',
            id="spread-when-unsatisfiable-unknown",
        ),
        pytest.param(
            PodTopologySpreadArgs,
            {
                "defaultingType": "List",
                "defaultConstraints": [
                    {
                        "maxSkew": 1,
                        "topologyKey": "zone",
                        "whenUnsatisfiable": "DoNotSchedule",
                        "labelSelector": {"matchLabels": {"app": "x"}},
                    }
                ],
            },
            f"{P}.defaultConstraints[0].labelSelector: Forbidden: constraint must not define a selector, "
            "as they deduced for each pod",
            id="spread-label-selector-forbidden",
        ),
        pytest.param(
            PodTopologySpreadArgs,
            {
                "defaultingType": "List",
                "defaultConstraints": [
                    {"maxSkew": 1, "topologyKey": "zone", "whenUnsatisfiable": "DoNotSchedule"},
                    {"maxSkew": 2, "topologyKey": "zone", "whenUnsatisfiable": "DoNotSchedule"},
                ],
            },
            f'{P}.defaultConstraints[1]: Duplicate value: "{{zone, DoNotSchedule}}"',
            id="spread-duplicate-key-and-action",
        ),
        pytest.param(
            PodTopologySpreadArgs,
            {
                "defaultingType": "List",
                "defaultConstraints": [
                    {"maxSkew": 1, "topologyKey": "a/b/c", "whenUnsatisfiable": "DoNotSchedule", "maxskew": 1}
                ],
            },
            f"[{P}.defaultConstraints[0].maxskew: Forbidden: unknown field, "
            f'{P}.defaultConstraints[0].topologyKey: Invalid value: "a/b/c": a valid label key must consist of '
            "alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character "
            "(e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is "
            "'([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]') with an optional DNS subdomain prefix and '/' "
            "(e.g. 'example.com/MyName')]",
            id="spread-bad-topology-key-and-unknown-field",
        ),
        # DefaultPreemption
        pytest.param(
            DefaultPreemptionArgs,
            {"minCandidateNodesPercentage": 101},
            f"{P}.minCandidateNodesPercentage: Invalid value: 101: not in valid range [0, 100]",
            id="preemption-percentage-101",
        ),
        pytest.param(
            DefaultPreemptionArgs,
            {"minCandidateNodesPercentage": -1},
            f"{P}.minCandidateNodesPercentage: Invalid value: -1: not in valid range [0, 100]",
            id="preemption-percentage-negative",
        ),
        pytest.param(
            DefaultPreemptionArgs,
            {"minCandidateNodesAbsolute": -1},
            f"{P}.minCandidateNodesAbsolute: Invalid value: -1: not in valid range [0, inf)",
            id="preemption-absolute-negative",
        ),
        pytest.param(
            DefaultPreemptionArgs,
            {"minCandidateNodesPercentage": 0, "minCandidateNodesAbsolute": 0},
            f"[{P}.minCandidateNodesPercentage: Invalid value: 0: cannot be zero at the same time as "
            f"minCandidateNodesAbsolute, {P}.minCandidateNodesAbsolute: Invalid value: 0: cannot be zero at the same "
            "time as minCandidateNodesPercentage]",
            id="preemption-both-zero",
        ),
        # VolumeBinding
        pytest.param(
            VolumeBindingArgs,
            {"bindTimeoutSeconds": -1},
            f"{P}.bindTimeoutSeconds: Invalid value: -1: invalid BindTimeoutSeconds, should not be a negative value",
            id="bind-timeout-negative",
        ),
        pytest.param(
            VolumeBindingArgs,
            {"shape": [{"utilization": 0, "score": 10}, {"utilization": 100, "score": 0}]},
            f'{P}.shape: Invalid value: [{{"Utilization":0,"Score":10}},{{"Utilization":100,"Score":0}}]: '
            "unexpected field `shape`, remove it or turn on the feature gate StorageCapacityScoring",
            id="bind-shape-needs-gate",
        ),
        # Structural problems (pydantic), with the same path syntax
        pytest.param(
            InterPodAffinityArgs,
            {"hardPodAffinityWeight": "heavy"},
            f'{P}.hardPodAffinityWeight: Invalid value: "heavy": Input should be a valid integer, '
            "unable to parse string as an integer",
            id="wrong-type",
        ),
        pytest.param(
            NodeResourcesFitArgs,
            {"scoringStrategy": {"type": "MostAllocated", "resources": [{"weight": 2}]}},
            f"{P}.scoringStrategy.resources[0].name: Required value",
            id="missing-field",
        ),
        pytest.param(
            NodeResourcesFitArgs,
            {"scoringStrategy": {"type": "MostAllocated", "resourcess": []}},
            f"{P}.scoringStrategy.resourcess: Forbidden: unknown field",
            id="unknown-nested-field",
        ),
        pytest.param(
            DefaultPreemptionArgs,
            {"minCandidateNodes": 3},
            f"{P}.minCandidateNodes: Forbidden: unknown field",
            id="unknown-field",
        ),
    ],
)
def test_invalid_args_name_the_field_with_upstream_text(
    model: type[BaseModel], raw: dict[str, Any], message: str
) -> None:
    assert explain(model, raw) == message


def test_field_errors_are_available_one_by_one() -> None:
    with pytest.raises(ValidationError) as info:
        DefaultPreemptionArgs.model_validate({"minCandidateNodesPercentage": 0, "minCandidateNodesAbsolute": 0})
    errors = validation_field_errors(info.value, "pluginConfig[3].args")
    assert [e.field for e in errors] == [
        "pluginConfig[3].args.minCandidateNodesPercentage",
        "pluginConfig[3].args.minCandidateNodesAbsolute",
    ]
    assert errors[0].message == "Invalid value: 0: cannot be zero at the same time as minCandidateNodesAbsolute"


def test_field_errors_method_reports_without_raising() -> None:
    args = InterPodAffinityArgs.model_construct(hard_pod_affinity_weight=500)
    assert [str(e) for e in args.field_errors()] == [
        "hardPodAffinityWeight: Invalid value: 500: not in valid range [0, 100]"
    ]


def test_python_construction_keeps_model_defaults() -> None:
    # The "type is required when a strategy is given" rule is about pasted config, not Python callers.
    from kopf_scheduler.api.args import ScoringStrategy

    args = NodeResourcesFitArgs(scoring_strategy=ScoringStrategy(resources=[ResourceSpec(name="cpu", weight=0)]))
    assert args.scoring_strategy.type == "LeastAllocated"
    assert args.scoring_strategy.resources == [ResourceSpec(name="cpu", weight=1)]
    with pytest.raises(ValidationError):
        NodeResourcesBalancedAllocationArgs(resources=[ResourceSpec(name="cpu", weight=3)])


def test_shape_points_are_frozen_models() -> None:
    point = UtilizationShapePoint(utilization=1, score=2)
    with pytest.raises(ValidationError):
        point.score = 3  # type: ignore[misc]


# -- helpers ------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "errors"),
    [
        pytest.param("kubernetes.io/hostname", [], id="prefixed"),
        pytest.param("zone", [], id="plain"),
        pytest.param("a" * 63, [], id="63-bytes"),
        pytest.param("a" * 64, ["name part must be no more than 63 bytes"], id="64-bytes"),
        pytest.param(
            "/zone",
            ["prefix part must be non-empty"],
            id="empty-prefix",
        ),
        pytest.param(
            "Example.com/zone",
            [
                "prefix part a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' "
                "or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for "
                "validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')"
            ],
            id="uppercase-prefix",
        ),
        pytest.param(
            "example.com/",
            [
                "name part must be non-empty",
                "name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an "
                "alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is "
                "'([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')",
            ],
            id="empty-name",
        ),
    ],
)
def test_label_key_errors_match_upstream(value: str, errors: list[str]) -> None:
    assert label_key_errors(value) == errors


@pytest.mark.parametrize(
    ("value", "text"),
    [
        pytest.param(0, "0", id="int"),
        pytest.param(-3, "-3", id="negative"),
        pytest.param(True, "true", id="bool"),
        pytest.param('a"b', '"a\\"b"', id="string-quoted"),
        pytest.param([{"Utilization": 1}], '[{"Utilization":1}]', id="json"),
    ],
)
def test_go_value(value: Any, text: str) -> None:
    assert go_value(value) == text


def test_aggregate_message_is_go_aggregate() -> None:
    a, b = FieldError("x", "Invalid value: 1: no"), FieldError("y", "Required value")
    assert aggregate_message([a]) == "x: Invalid value: 1: no"
    assert aggregate_message([a, b, a]) == "[x: Invalid value: 1: no, y: Required value]"
    assert aggregate_message([a, a]) == "x: Invalid value: 1: no"
    assert str(FieldError("", "whole object")) == "whole object"
    assert FieldError("[0].name", "m").under("pluginConfig") == FieldError("pluginConfig[0].name", "m")


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        pytest.param(
            {"filterTimeout": "-1s"}, 'filterTimeout: Invalid value: "-1s": must be zero or positive', id="neg"
        ),
        pytest.param(
            {"bindingTimeout": "500ms"}, 'bindingTimeout: Invalid value: "500ms": must be at least 1 second', id="short"
        ),
        pytest.param({"filterTimeout": "1m"}, None, id="minute"),
        pytest.param({"filterTimeout": "0s", "bindingTimeout": "1s"}, None, id="edges"),
    ],
)
def test_dynamic_resources_args_validate_as_upstream(raw: dict[str, Any], expected: str | None) -> None:
    # Upstream ValidateDynamicResourcesArgs with the 1.36 default gates (filter timeout and binding conditions on).
    if expected is None:
        DynamicResourcesArgs.model_validate(raw)
        return
    with pytest.raises(ValidationError) as caught:
        DynamicResourcesArgs.model_validate(raw)
    assert [str(e) for e in validation_field_errors(caught.value)] == [expected]


def test_dynamic_resources_durations_read_and_print_as_go() -> None:
    assert DynamicResourcesArgs.model_validate({"filterTimeout": "1500ms"}).filter_timeout == "1.5s"
    with pytest.raises(ValidationError, match='time: invalid duration "abc"'):
        DynamicResourcesArgs.model_validate({"filterTimeout": "abc"})
