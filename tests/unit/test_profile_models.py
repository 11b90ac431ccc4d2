"""SchedulerProfile spec/status models: upstream profile snippets paste in, round-trip, and give a CRD-ready schema."""

from __future__ import annotations

from typing import Any

import pytest
import yaml
from pydantic import BaseModel, ValidationError

from kopf_scheduler.api.args import explain_validation_error
from kopf_scheduler.api.profile import (
    Condition,
    EffectivePlugin,
    EffectivePlugins,
    PluginEntry,
    Plugins,
    SchedulerProfileSpec,
    SchedulerProfileStatus,
)
from kopf_scheduler.framework.extension_points import ExtensionPoint

# The bin-packing example of the Kubernetes docs ("Resource Bin Packing", MostAllocated), as a whole config.
BIN_PACKING_CONFIG = """
apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
profiles:
- pluginConfig:
  - args:
      scoringStrategy:
        resources:
        - name: cpu
          weight: 1
        - name: memory
          weight: 1
        - name: intel.com/foo
          weight: 3
        - name: intel.com/bar
          weight: 3
        type: MostAllocated
    name: NodeResourcesFit
"""

# The "Scheduler Configuration" docs' profiles: custom score plugins, and a profile that does no scoring.
DOCS_PROFILES = """
profiles:
  - schedulerName: default-scheduler
    plugins:
      score:
        disabled:
        - name: PodTopologySpread
        enabled:
        - name: MyCustomPluginA
          weight: 2
        - name: MyCustomPluginB
          weight: 1
  - schedulerName: no-scoring-scheduler
    percentageOfNodesToScore: 50
    plugins:
      preScore:
        disabled:
        - name: '*'
      score:
        disabled:
        - name: '*'
"""

# Every extension point key upstream's v1 Plugins has (1.36's alpha placement points included), plus pluginConfig
# with apiVersion/kind inside args, as `kube-scheduler --write-config-to` prints it.
ALL_KEYS_PROFILE = """
percentageOfNodesToScore: 0
plugins:
  preEnqueue: {enabled: [{name: SchedulingGates}]}
  queueSort: {disabled: [{name: "*"}], enabled: [{name: PrioritySort}]}
  preFilter: {enabled: [{name: NodePorts}]}
  filter: {disabled: [{name: NodeName}]}
  postFilter: {enabled: []}
  preScore: {enabled: [{name: TaintToleration}]}
  score: {enabled: [{name: ImageLocality, weight: 5}]}
  reserve: {enabled: [{name: MyReserve}]}
  permit: {enabled: [{name: MyPermit}]}
  preBind: {enabled: [{name: MyPreBind}]}
  bind: {enabled: [{name: DefaultBinder}]}
  postBind: {enabled: [{name: MyPostBind}]}
  placementGenerate: {enabled: [{name: TopologyPlacementGenerator}]}
  placementScore: {enabled: [{name: PodGroupPodsCount, weight: 2}]}
  multiPoint: {enabled: [{name: NodeResourcesFit, weight: 4}], disabled: [{name: ImageLocality}]}
pluginConfig:
- name: PodTopologySpread
  args:
    apiVersion: kubescheduler.config.k8s.io/v1
    kind: PodTopologySpreadArgs
    defaultConstraints:
    - maxSkew: 1
      topologyKey: topology.kubernetes.io/zone
      whenUnsatisfiable: ScheduleAnyway
    defaultingType: List
"""


def profile_of(config_yaml: str, index: int = 0) -> dict[str, Any]:
    """A profile of a KubeSchedulerConfiguration with schedulerName moved out (it is metadata.name for us)."""
    profile = dict(yaml.safe_load(config_yaml)["profiles"][index])
    profile.pop("schedulerName", None)
    return profile


@pytest.mark.parametrize(
    "raw",
    [
        pytest.param(profile_of(BIN_PACKING_CONFIG), id="docs-bin-packing"),
        pytest.param(profile_of(DOCS_PROFILES, 0), id="docs-custom-score"),
        pytest.param(profile_of(DOCS_PROFILES, 1), id="docs-no-scoring"),
        pytest.param(yaml.safe_load(ALL_KEYS_PROFILE), id="every-key"),
        pytest.param({}, id="empty"),
    ],
)
def test_upstream_profiles_paste_in_and_round_trip(raw: dict[str, Any]) -> None:
    spec = SchedulerProfileSpec.model_validate(raw)
    # What was given comes back unchanged (camelCase keys, nothing added) …
    assert spec.model_dump(by_alias=True, exclude_unset=True) == raw
    # … and what we write to the API server reads back as the same spec.
    assert SchedulerProfileSpec.model_validate(spec.to_api()) == spec
    assert SchedulerProfileSpec.model_validate_json(spec.model_dump_json(by_alias=True)) == spec


def test_bin_packing_snippet_fields() -> None:
    spec = SchedulerProfileSpec.model_validate(profile_of(BIN_PACKING_CONFIG))
    assert [c.name for c in spec.plugin_config] == ["NodeResourcesFit"]
    strategy = spec.plugin_config[0].args["scoringStrategy"]
    assert strategy["type"] == "MostAllocated"
    assert [(r["name"], r["weight"]) for r in strategy["resources"]] == [
        ("cpu", 1),
        ("memory", 1),
        ("intel.com/foo", 3),
        ("intel.com/bar", 3),
    ]
    assert spec.percentage_of_nodes_to_score is None


def test_every_extension_point_key_is_read() -> None:
    spec = SchedulerProfileSpec.model_validate(yaml.safe_load(ALL_KEYS_PROFILE))
    first_enabled = {point.value: [p.name for p in spec.plugins.at(point).enabled][:1] for point in ExtensionPoint}
    assert first_enabled == {
        "preEnqueue": ["SchedulingGates"],
        "queueSort": ["PrioritySort"],
        "preFilter": ["NodePorts"],
        "filter": [],
        "postFilter": [],
        "preScore": ["TaintToleration"],
        "score": ["ImageLocality"],
        "reserve": ["MyReserve"],
        "permit": ["MyPermit"],
        "preBind": ["MyPreBind"],
        "bind": ["DefaultBinder"],
        "postBind": ["MyPostBind"],
        "placementGenerate": ["TopologyPlacementGenerator"],
        "placementScore": ["PodGroupPodsCount"],
    }
    assert spec.plugins.placement_score.enabled[0].weight == 2
    assert spec.plugins.at("multiPoint").enabled == [PluginEntry(name="NodeResourcesFit", weight=4)]
    assert spec.plugins.filter.disabled == [PluginEntry(name="NodeName")]
    assert spec.plugins.score.enabled[0].weight == 5


def test_python_names_populate_too() -> None:
    spec = SchedulerProfileSpec(
        percentage_of_nodes_to_score=30, plugins=Plugins(multi_point={"enabled": [{"name": "X"}]})
    )
    assert spec.to_api()["percentageOfNodesToScore"] == 30
    assert spec.to_api()["plugins"]["multiPoint"] == {"enabled": [{"name": "X"}], "disabled": []}


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        pytest.param({"schedulerName": "x"}, "schedulerName: Forbidden: unknown field", id="schedulerName-is-metadata"),
        pytest.param({"plugins": {"filters": {}}}, "plugins.filters: Forbidden: unknown field", id="misspelt-point"),
        pytest.param(
            {"plugins": {"score": {"enabled": [{"name": "A", "wieght": 2}]}}},
            "plugins.score.enabled[0].wieght: Forbidden: unknown field",
            id="misspelt-weight",
        ),
        pytest.param(
            {"plugins": {"score": {"enabled": [{"weight": 2}]}}},
            "plugins.score.enabled[0].name: Required value",
            id="name-required",
        ),
        pytest.param(
            {"plugins": {"score": {"enabled": [{"name": "A", "weight": 2**31}]}}},
            "plugins.score.enabled[0].weight: Invalid value: 2147483648: "
            "Input should be less than or equal to 2147483647",
            id="weight-is-int32",
        ),
        pytest.param(
            {"pluginConfig": [{"name": "X", "args": []}]},
            "pluginConfig[0].args: Invalid value: Input should be a valid dictionary",
            id="args-is-object",
        ),
        pytest.param(
            {"percentageOfNodesToScore": "half"},
            'percentageOfNodesToScore: Invalid value: "half": Input should be a valid integer, '
            "unable to parse string as an integer",
            id="percentage-is-int",
        ),
    ],
)
def test_malformed_spec_names_the_field(raw: dict[str, Any], message: str) -> None:
    with pytest.raises(ValidationError) as info:
        SchedulerProfileSpec.model_validate(raw)
    assert explain_validation_error(info.value) == message


def test_range_checks_are_left_to_the_builder() -> None:
    # The model accepts an out-of-range percentage so the builder can report it with upstream's text; the
    # schema still carries the range for the API server.
    assert SchedulerProfileSpec.model_validate({"percentageOfNodesToScore": 101}).percentage_of_nodes_to_score == 101


# -- schema -------------------------------------------------------------------------------------------------------


def walk(node: Any, path: str = "") -> list[tuple[str, dict[str, Any]]]:
    found: list[tuple[str, dict[str, Any]]] = []
    if isinstance(node, dict):
        found.append((path, node))
        for key, value in node.items():
            found += walk(value, f"{path}/{key}")
    elif isinstance(node, list):
        for i, value in enumerate(node):
            found += walk(value, f"{path}/{i}")
    return found


@pytest.mark.parametrize("model", [SchedulerProfileSpec, SchedulerProfileStatus], ids=["spec", "status"])
def test_schema_has_no_unions_and_describes_every_property(model: type[BaseModel]) -> None:
    schema = model.model_json_schema(by_alias=True)
    nodes = walk(schema)
    assert not [p for p, n in nodes if "anyOf" in n or "oneOf" in n or "allOf" in n], (
        "structural schemas need no unions"
    )
    assert not [p for p, n in nodes if n.get("type") == "null"]
    undescribed = [
        f"{p}/{name}"
        for p, n in nodes
        if isinstance(n.get("properties"), dict)
        for name, prop in n["properties"].items()
        if "description" not in prop
    ]
    assert undescribed == [], "kubectl explain needs a description on every field"


def test_schema_details_for_the_crd() -> None:
    schema = SchedulerProfileSpec.model_json_schema(by_alias=True)
    defs = schema["$defs"]
    assert set(defs["Plugins"]["properties"]) == {p.value for p in ExtensionPoint} | {"multiPoint"}
    assert set(schema["properties"]) == {"percentageOfNodesToScore", "plugins", "pluginConfig", "extenders", "explain"}
    percentage = schema["properties"]["percentageOfNodesToScore"]
    assert (percentage["type"], percentage["minimum"], percentage["maximum"]) == ("integer", 0, 100)
    args = defs["PluginConfig"]["properties"]["args"]
    assert args["type"] == "object"
    assert args["x-kubernetes-preserve-unknown-fields"] is True
    weight = defs["PluginEntry"]["properties"]["weight"]
    assert (weight["type"], weight["format"]) == ("integer", "int32")


# -- status -------------------------------------------------------------------------------------------------------


def test_status_round_trip_in_camel_case() -> None:
    status = SchedulerProfileStatus(
        observed_generation=3,
        conditions=[
            Condition(
                type="Ready",
                status="False",
                reason="InvalidProfile",
                message='plugins.filter.enabled[0]: FilterPlugin "Foo" does not exist',
                last_transition_time="2026-01-02T03:04:05Z",
                observed_generation=3,
            )
        ],
        effective_plugins=EffectivePlugins(
            queue_sort=[EffectivePlugin(name="PrioritySort")],
            score=[EffectivePlugin(name="TaintToleration", weight=3)],
        ),
        omitted_default_plugins=["VolumeBinding"],
    )
    body = status.to_api()
    assert body["observedGeneration"] == 3
    assert body["conditions"][0]["lastTransitionTime"] == "2026-01-02T03:04:05Z"
    assert body["conditions"][0]["observedGeneration"] == 3
    assert body["effectivePlugins"]["queueSort"] == [{"name": "PrioritySort"}]
    assert body["effectivePlugins"]["score"] == [{"name": "TaintToleration", "weight": 3}]
    assert body["omittedDefaultPlugins"] == ["VolumeBinding"]
    assert SchedulerProfileStatus.model_validate(body) == status


def test_condition_status_is_true_false_or_unknown() -> None:
    with pytest.raises(ValidationError):
        Condition(type="Ready", status="Yes")
