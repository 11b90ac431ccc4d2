"""``kopf-scheduler convert``: KubeSchedulerConfiguration v1 → SchedulerProfile manifests, every other field reported.

Table-driven over the shapes a real config takes (no profiles, several profiles, pluginConfig args, enabled
and disabled plugins with weights, multiPoint, top-level extenders and percentageOfNodesToScore) and over the
inputs that must be refused (another version or kind, unknown fields, duplicate or missing scheduler names).
The converted manifests are then built by ``validate`` (the operator's own apply_profile), so "carried over"
means the operator accepts it.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
import yaml

from kopf_scheduler.cli import main
from kopf_scheduler.convert import (
    Conversion,
    ConvertError,
    convert_config,
    dns_name,
    load_config,
    render_manifests,
    render_report,
)
from kopf_scheduler.validate import validate_manifests

V1 = {"apiVersion": "kubescheduler.config.k8s.io/v1", "kind": "KubeSchedulerConfiguration"}

FIT_ARGS = {
    "apiVersion": "kubescheduler.config.k8s.io/v1",
    "kind": "NodeResourcesFitArgs",
    "scoringStrategy": {"type": "MostAllocated", "resources": [{"name": "cpu", "weight": 2}]},
}
EXTENDER = {"urlPrefix": "http://extender.example:8888", "filterVerb": "filter", "weight": 1, "httpTimeout": "3s"}


PLACEMENT_PLUGINS = {
    "multiPoint": {"enabled": [{"name": "GangScheduling"}]},
    "placementGenerate": {"enabled": [{"name": "TopologyPlacementGenerator"}]},
    "placementScore": {"enabled": [{"name": "PodGroupPodsCount", "weight": 2}]},
}


def _convert(**fields: Any) -> Conversion:
    return convert_config({**V1, **fields})


def _specs(conversion: Conversion) -> dict[str, dict[str, Any]]:
    return {m["metadata"]["name"]: m["spec"] for m in conversion.manifests}


CASES: list[tuple[str, dict[str, Any], dict[str, dict[str, Any]]]] = [
    ("no profiles: upstream's one default profile", {}, {"default-scheduler": {}}),
    ("one unnamed profile is default-scheduler", {"profiles": [{}]}, {"default-scheduler": {}}),
    (
        "several profiles, names kept",
        {"profiles": [{"schedulerName": "default-scheduler"}, {"schedulerName": "batch"}]},
        {"default-scheduler": {}, "batch": {}},
    ),
    (
        "pluginConfig args carried over as written",
        {"profiles": [{"schedulerName": "packer", "pluginConfig": [{"name": "NodeResourcesFit", "args": FIT_ARGS}]}]},
        {"packer": {"pluginConfig": [{"name": "NodeResourcesFit", "args": FIT_ARGS}]}},
    ),
    (
        "enabled and disabled plugins with weights",
        {
            "profiles": [
                {
                    "schedulerName": "weights",
                    "plugins": {
                        "score": {
                            "enabled": [{"name": "NodeResourcesFit", "weight": 5}],
                            "disabled": [{"name": "ImageLocality"}],
                        },
                        "filter": {"disabled": [{"name": "NodePorts"}]},
                    },
                }
            ]
        },
        {
            "weights": {
                "plugins": {
                    "score": {
                        "enabled": [{"name": "NodeResourcesFit", "weight": 5}],
                        "disabled": [{"name": "ImageLocality"}],
                    },
                    "filter": {"disabled": [{"name": "NodePorts"}]},
                }
            }
        },
    ),
    (
        "multiPoint",
        {
            "profiles": [
                {
                    "schedulerName": "mp",
                    "plugins": {"multiPoint": {"disabled": [{"name": "PodTopologySpread"}]}},
                }
            ]
        },
        {"mp": {"plugins": {"multiPoint": {"disabled": [{"name": "PodTopologySpread"}]}}}},
    ),
    (
        "top-level percentageOfNodesToScore goes to profiles without their own",
        {
            "percentageOfNodesToScore": 30,
            "profiles": [{"schedulerName": "a"}, {"schedulerName": "b", "percentageOfNodesToScore": 80}],
        },
        {"a": {"percentageOfNodesToScore": 30}, "b": {"percentageOfNodesToScore": 80}},
    ),
    ("top-level percentageOfNodesToScore 0 is the default", {"percentageOfNodesToScore": 0}, {"default-scheduler": {}}),
    (
        "top-level extenders go to every profile",
        {"extenders": [EXTENDER], "profiles": [{"schedulerName": "a"}, {"schedulerName": "b"}]},
        {"a": {"extenders": [EXTENDER]}, "b": {"extenders": [EXTENDER]}},
    ),
    (
        "the placement points (upstream 1.36's TopologyAwareWorkloadScheduling) with a workload-aware profile",
        {"profiles": [{"schedulerName": "gangs", "plugins": PLACEMENT_PLUGINS}]},
        {"gangs": {"plugins": PLACEMENT_PLUGINS}},
    ),
    (
        "a schedulerName that is no DNS name is lowered to one",
        {"profiles": [{"schedulerName": "My_Scheduler"}]},
        {"my-scheduler": {}},
    ),
]


@pytest.mark.parametrize(("config", "expected"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_profiles_are_carried_over(config: dict[str, Any], expected: dict[str, dict[str, Any]]) -> None:
    conversion = _convert(**config)
    assert _specs(conversion) == expected
    for manifest in conversion.manifests:
        assert manifest["apiVersion"] == "kopf-scheduler.io/v1alpha1"
        assert manifest["kind"] == "SchedulerProfile"


@pytest.mark.parametrize(("config", "expected"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_the_operator_builds_every_converted_profile(config: dict[str, Any], expected: Any) -> None:
    verdicts = validate_manifests(_convert(**config).manifests)
    assert [(v.name, v.ready, v.reason) for v in verdicts] == [(n, True, "PipelineBuilt") for n in expected]


def test_carried_over_weights_and_args_take_effect() -> None:
    config = {
        "profiles": [
            {
                "schedulerName": "packer",
                "plugins": {
                    "score": {
                        "enabled": [{"name": "NodeResourcesFit", "weight": 5}],
                        "disabled": [{"name": "ImageLocality"}],
                    }
                },
                "pluginConfig": [{"name": "NodeResourcesFit", "args": {"scoringStrategy": {"type": "Wrong"}}}],
            }
        ]
    }
    (verdict,) = validate_manifests(_convert(**config).manifests)
    assert not verdict.ready
    assert "pluginConfig[0].args.scoringStrategy.type" in verdict.message
    config["profiles"][0]["pluginConfig"] = [{"name": "NodeResourcesFit", "args": FIT_ARGS}]
    (verdict,) = validate_manifests(_convert(**config).manifests)
    assert verdict.ready
    score = verdict.pipeline_status["scorePlugins"].split(",")
    assert score[0] == "NodeResourcesFit:5"
    assert not any(entry.startswith("ImageLocality:") for entry in score)


REPORTED: list[tuple[str, Any, str, str]] = [
    ("parallelism", 32, "dropped", "no worker goroutines"),
    ("leaderElection", {"leaderElect": True}, "dropped", "kopf peering"),
    ("clientConnection", {"qps": 100, "burst": 200}, "dropped", "--kubeconfig"),
    ("enableProfiling", True, "dropped", "pprof"),
    ("enableContentionProfiling", True, "dropped", "pprof"),
    ("delayCacheUntilActive", True, "operator_settings", "--delay-cache-until-active true"),
    ("podInitialBackoffSeconds", 2, "operator_settings", "--pod-initial-backoff-seconds 2"),
    ("podMaxBackoffSeconds", 20, "operator_settings", "--pod-max-backoff-seconds 20"),
    ("percentageOfNodesToScore", 40, "carried_over", "copied into spec.percentageOfNodesToScore"),
    ("extenders", [EXTENDER], "carried_over", "copied into spec.extenders of every profile"),
]


@pytest.mark.parametrize(("key", "value", "section", "text"), REPORTED, ids=[r[0] for r in REPORTED])
def test_every_field_outside_the_profiles_is_reported(key: str, value: Any, section: str, text: str) -> None:
    conversion = _convert(**{key: value})
    notes = {note.field: note.text for note in getattr(conversion, section)}
    assert text in notes[key]
    assert f"  - {key}: " in render_report(conversion)


def test_a_quiet_config_reports_nothing_dropped() -> None:
    conversion = _convert(profiles=[{"schedulerName": "batch"}])
    assert conversion.dropped == conversion.operator_settings == conversion.warnings == ()
    assert "not carried over" not in render_report(conversion)


def test_default_scheduler_warns_about_kube_scheduler() -> None:
    conversion = _convert()
    assert [note.field for note in conversion.warnings] == ["profiles[0].schedulerName"]
    assert "both schedulers place those pods" in conversion.warnings[0].text


INVALID: list[tuple[str, str, str]] = [
    ("v1beta3", "apiVersion: kubescheduler.config.k8s.io/v1beta3\nkind: KubeSchedulerConfiguration\n", "only v1"),
    ("another kind", "apiVersion: v1\nkind: ConfigMap\n", "expected apiVersion kubescheduler.config.k8s.io/v1"),
    ("not a mapping", "- a\n- b\n", "expected a mapping"),
    ("not YAML", "a: [b\n", "not YAML"),
    ("two documents", "a: 1\n---\nb: 2\n", "found 2"),
    ("empty", "", "found 0"),
]


@pytest.mark.parametrize(("text", "message"), [c[1:] for c in INVALID], ids=[c[0] for c in INVALID])
def test_input_that_is_no_v1_configuration_is_refused(text: str, message: str) -> None:
    with pytest.raises(ConvertError) as raised:
        load_config(text)
    assert message in str(raised.value)


REFUSED: list[tuple[str, dict[str, Any], str]] = [
    ("unknown top-level field", {"featureGates": {"Foo": True}}, 'unknown field "featureGates" (feature gates'),
    (
        "unknown profile field",
        {"profiles": [{"schedulerName": "a", "weight": 1}]},
        'unknown field "profiles[0].weight"',
    ),
    (
        "unknown field deep in the plugins",
        {"profiles": [{"schedulerName": "a", "plugins": {"score": {"enable": []}}}]},
        'strict decoding error: unknown field "profiles[0].plugins.score.enable"',
    ),
    (
        "unknown extender field",
        {"extenders": [{**EXTENDER, "verb": "x"}]},
        'strict decoding error: unknown field "extenders[0].verb"',
    ),
    (
        "second profile without a name",
        {"profiles": [{"schedulerName": "a"}, {}]},
        "profiles[1].schedulerName: Required value",
    ),
    (
        "duplicate names",
        {"profiles": [{"schedulerName": "a"}, {"schedulerName": "a"}]},
        'profiles[1].schedulerName: Duplicate value: "profiles[0].schedulerName"',
    ),
    (
        "names that become the same",
        {"profiles": [{"schedulerName": "Batch"}, {"schedulerName": "batch"}]},
        "both become SchedulerProfile 'batch'",
    ),
    (
        "every unknown field at once, sorted, as upstream's strict decoding error",
        {
            "profiles": [{"schedulerName": "a", "plugins": {"score": {"enable": []}}, "weight": 1}],
            "extenders": [{**EXTENDER, "verb": "y"}],
        },
        'strict decoding error: unknown field "extenders[0].verb", unknown field "profiles[0].plugins.score.enable", '
        'unknown field "profiles[0].weight"',
    ),
    (
        "a wrong type deep in the plugins",
        {"profiles": [{"schedulerName": "a", "plugins": {"score": {"enabled": [{"name": "X", "weight": "high"}]}}}]},
        'profiles[0].plugins.score.enabled[0].weight: Invalid value: "high"',
    ),
    (
        "a wrong type in an extender",
        {"extenders": [{**EXTENDER, "weight": "heavy"}]},
        'extenders[0].weight: Invalid value: "heavy"',
    ),
    ("profiles not a list", {"profiles": {"schedulerName": "a"}}, "profiles: expected a list of objects"),
    (
        "schedulerName not a string",
        {"profiles": [{"schedulerName": 7}]},
        "profiles[0].schedulerName: Invalid value: 7: expected a string",
    ),
    (
        "top-level percentage out of range, even where profiles override it",
        {"percentageOfNodesToScore": 150, "profiles": [{"schedulerName": "a", "percentageOfNodesToScore": 10}]},
        "percentageOfNodesToScore: Invalid value: 150: not in valid range [0-100]",
    ),
    (
        "parallelism 0",
        {"parallelism": 0},
        "parallelism: Invalid value: 0: should be an integer value greater than zero",
    ),
    ("initial backoff 0", {"podInitialBackoffSeconds": 0}, "podInitialBackoffSeconds: Invalid value: 0: must be"),
    (
        "max backoff below the initial one",
        {"podInitialBackoffSeconds": 20},
        "podMaxBackoffSeconds: Invalid value: 10: must be greater than or equal to PodInitialBackoffSeconds",
    ),
    ("backoff not a number", {"podMaxBackoffSeconds": "10s"}, "podMaxBackoffSeconds: Invalid value: '10s'"),
    ("top-level percentage not a number", {"percentageOfNodesToScore": "50%"}, "Invalid value: '50%'"),
]


@pytest.mark.parametrize(("config", "message"), [c[1:] for c in REFUSED], ids=[c[0] for c in REFUSED])
def test_configurations_kube_scheduler_refuses_are_refused(config: dict[str, Any], message: str) -> None:
    with pytest.raises(ConvertError) as raised:
        _convert(**config)
    assert message in str(raised.value)


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("default-scheduler", "default-scheduler"),
        ("a.b-c", "a.b-c"),
        ("My_Scheduler", "my-scheduler"),
        ("-x-", "x"),
        ("gpu..sched", "gpu.sched"),
        ("x" * 300, "x" * 253),
    ],
)
def test_dns_name(name: str, expected: str) -> None:
    assert dns_name(name) == expected


def test_yaml_output_is_documents_for_kubectl_apply() -> None:
    conversion = _convert(profiles=[{"schedulerName": "a"}, {"schedulerName": "b"}])
    text = render_manifests(conversion.manifests)
    assert text.startswith("---\n")
    assert [d["metadata"]["name"] for d in yaml.safe_load_all(text)] == ["a", "b"]
    listed = json.loads(render_manifests(conversion.manifests, "json"))
    assert listed["kind"] == "List"
    assert [i["metadata"]["name"] for i in listed["items"]] == ["a", "b"]


def test_cli_convert(tmp_path: Any, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump({**V1, "parallelism": 8, "profiles": [{"schedulerName": "batch"}]}))
    assert main(["convert", str(path)]) == 0
    out, err = capsys.readouterr()
    assert [d["metadata"]["name"] for d in yaml.safe_load_all(out)] == ["batch"]
    assert "not carried over:\n  - parallelism: no counterpart" in err
    assert main(["convert", str(path), "-o", "json"]) == 0
    assert json.loads(capsys.readouterr().out)["items"][0]["metadata"]["name"] == "batch"


def test_cli_convert_refuses_with_exit_1(tmp_path: Any, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "config.yaml"
    path.write_text("apiVersion: kubescheduler.config.k8s.io/v1beta3\nkind: KubeSchedulerConfiguration\n")
    assert main(["convert", str(path)]) == 1
    out, err = capsys.readouterr()
    assert out == ""
    assert err.startswith(f"kopf-scheduler convert: {path}: expected apiVersion kubescheduler.config.k8s.io/v1")
    assert main(["convert", str(tmp_path / "missing.yaml")]) == 1
    assert "No such file" in capsys.readouterr().err
