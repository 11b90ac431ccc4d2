"""``kopf-scheduler validate``: the operator's apply_profile offline, its status text word for word.

Each case is a SchedulerProfile manifest and what the profile's status would say: Ready with the effective
pipeline, ``InvalidProfile`` with the builder's message (upstream's text, prefixed by the field), or refused
before the operator sees it (what ``kubectl apply`` would refuse: kind, name, the CRD schema's checks).
The invalid-profile messages are checked against the operator itself: a :class:`SchedulerApp` applying the
same spec, as the create handler does.
"""

from __future__ import annotations

import io
import json
from typing import Any

import pytest
import yaml

from kopf_scheduler.app import SchedulerApp
from kopf_scheduler.cli import main
from kopf_scheduler.kube import HTTPExtenderTransport
from kopf_scheduler.settings import RunSettings
from kopf_scheduler.validate import ManifestError, format_verdict, load_manifests, validate_manifest

EXTENDER = {"urlPrefix": "http://extender.example:8888", "prioritizeVerb": "prioritize", "weight": 2}


def _profile(name: str = "p", spec: dict[str, Any] | None = None, **fields: Any) -> dict[str, Any]:
    manifest = {"apiVersion": "kopf-scheduler.io/v1alpha1", "kind": "SchedulerProfile", "metadata": {"name": name}}
    if spec is not None:
        manifest["spec"] = spec
    return {**manifest, **fields}


READY: list[tuple[str, dict[str, Any], str]] = [
    (
        "defaults",
        {},
        "TaintToleration:3,NodeAffinity:2,NodeResourcesFit:1,VolumeBinding:1,PodTopologySpread:2,InterPodAffinity:2,"
        "DynamicResources:2,NodeResourcesBalancedAllocation:1,ImageLocality:1",
    ),
    (
        "weights and disabled plugins",
        {"plugins": {"score": {"enabled": [{"name": "ImageLocality", "weight": 7}], "disabled": [{"name": "*"}]}}},
        "ImageLocality:7",
    ),
    (
        "multiPoint disabled",
        {"plugins": {"multiPoint": {"disabled": [{"name": "TaintToleration"}, {"name": "ImageLocality"}]}}},
        "NodeAffinity:2,NodeResourcesFit:1,VolumeBinding:1,PodTopologySpread:2,InterPodAffinity:2,"
        "DynamicResources:2,NodeResourcesBalancedAllocation:1",
    ),
    ("an extender", {"extenders": [EXTENDER]}, "TaintToleration:3"),
]


@pytest.mark.parametrize(("spec", "score"), [c[1:] for c in READY], ids=[c[0] for c in READY])
def test_a_valid_profile_shows_its_pipeline(spec: dict[str, Any], score: str) -> None:
    verdict = validate_manifest(_profile("ok", spec))
    assert (verdict.name, verdict.ready, verdict.reason) == ("ok", True, "PipelineBuilt")
    assert verdict.pipeline_status["scorePlugins"].startswith(score)
    assert verdict.pipeline_status["effectivePlugins"]["queueSort"] == [{"name": "PrioritySort"}]
    text = format_verdict(verdict)
    assert text.startswith("ok: Ready (PipelineBuilt): pipeline built from generation 0")
    assert f"  score:             {score.replace(',', ', ')}" in text
    assert "  placementScore:    NodeResourcesFit:1" in text  # upstream's default profile has it there too


INVALID: list[tuple[str, dict[str, Any], str]] = [
    (
        "unknown plugin",
        {"plugins": {"score": {"enabled": [{"name": "NoSuchPlugin"}]}}},
        'plugins.score.enabled[0]: ScorePlugin "NoSuchPlugin" does not exist',
    ),
    (
        "args out of range",
        {"pluginConfig": [{"name": "NodeResourcesFit", "args": {"scoringStrategy": {"type": "Wrong"}}}]},
        "pluginConfig[0].args.scoringStrategy.type",
    ),
    ("no bind plugin", {"plugins": {"multiPoint": {"disabled": [{"name": "DefaultBinder"}]}}}, "plugins.bind"),
    (
        "extender without weight",
        {"extenders": [{**EXTENDER, "weight": 0}]},
        "extenders[0].weight: Invalid value: 0: must have a positive weight applied to it",
    ),
]


@pytest.mark.parametrize(("spec", "message"), [c[1:] for c in INVALID], ids=[c[0] for c in INVALID])
def test_an_invalid_profile_shows_the_operators_status_message(spec: dict[str, Any], message: str) -> None:
    verdict = validate_manifest(_profile("bad", spec))
    operator = SchedulerApp(settings=RunSettings(), extender_transport=HTTPExtenderTransport())
    outcome = operator.apply_profile(name="bad", spec=spec)
    assert (verdict.ready, verdict.reason, verdict.message) == (False, "InvalidProfile", outcome.message)
    assert message in verdict.message
    assert verdict.pipeline_status == {}
    assert format_verdict(verdict) == f"bad: not Ready (InvalidProfile): {outcome.message}"


REFUSED: list[tuple[str, Any, str]] = [
    ("not a mapping", ["a"], "expected a mapping, got list"),
    ("another kind", {**_profile(), "kind": "ConfigMap"}, "expected apiVersion kopf-scheduler.io/v1alpha1"),
    (
        "a KubeSchedulerConfiguration",
        {"apiVersion": "kubescheduler.config.k8s.io/v1", "kind": "KubeSchedulerConfiguration"},
        "(convert it first: kopf-scheduler convert FILE)",
    ),
    ("no name", {**_profile(), "metadata": {}}, "metadata.name: Required value"),
    ("name no DNS name", _profile("My_Profile"), 'metadata.name: Invalid value: "My_Profile"'),
    (
        "schema: weight not an integer",
        _profile(spec={"plugins": {"score": {"enabled": [{"name": "ImageLocality", "weight": "high"}]}}}),
        'spec.plugins.score.enabled[0].weight: Invalid value: "high": Input should be a valid integer',
    ),
    ("schema: unknown field", _profile(spec={"schedulerName": "x"}), "spec.schedulerName: Forbidden: unknown field"),
    (
        "schema: percentage above 100",
        _profile(spec={"percentageOfNodesToScore": 101}),
        "spec.percentageOfNodesToScore: Invalid value: 101: spec.percentageOfNodesToScore in body should be less "
        "than or equal to 100",
    ),
    (
        "schema: weight below int32",
        _profile(spec={"plugins": {"score": {"enabled": [{"name": "ImageLocality", "weight": -(2**31) - 1}]}}}),
        "spec.plugins.score.enabled[0].weight: Invalid value: -2147483649: Input should be greater than or equal to "
        "-2147483648",
    ),
]


@pytest.mark.parametrize(("manifest", "message"), [c[1:] for c in REFUSED], ids=[c[0] for c in REFUSED])
def test_what_the_api_server_would_refuse(manifest: Any, message: str) -> None:
    verdict = validate_manifest(manifest)
    assert (verdict.ready, verdict.reason) == (False, "Invalid")
    assert message in verdict.message


def test_generation_is_taken_from_the_manifest() -> None:
    verdict = validate_manifest({**_profile(), "metadata": {"name": "p", "generation": 4}})
    assert verdict.message.startswith("pipeline built from generation 4")


def test_load_manifests_reads_documents_and_lists() -> None:
    text = yaml.safe_dump_all([_profile("a"), {"apiVersion": "v1", "kind": "List", "items": [_profile("b")]}])
    assert [m["metadata"]["name"] for m in load_manifests(text)] == ["a", "b"]
    with pytest.raises(ManifestError, match="no SchedulerProfile"):
        load_manifests("")
    with pytest.raises(ManifestError, match="not YAML"):
        load_manifests("a: [")


def test_cli_validate_exit_codes_and_formats(
    tmp_path: Any, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    good = tmp_path / "good.yaml"
    good.write_text(yaml.safe_dump(_profile("good")))
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump(_profile("bad", {"plugins": {"filter": {"enabled": [{"name": "Nope"}]}}})))
    assert main(["validate", str(good)]) == 0
    assert capsys.readouterr().out.startswith("good: Ready (PipelineBuilt)")
    assert main(["validate", str(good), str(bad)]) == 1
    out = capsys.readouterr().out
    assert 'bad: not Ready (InvalidProfile): plugins.filter.enabled[0]: FilterPlugin "Nope" does not exist' in out
    assert main(["validate", str(bad), "-o", "json"]) == 1
    (entry,) = json.loads(capsys.readouterr().out)
    assert (entry["name"], entry["ready"], entry["reason"]) == ("bad", False, "InvalidProfile")
    monkeypatch.setattr("sys.stdin", io.StringIO(good.read_text()))
    assert main(["validate", "-", "-o", "yaml"]) == 0
    (entry,) = yaml.safe_load(capsys.readouterr().out)
    assert entry["effectivePlugins"]["bind"] == [{"name": "DefaultBinder"}]
    assert main(["validate", str(tmp_path / "missing.yaml")]) == 1
    assert "No such file" in capsys.readouterr().err


def test_validate_does_not_log_what_it_prints(tmp_path: Any, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump(_profile("bad", {"plugins": {"filter": {"enabled": [{"name": "Nope"}]}}})))
    assert main(["validate", str(bad)]) == 1
    assert capsys.readouterr().err == ""


def test_a_workload_aware_profile_shows_its_placement_plugins() -> None:
    spec = {
        "plugins": {
            "multiPoint": {
                "enabled": [
                    {"name": "GangScheduling"},
                    {"name": "TopologyPlacementGenerator"},
                    {"name": "PodGroupPodsCount", "weight": 3},
                ]
            }
        }
    }
    verdict = validate_manifest(_profile("gangs", spec))
    assert verdict.ready
    lines = format_verdict(verdict).splitlines()
    assert "  placementGenerate: TopologyPlacementGenerator" in lines
    assert "  placementScore:    NodeResourcesFit:1, PodGroupPodsCount:3" in lines


def test_the_default_profile_lists_upstreams_placement_plugins() -> None:
    lines = format_verdict(validate_manifest(_profile("plain", {}))).splitlines()
    assert "  placementGenerate: -" in lines
    assert "  placementScore:    NodeResourcesFit:1" in lines
