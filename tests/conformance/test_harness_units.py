"""Unit tests of the conformance machinery itself (no cluster): generator, log parsing, judging, report.

The differential run is only as good as its parts: a generator that produced invalid or trivial pods, a
log parser that misread upstream's scores, or a judge that let a difference through would all make "100%
agreement" meaningless. These run in milliseconds.
"""

from __future__ import annotations

import copy
import json
from collections import Counter
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from kopf_scheduler.api.profile import SchedulerProfileSpec
from kopf_scheduler.framework.builder import resolve_profile
from kopf_scheduler.plugins.registry import default_registry
from tests.conformance import features, generator, oracle, preemption_harness, preemptions, volume_harness, volumes
from tests.conformance.generator import GPU, HUGEPAGES, PLUGINS, SIZES, generate
from tests.conformance.report import RunInfo, summary, write_markdown
from tests.conformance.runner import (
    ARGS_PROFILES,
    DEFAULT_PROFILE,
    Decision,
    Harness,
    PodResult,
    ProfileDef,
    ScenarioResult,
    default_profiles,
    example_profiles,
)
from tests.conformance.sim import Model

# -- generator ---------------------------------------------------------------------------------------------


def _dump(scenario: generator.Scenario) -> str:
    return json.dumps(
        [scenario.nodes, scenario.existing_pods, [p.manifest for p in scenario.pending]], sort_keys=True, default=str
    )


def test_scenarios_are_a_function_of_the_seed() -> None:
    assert _dump(generate(17)) == _dump(generate(17))
    assert _dump(generate(17)) != _dump(generate(18))
    assert _dump(generate(17, "small")) != _dump(generate(17, "large"))


def test_unknown_size_is_refused() -> None:
    with pytest.raises(ValueError, match="size must be one of"):
        generate(1, "huge")


def _milli(value: str) -> int:
    return int(value[:-1]) if value.endswith("m") else int(float(value) * 1000)


def _mebi(value: str) -> int:
    return int(value[:-2]) * (1024 if value.endswith("Gi") else 1)


@pytest.mark.parametrize("size", sorted(SIZES))
def test_generated_objects_respect_api_validation_and_capacity(size: str) -> None:
    for seed in range(1, 40):
        scenario = generate(seed, size)
        assert len(scenario.nodes) < 100  # upstream then evaluates every node: no sampling differences
        used: dict[str, Counter[str]] = {n: Counter() for n in scenario.node_names}
        for pod in scenario.existing_pods:
            requests = pod["spec"]["containers"][0]["resources"]["requests"]
            used[pod["spec"]["nodeName"]].update(
                {"cpu": _milli(requests["cpu"]), "memory": _mebi(requests["memory"]), "pods": 1}
            )
        for node in scenario.nodes:
            alloc = node["status"]["allocatable"]
            got = used[node["metadata"]["name"]]
            assert got["cpu"] <= _milli(alloc["cpu"])
            assert got["memory"] <= _mebi(alloc["memory"])
            assert got["pods"] <= int(alloc["pods"])
        for pending in scenario.pending:
            spec = pending.manifest["spec"]
            assert "schedulerName" not in spec
            pairs = [(c["topologyKey"], c["whenUnsatisfiable"]) for c in spec.get("topologySpreadConstraints", ())]
            assert len(pairs) == len(set(pairs))
            for constraint in spec.get("topologySpreadConstraints", ()):
                assert "minDomains" not in constraint or constraint["whenUnsatisfiable"] == "DoNotSchedule"
            ports = [
                (p["hostPort"], p.get("protocol", "TCP"), p.get("hostIP", ""))
                for c in (*spec["containers"], *spec.get("initContainers", ()))
                for p in c.get("ports", ())
            ]
            assert len(ports) == len(set(ports))
            for container in spec["containers"]:
                resources = container.get("resources") or {}
                for name in (GPU, HUGEPAGES):
                    if name in resources.get("requests", {}):
                        assert resources["limits"][name] == resources["requests"][name]
            if "resources" in spec:
                everything = [*spec["containers"], *spec.get("initContainers", ())]
                cpu = sum(_milli(c.get("resources", {}).get("requests", {}).get("cpu", "0")) for c in everything)
                assert _milli(spec["resources"]["requests"]["cpu"]) >= cpu
            assert set(pending.features) <= set(PLUGINS)


def test_every_plugin_and_outcome_shape_is_exercised() -> None:
    features: Counter[str] = Counter()
    kinds: Counter[str] = Counter()
    for seed in range(1, 60):
        scenario = generate(seed)
        for pending in scenario.pending:
            features.update(pending.features)
            spec = pending.manifest["spec"]
            affinity = spec.get("affinity", {})
            kinds.update(k for k in ("podAffinity", "podAntiAffinity", "nodeAffinity") if k in affinity)
            kinds.update(k for k in ("initContainers", "runtimeClassName", "resources", "volumes") if k in spec)
            kinds.update("minDomains" for c in spec.get("topologySpreadConstraints", ()) if "minDomains" in c)
        for pod in scenario.existing_pods:
            kinds.update([(pod["metadata"].get("annotations") or {}).get(generator.LIFECYCLE_ANNOTATION, "running")])
    assert set(features) == set(PLUGINS) - {"NodeUnschedulable"}  # cordoned nodes are a cluster feature
    for kind in ("podAffinity", "podAntiAffinity", "nodeAffinity", "initContainers", "runtimeClassName",
                 "resources", "volumes", "minDomains", generator.TERMINATING, generator.SUCCEEDED):  # fmt: skip
        assert kinds[kind] > 0, kind


def test_with_scheduler_copies() -> None:
    manifest = generate(3).pending[0].manifest
    copy = generator.with_scheduler(manifest, "x")
    assert copy["spec"]["schedulerName"] == "x"
    assert "schedulerName" not in manifest["spec"]


# -- oracle --------------------------------------------------------------------------------------------------
LOG = [
    'I1122 02:10:21.932213   14216 schedule_one.go:123] "Attempting to schedule pod" pod="ns/p"',
    'I1122 02:10:21.932441   14216 schedule_one.go:982] "Plugin scored node for pod" pod="ns/p" plugin="A" '
    'node="n1" score=1',
    # A retry starts over: only the last cycle counts.
    'I1122 02:10:22.000000   14216 schedule_one.go:123] "Attempting to schedule pod" pod="ns/p"',
    'I1122 02:10:22.000001   14216 schedule_one.go:982] "Plugin scored node for pod" pod="ns/p" plugin="A" '
    'node="n1" score=300',
    'I1122 02:10:22.000002   14216 schedule_one.go:982] "Plugin scored node for pod" pod="ns/p" plugin="A" '
    'node="n2" score=300',
    'I1122 02:10:22.000003   14216 schedule_one.go:982] "Plugin scored node for pod" pod="ns/p" plugin="B" '
    'node="n1" score=7',
    'I1122 02:10:22.000004   14216 schedule_one.go:982] "Plugin scored node for pod" pod="ns/p" plugin="B" '
    'node="n2" score=9',
    'I1122 02:10:22.000005   14216 schedule_one.go:1050] "Calculated node\'s final score for pod" pod="ns/p" '
    'node="n1" score=307',
    'I1122 02:10:22.000006   14216 schedule_one.go:1050] "Calculated node\'s final score for pod" pod="ns/p" '
    'node="n2" score=309',
    'I1122 02:10:22.000007   14216 schedule_one.go:982] "Plugin scored node for pod" pod="ns/pp" plugin="A" '
    'node="n1" score=5',
    'I1122 02:10:22.000008   14216 default_binder.go:69] "Attempting to bind pod to node" pod="ns/p" node="n2"',
    "not a klog line",
]


def test_parse_cycle_keeps_the_last_cycle_of_the_pod() -> None:
    cycle = oracle.parse_cycle(LOG, "ns/p")
    assert cycle.plugin_scores == {"A": {"n1": 300, "n2": 300}, "B": {"n1": 7, "n2": 9}}
    assert cycle.final_scores == {"n1": 307, "n2": 309}
    assert cycle.top_nodes == {"n2"}
    assert cycle.bound_node == "n2"
    assert oracle.varying_plugins(cycle.plugin_scores) == {"B"}


def test_batching_hint_is_recognised() -> None:
    lines = [
        'I1122 02:10:22.000000   1 schedule_one.go:123] "Attempting to schedule pod" pod="ns/p"',
        'I1122 02:10:22.000001   1 batch.go:91] "OpportunisticBatch provided node hint" profile="x" pod="ns/p" '
        'cycleCount=7 hint="n3" remainingNodes=2',
        'I1122 02:10:22.000002   1 default_binder.go:69] "Attempting to bind pod to node" pod="ns/p" node="n3"',
    ]
    cycle = oracle.parse_cycle(lines, "ns/p")
    assert (cycle.hint, cycle.used_hint, cycle.top_nodes) == ("n3", True, {"n3"})
    # A hint that failed the filters leads to a full cycle with scores: not "used".
    full = oracle.parse_cycle([*lines[:2], *LOG[3:9], lines[2].replace("n3", "n2")], "ns/p")
    assert full.used_hint is False


def test_top_nodes_ties_and_single_feasible_node() -> None:
    tied = oracle.UpstreamCycle(final_scores={"a": 5, "b": 5, "c": 4})
    assert tied.top_nodes == {"a", "b"}
    single = oracle.UpstreamCycle(bound_node="only")
    assert single.top_nodes == {"only"}
    assert single.feasible == {"only"}


def test_parse_line_unquotes_go_strings() -> None:
    line = (
        'I1122 02:10:21.935665   14216 schedule_one.go:1239] "Unable to schedule pod; no fit; waiting" pod="ns/q" '
        'err="0/3 nodes are available: 3 node(s) didn\'t match Pod\'s node affinity/selector. \\"x\\""'
    )
    source, message, kv = oracle.parse_line(line)  # type: ignore[misc]
    assert (source, message) == ("schedule_one.go", "Unable to schedule pod; no fit; waiting")
    assert kv["err"].endswith('selector. "x"')
    assert oracle.parse_cycle([line], "ns/q").fit_error == kv["err"]


def test_plugins_in_message() -> None:
    message = (
        "0/9 nodes are available: 1 Insufficient cpu, 1 node(s) had untolerated taint(s), 2 node(s) didn't satisfy "
        "existing pods anti-affinity rules, 5 node(s) didn't satisfy plugin(s) [NodeAffinity PodTopologySpread]."
    )
    assert oracle.plugins_in_message(message) == {
        "NodeResourcesFit",
        "TaintToleration",
        "InterPodAffinity",
        "NodeAffinity",
        "PodTopologySpread",
    }


def test_upstream_profile_disables_what_we_omit_once() -> None:
    spec = {"plugins": {"multiPoint": {"disabled": [{"name": "VolumeBinding"}]}}, "percentageOfNodesToScore": 100}
    profile = oracle.upstream_profile("up", spec, ["VolumeBinding", "DefaultPreemption"])
    assert profile["schedulerName"] == "up"
    assert profile["percentageOfNodesToScore"] == 100
    assert profile["plugins"]["multiPoint"]["disabled"] == [{"name": "VolumeBinding"}, {"name": "DefaultPreemption"}]
    assert spec["plugins"]["multiPoint"]["disabled"] == [{"name": "VolumeBinding"}]  # the input is not touched


# -- profiles ------------------------------------------------------------------------------------------------
def test_builtin_profiles_build_and_omit_nothing() -> None:
    for profile in (DEFAULT_PROFILE, *ARGS_PROFILES):
        resolved = resolve_profile(profile.name, SchedulerProfileSpec.model_validate(profile.spec), default_registry())
        assert profile.omitted == tuple(resolved.omitted_defaults)
        # DefaultPreemption runs on both sides now: upstream must not disable it.
        assert "DefaultPreemption" not in profile.omitted
        # Nothing is omitted since issue 12: upstream runs its unmodified default profile (plus the spec's own).
        assert profile.omitted == ()
        up = profile.upstream()
        disabled = ((up.get("plugins") or {}).get("multiPoint") or {}).get("disabled") or []
        assert {"name": "DynamicResources"} not in disabled


def test_example_profiles_are_found_in_multi_document_files(tmp_path: Path) -> None:
    (tmp_path / "examples").mkdir()
    (tmp_path / "examples" / "a.yaml").write_text(
        "apiVersion: v1\nkind: Pod\nmetadata: {name: x}\n---\n"
        "apiVersion: kopf-scheduler.io/v1alpha1\nkind: SchedulerProfile\nmetadata: {name: packed}\n"
        "spec: {percentageOfNodesToScore: 50}\n"
    )
    (tmp_path / "examples" / "broken.yaml").write_text("{: nope")
    found = example_profiles(tmp_path / "examples")
    assert [(p.name, dict(p.spec), p.source) for p in found] == [
        ("packed", {"percentageOfNodesToScore": 50}, "examples/a.yaml")
    ]


def test_example_profiles_with_plugins_kube_scheduler_lacks_are_not_compared(tmp_path: Path) -> None:
    """examples/coscheduling.yaml's profile (scheduler-plugins' Coscheduling, its own QueueSort) would make
    kube-scheduler refuse the whole configuration; the repository's example is left out, as a written one is."""
    (tmp_path / "examples").mkdir()
    (tmp_path / "examples" / "c.yaml").write_text(
        "apiVersion: kopf-scheduler.io/v1alpha1\nkind: SchedulerProfile\nmetadata: {name: gangs}\n"
        "spec: {plugins: {queueSort: {enabled: [{name: Coscheduling}], disabled: [{name: '*'}]}}}\n"
    )
    assert example_profiles(tmp_path / "examples") == []
    assert "coscheduling" not in [p.name for p in default_profiles()]


def test_default_profiles_include_examples_and_args_profiles() -> None:
    names = [p.name for p in default_profiles()]
    assert len(names) == len(set(names))
    for profile in ARGS_PROFILES:
        assert profile.name in names
    assert [p.name for p in default_profiles(include_examples=False)] == [
        DEFAULT_PROFILE.name,
        *(p.name for p in ARGS_PROFILES),
    ]


# -- judging -------------------------------------------------------------------------------------------------
def _judge(upstream: Decision, ours: Decision, cycle: oracle.UpstreamCycle | None = None) -> PodResult:
    harness = Harness([DEFAULT_PROFILE])
    scenario = generate(1, "small")
    model = Model({DEFAULT_PROFILE.name: {}})
    verdict = model.decide(DEFAULT_PROFILE.name, {**scenario.pending[0].manifest, "metadata": {"name": "p"}})
    return harness._judge(
        scenario,
        DEFAULT_PROFILE,
        scenario.pending[0],
        upstream,
        cycle or oracle.UpstreamCycle(),
        ours,
        verdict,
        scenario.pending[0].manifest,
    )


def test_judge_node_must_be_in_upstreams_top_set() -> None:
    cycle = oracle.UpstreamCycle(final_scores={"a": 10, "b": 10, "c": 3}, bound_node="a")
    assert _judge(Decision("bound", node="a"), Decision("bound", node="b"), cycle).agree
    result = _judge(Decision("bound", node="a"), Decision("bound", node="c"), cycle)
    assert result.problems == ["node: ours c is not among upstream's top nodes ['a', 'b']"]


def test_judge_batching_hint() -> None:
    hinted = oracle.UpstreamCycle(bound_node="a", hint="a")
    assert _judge(Decision("bound", node="a"), Decision("bound", node="a"), hinted).agree
    # Our node differs from the hint and the model cannot show a tie between them: a disagreement.
    result = _judge(Decision("bound", node="a"), Decision("bound", node="b"), hinted)
    assert result.problems == ["node: ours b is not among upstream's top nodes ['a'] (it took the batching hint a)"]


def test_judge_messages_byte_for_byte_and_missing_events() -> None:
    text = "0/3 nodes are available: 3 Insufficient cpu."
    same = _judge(
        Decision("unschedulable", note=text, condition=text), Decision("unschedulable", note=text, condition=text)
    )
    assert same.agree
    other = _judge(
        Decision("unschedulable", note=text, condition=text),
        Decision("unschedulable", note=text + " ", condition=text),
    )
    assert other.problems == ["message: FailedScheduling notes differ"]
    missing = _judge(
        Decision("unschedulable", note=None, condition=text), Decision("unschedulable", note=None, condition=text)
    )
    assert missing.problems == ["message: a FailedScheduling event is missing"]


def test_judge_verdicts() -> None:
    result = _judge(Decision("bound", node="a"), Decision("unschedulable", note="x", condition="x"))
    assert result.problems == ["verdict: upstream bound:a, ours unschedulable"]
    timeout = _judge(Decision("timeout", detail="no verdict"), Decision("timeout", detail="no verdict"))
    assert not timeout.agree


# -- the model -----------------------------------------------------------------------------------------------
def test_model_decides_like_a_scheduler() -> None:
    model = Model({"p": {}})
    for name, cpu in (("big", "8"), ("small", "2")):
        model.load(
            {
                "kind": "Node",
                "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}},
                "status": {"allocatable": {"cpu": cpu, "memory": "8Gi", "pods": "10"}},
            }
        )
    pod: dict[str, Any] = {
        "kind": "Pod",
        "metadata": {"name": "x", "namespace": "ns", "uid": "u1"},
        "spec": {"containers": [{"name": "c", "image": "i", "resources": {"requests": {"cpu": "4"}}}]},
    }
    verdict = model.decide("p", pod)
    assert verdict.node == "big"
    assert verdict.feasible == {"big"}
    assert verdict.rejections == {"small": "NodeResourcesFit: Insufficient cpu"}
    pod["spec"]["containers"][0]["resources"]["requests"]["cpu"] = "16"
    verdict = model.decide("p", pod)
    assert verdict.message == (
        "0/2 nodes are available: 2 Insufficient cpu. "
        "no new claims to deallocate, preemption: 0/2 nodes are available: 2 Preemption is not helpful for scheduling."
    )
    assert verdict.nominated is None


def test_model_runs_preemption_without_executing_it() -> None:
    model = Model({"p": {}})
    for name in ("n0", "n1"):
        model.load(
            {
                "kind": "Node",
                "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}},
                "status": {"allocatable": {"cpu": "2", "memory": "8Gi", "pods": "10"}},
            }
        )

    def pod(name: str, cpu: str, priority: int, node: str | None = None) -> dict[str, Any]:
        spec: dict[str, Any] = {"priority": priority, "containers": [{"name": "c", "image": "i"}]}
        spec["containers"][0]["resources"] = {"requests": {"cpu": cpu}}
        if node:
            spec["nodeName"] = node
        meta = {"name": name, "namespace": "ns", "uid": f"u-{name}"}
        status = {"startTime": "2026-01-01T00:00:01Z"} if node else {}
        return {"kind": "Pod", "metadata": meta, "spec": spec, "status": status}

    model.load(pod("low", "1500m", -100, "n0"))
    model.load(pod("zero", "1500m", 0, "n1"))
    verdict = model.decide("p", pod("high", "1", 1000))
    # n0's victim has the lower priority; the FitError carries no preemption part when preemption helped.
    assert (verdict.nominated, verdict.victims) == ("n0", ["ns/low"])
    assert verdict.message == "0/2 nodes are available: 2 Insufficient cpu."
    assert model.app.cache.pod("u-low") is not None  # recorded, not executed


# -- report --------------------------------------------------------------------------------------------------
def _pod(seed: int, agree: bool, plugins: list[str]) -> PodResult:
    upstream = Decision("bound", node="a")
    ours = Decision("bound", node="a" if agree else "b")
    return PodResult(
        seed=seed,
        profile=DEFAULT_PROFILE.name,
        index=0,
        name="p00",
        namespace="ns",
        features=plugins,
        plugins=plugins,
        uses=["host ports"] if "NodePorts" in plugins else [],
        upstream=upstream,
        ours=ours,
        upstream_top=["a"],
        problems=[] if agree else ["node: ours b is not among upstream's top nodes ['a']"],
        manifest={"kind": "Pod", "metadata": {"name": "p00"}, "spec": {"containers": []}},
        context={"nodes": [{"kind": "Node", "metadata": {"name": "a"}}], "pods": []},
    )


def test_summary_and_markdown(tmp_path: Path) -> None:
    results = [
        ScenarioResult(1, "small", DEFAULT_PROFILE.name, 3, 1, [_pod(1, True, ["NodePorts"])], 1.0),
        ScenarioResult(2, "small", DEFAULT_PROFILE.name, 3, 1, [_pod(2, False, ["NodePorts", "TaintToleration"])], 1.0),
    ]
    run = RunInfo("python -m tests.conformance", 1, "small", 2.0, "2026-01-01 00:00 UTC", "abc", "test machine")
    data = summary(results, [DEFAULT_PROFILE], run)
    assert (data["scenarios"], data["pods"], data["agree"], data["disagree"]) == (2, 2, 1, 1)
    assert data["by_plugin"]["NodePorts"] == {"scenarios": 2, "pods": 2, "decisive": 0, "agree": 1, "disagree": 1}
    assert data["by_plugin"]["ImageLocality"]["pods"] == 0
    assert data["checks"]["our_node_in_upstream_top_set"] == 1
    (disagreement,) = data["disagreements"]
    disagreeing = results[1].pods[0]
    assert disagreement["texts"] == {
        "upstream": {"note": disagreeing.upstream.note, "condition": disagreeing.upstream.condition},
        "ours": {"note": disagreeing.ours.note, "condition": disagreeing.ours.condition},
    }
    path = tmp_path / "conformance.md"
    write_markdown(data, results, [ProfileDef(DEFAULT_PROFILE.name, {}, "built-in")], path)
    text = path.read_text()
    assert "#### seed 2, profile `conformance-default`, pod `ns/p00`" in text
    assert "schedulerName: <scheduler>" in text
    assert "name: a" in text
    assert "| TaintToleration | 1 | 1 | 0 | 0 | 1 |" in text
    # The preemption method is part of the generated page; no result of an old run is (issue 37).
    assert "refuses each victim's DisruptionTarget patch with 404 NotFound" in text
    assert "reduced run" not in text
    # The page says which commit, which seeds, how long; and carries the per-feature and per-profile tables.
    assert "**This run**: commit `abc`, seeds 1..2 (given with --seed-start), 0 min 02 s" in text
    assert "| host ports | NodePorts | 2 | 0 | 1 | 1 |" in text
    assert "| `conformance-default` | built-in | 2 | 2 | 1 | 1 |" in text
    assert "Features no pod of this run exercised: scheduling gates, spec.nodeName," in text


def test_summary_names_the_preempting_pods_ours_did_not_bind_on_their_nominated_node(tmp_path: Path) -> None:
    def preempting(name: str, final_node: str | None, terminating: list[str]) -> PodResult:
        result = _pod(1, True, ["DefaultPreemption"])
        result.name = name
        result.upstream = Decision("unschedulable", nominated="a", terminating_victims=terminating)
        result.ours = Decision("unschedulable", nominated="a", final_node=final_node)
        return result

    pods = [preempting("went", "a", []), preempting("held", None, ["ns/v"])]
    run = RunInfo("python -m tests.conformance", 1, "small", 2.0, "2026-01-01 00:00 UTC", "abc", "test machine")
    data = summary([ScenarioResult(1, "small", DEFAULT_PROFILE.name, 3, 1, pods, 1.0)], [DEFAULT_PROFILE], run)
    assert (data["checks"]["preempting"], data["checks"]["ours_bound_on_nominated_node"]) == (2, 1)
    assert data["not_on_nominated_node"] == [
        {
            "seed": 1,
            "profile": DEFAULT_PROFILE.name,
            "pod": "ns/held",
            "nominated": "a",
            "final_node": None,
            "upstream_terminating_victims": ["ns/v"],
        }
    ]
    path = tmp_path / "conformance.md"
    write_markdown(data, [], [ProfileDef(DEFAULT_PROFILE.name, {}, "built-in")], path)
    assert "(not expected in the 1 with a victim already terminating, which never goes;" in path.read_text()


def test_summary_counts_the_devices_of_extended_resource_claims_apart(tmp_path: Path) -> None:
    from tests.conformance import devices

    def pod(name: str, upstream: list[str], ours: list[str], requests: dict[str, str], claims: bool) -> PodResult:
        result = _pod(1, True, ["DynamicResources"])
        result.name = name
        result.upstream.devices, result.ours.devices = upstream, ours
        spec: dict[str, Any] = {"containers": [{"name": "c", "resources": {"requests": requests}}]}
        if claims:
            spec["resourceClaims"] = [{"name": "gpu", "resourceClaimName": f"{name}-gpu"}]
        result.manifest = {"kind": "Pod", "metadata": {"name": name}, "spec": spec}
        return result

    extended = {f"{devices.EXTENDED_PREFIX}1": "1"}
    pods = [
        pod("user", ["gpu=a/gpu-0"], ["gpu=a/gpu-0"], {}, claims=True),
        pod("both", ["gpu=a/gpu-1"], ["gpu=a/gpu-1"], extended, claims=True),
        pod("ext", ["container-0-request-0=a/gpu-2"], ["container-0-request-0=a/gpu-2"], extended, claims=False),
        pod("ext-apart", ["container-0-request-0=a/gpu-3"], ["container-0-request-0=a/gpu-0"], extended, False),
    ]
    run = RunInfo("python -m tests.conformance", 1, "small", 2.0, "2026-01-01 00:00 UTC", "abc", "test machine")
    data = summary([ScenarioResult(1, "small", DEFAULT_PROFILE.name, 3, 1, pods, 1.0)], [DEFAULT_PROFILE], run)
    checks = data["checks"]
    assert (checks["devices_compared"], checks["devices_equal"]) == (4, 3)
    assert (checks["extended_devices_compared"], checks["extended_devices_equal"]) == (2, 1)
    path = tmp_path / "conformance.md"
    write_markdown(data, [], [ProfileDef(DEFAULT_PROFILE.name, {}, "built-in")], path)
    assert "| ... of which the claim created for DRA-backed extended resources | 2 | 1 |" in path.read_text()


def test_features_are_read_from_the_pod_and_its_scenario() -> None:
    scenario = generator.Scenario(seed=1, size="small")
    scenario.services.append({"metadata": {"namespace": "ns"}, "spec": {"selector": {"app": "web"}}})
    pod = {
        "metadata": {"namespace": "ns", "labels": {"app": "web"}},
        "spec": {
            "schedulingGates": [{"name": "g"}],
            "containers": [{"name": "c", "resources": {"requests": {"cpu": "1", "example.com/gpu": "1"}}}],
            "resourceClaims": [{"name": "r", "resourceClaimTemplateName": "t"}],
            "volumes": [{"name": "v", "ephemeral": {}}],
        },
    }
    uses = features.pod_uses(pod, scenario)
    assert uses == [
        "scheduling gates",
        "cpu/memory requests",
        "extended resources",
        "system default spread (Service/ReplicaSet)",
        "generic ephemeral volumes",
        "DRA claim templates",
    ]
    assert "PodDisruptionBudgets in the cluster" not in uses
    compared = [
        SimpleNamespace(uses=uses, decisive=["DynamicResources"], agree=True),
        SimpleNamespace(uses=["scheduling gates"], decisive=[], agree=False),
    ]
    rows = features.by_feature(compared)
    assert rows["scheduling gates"] == {"pods": 2, "decisive": 0, "agree": 1, "disagree": 1}
    assert rows["DRA claim templates"] == {"pods": 1, "decisive": 1, "agree": 1, "disagree": 0}
    assert rows["extended resources"]["decisive"] == 1  # judged by NodeResourcesFit or DynamicResources
    assert rows["spec.nodeName"]["pods"] == 0


def test_generated_pods_carry_their_features() -> None:
    scenario = generate(3, "large")
    used = {name for pending in scenario.pending for name in features.pod_uses(pending.manifest, scenario)}
    assert {"cpu/memory requests", "tolerations", "nodeSelector"} <= used or len(used) >= 8


def test_most_scenarios_run_the_default_profile_and_every_other_profile_keeps_a_share() -> None:
    from tests.conformance.__main__ import DEFAULT_PROFILE_SHARE, default_profile, fresh_seed, profile_for

    profiles = default_profiles()
    default = default_profile(profiles)
    assert default is not None
    assert not default.spec
    drawn = Counter(profile_for(seed, profiles).name for seed in range(1, 2001))
    assert abs(drawn[default.name] / 2000 - DEFAULT_PROFILE_SHARE) < 0.05
    assert set(drawn) == {p.name for p in profiles}  # the others keep a share
    assert max(n for name, n in drawn.items() if name != default.name) < drawn[default.name] / 4
    # A function of the seed alone: a rerun with --seed-start gets the same profile.
    assert [profile_for(s, profiles) for s in range(50)] == [profile_for(s, profiles) for s in range(50)]
    assert profile_for(7, [p for p in profiles if p is not default]) is not default
    assert fresh_seed() != fresh_seed() or fresh_seed() != fresh_seed()


# -- known differences -------------------------------------------------------------------------------------
def test_a_victim_sharing_a_host_port_explains_only_preemptions_part() -> None:
    # Seed 728710 (a make conformance run): on n02 a priority -100 pod and a priority 0 pod both hold port 443.
    from tests.conformance import known

    scenario = generate(728710, "normal")
    assert known.shared_host_port_nodes(scenario) == {"c728710-n02": (-100, 0)}
    main = "0/13 nodes are available: 2 node(s) didn't match pod anti-affinity rules. "
    upstream = Decision("unschedulable", note=main + "preemption: 0/13 nodes are available: 2 node(s) didn't match "
                        "pod anti-affinity rules, 11 No preemption victims found for incoming pod.")  # fmt: skip
    ours = Decision("unschedulable", note=main + "preemption: 0/13 nodes are available: 1 node(s) didn't have free "
                    "ports for the requested pod ports, 1 node(s) didn't match pod anti-affinity rules, 11 No "
                    "preemption victims found for incoming pod.")  # fmt: skip

    def result(pod_priority: int, ours: Decision = ours) -> PodResult:
        return PodResult(
            seed=728710, profile="p", index=11, name="p11", namespace="ns", features=["NodePorts"], plugins=[],
            upstream=upstream, ours=ours, hints=known.scenario_hints(scenario),
            manifest={"spec": {"priority": pod_priority}}, problems=["message: FailedScheduling notes differ"],
        )  # fmt: skip

    assert known.explain(result(0)) is not None
    assert known.explain(result(-100)) is None  # no holder is a victim: not this cause
    other = Decision("unschedulable", note="0/13 nodes are available: 3 Insufficient cpu. " + ours.note.split(". ")[1])
    assert known.explain(result(0, other)) is None  # the main part differs too: not this cause


def test_freed_host_port_nodes_and_predicate() -> None:
    from tests.conformance import known

    scenario = known.host_port_scenario()
    assert known.freed_host_port_nodes(scenario) == {"known-n0"}
    assert known.scenario_hints(scenario) == ["freed-host-port:known-n0"]
    assert known.freed_host_port_nodes(generate(1176)) >= set()  # any scenario is accepted

    def result(upstream: Decision, ours: Decision, hints: list[str]) -> PodResult:
        pod = _pod(1, False, ["NodePorts"])
        pod.upstream, pod.ours, pod.hints = upstream, ours, hints
        return pod

    hint = ["freed-host-port:n1"]
    ports = (
        "0/3 nodes are available: {} node(s) didn't have free ports for the requested pod ports, {} Insufficient cpu."
    )
    up, ours = ports.format(1, 2), ports.format(2, 1)
    assert known.explain(result(Decision("bound", node="n1"), Decision("unschedulable", note="x"), hint))
    assert known.explain(
        result(Decision("unschedulable", note=up, condition=up), Decision("unschedulable", note=ours), hint)
    )
    # Without the precondition, or with the difference the other way round, it is not this known difference.
    assert not known.explain(result(Decision("bound", node="n1"), Decision("unschedulable", note="x"), []))
    assert not known.explain(
        result(Decision("unschedulable", note=ours, condition=ours), Decision("unschedulable", note=up), hint)
    )
    assert not known.explain(result(Decision("bound", node="n2"), Decision("bound", node="n3"), hint))


def test_storage_is_added_to_some_seeds_only_and_leaves_the_rest_of_the_scenario_alone(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(generator, "add_coverage", lambda scenario, seed: None)  # its own pass, tested below
    with_storage = [seed for seed in range(1, 41) if generate(seed, "small").volumes]
    assert 8 <= len(with_storage) <= 32
    seed = with_storage[0]
    scenario = generate(seed, "small")
    plain = generator._Builder(seed, "small")
    plain.namespaces()
    plain.nodes()
    plain.workloads()
    plain.existing_pods()
    plain.pending_pods()

    def without_volumes(pods: list[dict[str, Any]]) -> list[dict[str, Any]]:
        out = copy.deepcopy(pods)
        for pod in out:
            pod["spec"]["volumes"] = [v for v in pod["spec"].get("volumes", ()) if "persistentVolumeClaim" not in v]
        return out

    assert scenario.nodes == plain.scenario.nodes
    assert without_volumes(scenario.existing_pods) == without_volumes(plain.scenario.existing_pods)
    assert without_volumes([p.manifest for p in scenario.pending]) == without_volumes(
        [p.manifest for p in plain.scenario.pending]
    )


def test_storage_scenarios_bind_claims_consistently_and_use_every_volume_plugin() -> None:
    features: Counter[str] = Counter()
    claim_kinds: Counter[str] = Counter()
    for seed in range(1, 60):
        scenario = generate(seed)
        pvs = {pv["metadata"]["name"]: pv for pv in scenario.volumes}
        claims = {c["metadata"]["name"]: c for c in scenario.claims}
        for claim in scenario.claims:
            volume = claim["spec"].get("volumeName")
            claim_kinds["bound" if volume else claim["spec"]["storageClassName"].rsplit("-", 1)[1]] += 1
            if volume:  # both halves of a binding, as the PV controller leaves them
                ref = pvs[volume]["spec"]["claimRef"]
                assert (ref["namespace"], ref["name"]) == (claim["metadata"]["namespace"], claim["metadata"]["name"])
                assert claim["metadata"]["annotations"]["pv.kubernetes.io/bind-completed"] == "yes"
        for pod in scenario.existing_pods:
            for volume in pod["spec"].get("volumes", ()):
                claim = claims[volume["persistentVolumeClaim"]["claimName"]]
                assert claim["metadata"]["namespace"] == pod["metadata"]["namespace"]
                assert claim["spec"].get("volumeName")  # existing pods only use bound claims
        for pending in scenario.pending:
            features.update(f for f in pending.features if f.startswith(("Volume", "NodeVolume")))
            if pending.manifest["spec"].get("schedulingGates"):
                assert pending.features == ("SchedulingGates",)  # never in a cycle: no other plugin runs
            elif "persistentVolumeClaim" in str(pending.manifest["spec"].get("volumes")):
                claim_kinds["pod"] += 1
                assert "VolumeBinding" in pending.features
    assert set(features) == {"VolumeBinding", "VolumeZone", "VolumeRestrictions", "NodeVolumeLimits"}
    for kind in ("bound", "wffc", "immediate", "pod"):
        assert claim_kinds[kind] > 0, kind


def _storage_scenarios(seeds: range = range(1, 60)) -> list[generator.Scenario]:
    return [s for s in (generate(seed) for seed in seeds) if s.volumes]


def test_zone_labelled_volumes_without_node_affinity_leave_the_verdict_to_volume_zone() -> None:
    seen: Counter[str] = Counter()
    for scenario in _storage_scenarios():
        for pv in scenario.volumes:
            labels = pv["metadata"]["labels"]
            keys = set(volumes.VOLUME_ZONE_KEYS) & set(labels)
            if not keys or "nodeAffinity" in pv["spec"]:
                continue
            seen["zone-only"] += 1
            seen.update(key.split("/")[0] for key in keys)
            for key in keys & {volumes.ZONE_KEY, volumes.BETA_ZONE_KEY}:
                values = labels[key].split("__")
                assert values == sorted(set(values)), labels
                assert all(v.startswith("zone-") for v in values), labels
                seen["multi-zone"] += len(values) > 1
    assert seen["zone-only"] >= 10
    for kind in ("topology.kubernetes.io", "failure-domain.beta.kubernetes.io", "multi-zone"):
        assert seen[kind] > 0, kind


def test_dynamic_provisioning_classes_capacities_and_claims() -> None:
    seen: Counter[str] = Counter()
    for scenario in _storage_scenarios():
        classes = {c["metadata"]["name"]: c for c in scenario.storage_classes}
        dynamic = {n for n, c in classes.items() if c["provisioner"] == volumes.CSI_DRIVER}
        assert len(dynamic) == 2
        assert all(classes[n]["volumeBindingMode"] == "WaitForFirstConsumer" for n in dynamic)
        seen["allowedTopologies"] += sum("allowedTopologies" in classes[n] for n in dynamic)
        for claim in scenario.claims:
            if claim["spec"]["storageClassName"] in dynamic:
                seen["claim"] += 1
                assert not claim["spec"].get("volumeName")
        if scenario.capacities:
            assert [d["spec"]["storageCapacity"] for d in scenario.csi_drivers] == [True]
            covered = set()
            for capacity in scenario.capacities:
                assert capacity["storageClassName"] in dynamic
                covered.add(capacity["nodeTopology"]["matchLabels"][volumes.HOSTNAME_KEY])
            assert covered <= set(scenario.node_names)
            seen["node without capacity"] += len(set(scenario.node_names) - covered)
            seen["capacity"] += 1
        else:
            assert not scenario.csi_drivers  # no CSIDriver: capacity is never checked
            seen["no capacity"] += 1
    for kind in ("allowedTopologies", "claim", "node without capacity", "capacity", "no capacity"):
        assert seen[kind] > 0, kind


def test_provisioned_volume_is_pinned_to_the_selected_node_and_pre_bound_by_uid() -> None:
    claim = {
        "metadata": {"name": "dynamic0", "namespace": "ns", "uid": "u1"},
        "spec": {
            "storageClassName": "c1-dynamic",
            "accessModes": ["ReadWriteOnce"],
            "resources": {"requests": {"storage": "5Gi"}},
        },
    }
    pv = volume_harness.provisioned_volume(claim, "node-3", 1)
    assert pv["metadata"]["labels"] == {"conformance/seed": "1"}  # listed and deleted with the scenario
    assert pv["spec"]["claimRef"] == {"namespace": "ns", "name": "dynamic0", "uid": "u1"}
    assert pv["spec"]["capacity"] == {"storage": "5Gi"}
    assert pv["spec"]["storageClassName"] == "c1-dynamic"
    assert pv["spec"]["csi"]["driver"] == volumes.CSI_DRIVER
    term = pv["spec"]["nodeAffinity"]["required"]["nodeSelectorTerms"][0]["matchExpressions"][0]
    assert (term["key"], term["values"]) == (volumes.HOSTNAME_KEY, ["node-3"])


def test_upstream_is_denied_claim_updates_too() -> None:
    """The selected-node annotation is a PVC UPDATE: the same policy must deny it."""
    policy, binding = volume_harness.no_volume_writes_policy("upstream")
    rule = policy["spec"]["matchConstraints"]["resourceRules"][0]
    assert {"persistentvolumes", "persistentvolumeclaims"} <= set(rule["resources"])
    assert rule["operations"] == ["UPDATE"]
    assert binding["spec"]["policyName"] == policy["metadata"]["name"]


def test_model_reports_missing_capacity_like_volume_binding() -> None:
    scenario = next(s for s in _storage_scenarios() if s.capacities)
    dynamic = next(c for c in scenario.storage_classes if c["metadata"]["name"].endswith("-dynamic"))
    model = Model({"p": {}})
    for name in ("a", "b"):
        labels = {volumes.HOSTNAME_KEY: name}
        model.load(
            {"kind": "Node", "metadata": {"name": name, "labels": labels}, "status": {"allocatable": {"pods": "9"}}}
        )
    capacity = copy.deepcopy(
        next(c for c in scenario.capacities if c["storageClassName"] == dynamic["metadata"]["name"])
    )
    capacity["nodeTopology"] = {"matchLabels": {volumes.HOSTNAME_KEY: "a"}}
    capacity["capacity"] = "2Gi"
    claim = {
        "kind": "PersistentVolumeClaim",
        "metadata": {"name": "d0", "namespace": "ns"},
        "spec": {
            "storageClassName": dynamic["metadata"]["name"],
            "accessModes": ["ReadWriteOnce"],
            "resources": {"requests": {"storage": "1Gi"}},
        },
    }
    for obj in (dynamic, *scenario.csi_drivers, capacity, claim):
        model.load(obj)
    pod: dict[str, Any] = {
        "kind": "Pod",
        "metadata": {"name": "p", "namespace": "ns", "uid": "p1"},
        "spec": {
            "containers": [{"name": "c", "image": "x"}],
            "volumes": [{"name": "d", "persistentVolumeClaim": {"claimName": "d0"}}],
        },
    }
    verdict = model.decide("p", pod)
    assert verdict.node == "a"
    assert "did not have enough free storage" in verdict.rejections["b"]


# -- preemption --------------------------------------------------------------------------------------------
_PREEMPTION_LOG = """\
I1123 22:30:12.100000 7145 schedule_one.go:97] "Attempting to schedule pod" pod="ns/p"
I1123 22:30:12.104028 7145 preemption.go:162] "the target node for the preemption is determined" pod="ns/p" node="n1"
I1123 22:30:12.104100 7145 executor.go:210] "Victim Pod is already being deleted, skipping the API call for it" \
preemptor="ns/p" node="n1" victim="ns/t"
I1123 22:30:12.105348 7145 executor.go:251] "Start the preemption asynchronously" preemptor="ns/p" node="n1" \
numVictims=3 numVictimsToDelete=2
I1123 22:30:12.105400 7145 schedule_one.go:1239] "Unable to schedule pod; no fit; waiting" pod="ns/p" \
err="0/2 nodes are available: 2 Insufficient cpu."
I1123 22:30:12.106000 7145 executor.go:145] "Victim Pod is already deleted" preemptor="ns/p" victim="ns/e1" node="n1"
I1123 22:30:12.106100 7145 executor.go:145] "Victim Pod is already deleted" preemptor="ns/other" victim="ns/x" node="n0"
I1123 22:30:12.106200 7145 executor.go:145] "Victim Pod is already deleted" preemptor="ns/p" victim="ns/e0" node="n1"
"""


def test_parse_cycle_reads_upstreams_preemption() -> None:
    lines = _PREEMPTION_LOG.splitlines()
    started = oracle.parse_cycle(lines, "ns/p")
    assert started.preemption_node == "n1"
    assert started.terminating_victims == ["ns/t"]
    assert started.victims == ["ns/e1", "ns/e0"]  # another preemptor's victim is not ours
    assert started.preemption_started
    assert not started.preemption_done
    done = oracle.parse_cycle(
        [
            *lines,
            'I1123 22:30:12.107 7145 executor.go:309] "Async Preemption finished completely" preemptor="ns/p" '
            'node="n1" result="success"',
        ],
        "ns/p",
    )
    assert done.preemption_done
    assert done.preemption_result == "success"
    assert done.upstream_victims == ["ns/e0", "ns/e1", "ns/t"]
    assert not done.preempted_for_real
    assert not done.preemption_errors
    failed = oracle.parse_cycle(
        [
            *lines,
            'E1123 22:30:12.107 7145 executor.go:131] "Could not add DisruptionTarget condition due to '
            'preemption" err="forbidden" preemptor="ns/p" victim="ns/e2"',
        ],
        "ns/p",
    )
    assert failed.preemption_errors == ["Could not add DisruptionTarget condition due to preemption: ns/e2 forbidden"]
    # No preemption decided: nothing to wait for.
    assert oracle.parse_cycle(lines[:1], "ns/p").preemption_done


def test_webhook_refuses_as_not_found_and_matches_only_upstreams_disruption_patches() -> None:
    review = {
        "request": {
            "uid": "r-1",
            "namespace": "ns",
            "object": {"metadata": {"name": "e0", "namespace": "ns", "uid": "u"}},
        }
    }
    response = preemption_harness.review_response(review)["response"]
    assert response["uid"] == "r-1"
    assert response["allowed"] is False
    # NotFound is what lets upstream's executor go on to the next victim without an error.
    assert response["status"]["code"] == 404
    assert response["status"]["reason"] == "NotFound"
    assert response["status"]["message"].endswith("ns/e0")
    policy, binding = preemption_harness.no_pod_deletes_policy("system:serviceaccount:default:u")
    assert policy["spec"]["matchConstraints"]["resourceRules"][0]["operations"] == ["DELETE"]
    assert binding["spec"]["validationActions"] == ["Deny"]


def test_start_times_are_distinct_whole_seconds() -> None:
    times = [preemption_harness.start_time(i) for i in range(1, 70)]
    assert len(set(times)) == len(times)
    assert times == sorted(times)
    assert times[0] == "2026-01-01T00:00:01Z"


def _pod_event(uid: str, name: str, **status: Any) -> Any:
    from kubernetes.client import V1ObjectMeta, V1Pod, V1PodCondition, V1PodStatus

    conditions = [V1PodCondition(**c) for c in status.pop("conditions", [])]
    deleted = status.pop("deleted", None)
    meta = V1ObjectMeta(uid=uid, name=name, namespace="ns", deletion_timestamp=deleted)
    return V1Pod(metadata=meta, status=V1PodStatus(conditions=conditions or None, **status))


def test_pod_watch_keeps_first_nomination_and_message_and_orders_what_went() -> None:
    watch = preemption_harness.PodWatch(api=None)  # type: ignore[arg-type]
    unschedulable = {"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": "first"}
    watch.observe("MODIFIED", _pod_event("p", "p", nominated_node_name="n1", conditions=[unschedulable]))
    mark = watch.mark()
    later = {**unschedulable, "message": "second"}
    watch.observe("MODIFIED", _pod_event("p", "p", nominated_node_name="n2", conditions=[later]))
    disrupted = {"type": "DisruptionTarget", "status": "True", "reason": "PreemptionByScheduler"}
    watch.observe("MODIFIED", _pod_event("v1", "v1", conditions=[disrupted]))
    watch.observe("DELETED", _pod_event("v1", "v1", conditions=[disrupted]))
    watch.observe("DELETED", _pod_event("v0", "v0"))
    facts = watch.get("p")
    assert facts is not None
    assert (facts.nominated, facts.unschedulable) == ("n1", "first")
    assert [f.key for f in watch.gone_since(mark)] == ["ns/v1", "ns/v0"]
    assert watch.gone_since(watch.mark()) == []


class _FakeWatchResponse:
    status = 200

    def __init__(self, events: list[dict[str, Any]]) -> None:
        self.lines = [json.dumps(e).encode() + b"\n" for e in events]

    def stream(self, amt: Any = None, decode_content: bool = False) -> Any:
        return iter(self.lines)

    def close(self) -> None:
        pass

    def release_conn(self) -> None:
        pass


def test_pod_watch_resumes_from_the_last_version_and_relists_only_when_gone() -> None:
    pod_watch = preemption_harness.PodWatch(api=None)  # type: ignore[arg-type]
    asked: list[str | None] = []

    def pod(version: str, message: str) -> dict[str, Any]:
        condition = {"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": message}
        meta = {"uid": "p", "name": "p", "namespace": "ns", "resourceVersion": version}
        return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "status": {"conditions": [condition]}}

    replies = [
        [{"type": "ADDED", "object": pod("5", "first")}],
        [{"type": "ERROR", "object": {"kind": "Status", "code": 410, "reason": "Expired", "message": "too old"}}],
        [{"type": "MODIFIED", "object": pod("9", "second")}],
    ]

    def list_pod_for_all_namespaces(**kwargs: Any) -> _FakeWatchResponse:
        """:rtype: V1PodList"""
        asked.append(kwargs.get("resource_version"))
        if len(asked) == len(replies):
            pod_watch._stopped.set()
        return _FakeWatchResponse(replies[len(asked) - 1])

    pod_watch.core = SimpleNamespace(list_pod_for_all_namespaces=list_pod_for_all_namespaces)  # type: ignore[assignment]
    pod_watch._run()
    assert asked == [None, "5", None]
    facts = pod_watch.get("p")
    assert facts is not None
    assert facts.unschedulable == "first"


def test_judge_compares_the_preemption() -> None:
    from tests.conformance.runner import preemption_problems

    text = "0/2 nodes are available: 2 Insufficient cpu."

    def preempting(node: str | None, victims: list[str], final: str | None = None) -> Decision:
        return Decision("unschedulable", note=text, condition=text, nominated=node, victims=victims, final_node=final)

    assert _judge(preempting("n1", ["ns/e0"]), preempting("n1", ["ns/e0"], "n1")).agree
    assert preemption_problems(preempting("n1", ["ns/e0"]), preempting("n0", ["ns/e1"], "n0")) == [
        "preemption: upstream nominated n1, ours n0"
    ]
    assert preemption_problems(preempting("n1", ["ns/e0"]), preempting("n1", ["ns/e0", "ns/e1"], "n1")) == [
        "preemption: victims differ: upstream ['ns/e0'], ours ['ns/e0', 'ns/e1']"
    ]
    assert preemption_problems(preempting("n1", ["ns/e0"]), preempting("n1", ["ns/e0"])) == [
        "preemption: ours was nominated for n1 and not bound in 20s after its victims went"
    ]
    # A victim already terminating (held by a finalizer) never goes: ours may stay nominated, unbound.
    upstream = preempting("n1", ["ns/e0"])
    upstream.terminating_victims = ["ns/t"]
    assert preemption_problems(upstream, preempting("n1", ["ns/e0"])) == []
    real = oracle.UpstreamCycle(preempted_for_real=["ns/e0"])
    assert _judge(preempting("n1", ["ns/e0"]), preempting("n1", ["ns/e0"], "n1"), real).problems == [
        "harness: upstream preempted for real ['ns/e0'] or failed []"
    ]
    assert "DefaultPreemption" in _judge(preempting("n1", []), preempting("n1", [], "n1")).decisive


def _preemption_scenarios(seeds: range = range(1, 60)) -> list[generator.Scenario]:
    return [s for s in (generate(seed) for seed in seeds) if s.budgets]


def test_preemption_layer_fills_nodes_with_budgets_and_preemptors() -> None:
    scenarios = _preemption_scenarios()
    assert 15 <= len(scenarios) <= 45  # a share of the seeds, not all
    classes: Counter[str] = Counter()
    filled = [s for s in scenarios if any(p["metadata"]["name"].startswith("f") for p in s.existing_pods)]
    assert len(filled) >= 0.8 * len(scenarios)
    for scenario in scenarios:
        for budget in scenario.budgets:
            spec, status = budget["spec"], budget["status"]
            assert ("minAvailable" in spec) != ("maxUnavailable" in spec)
            assert status["disruptionsAllowed"] == max(0, status["currentHealthy"] - status["desiredHealthy"])
        classes.update(str(p.manifest["spec"].get("priorityClassName")) for p in scenario.pending)
        assert any(preemptions.PREEMPTION in p.features for p in scenario.pending)
    assert classes[preemptions.NEVER_CLASS] > 0
    assert classes["conformance-high"] > 0
    assert sum(1 for s in scenarios for b in s.budgets if b["status"]["disruptionsAllowed"] == 0) > 0
    assert sum(1 for s in scenarios for b in s.budgets if b["status"]["disruptionsAllowed"] > 0) > 0
    assert sum(1 for s in scenarios for b in s.budgets if "disruptedPods" in b["status"]) > 0


def test_preemption_layer_leaves_other_seeds_alone_and_keeps_nodes_within_capacity() -> None:
    for seed in range(1, 30):
        scenario = generate(seed)
        if not scenario.budgets:
            assert not any(p["metadata"]["name"].startswith("f") for p in scenario.existing_pods)
        cpu: Counter[str] = Counter()
        for pod in scenario.existing_pods:
            cpu[pod["spec"]["nodeName"]] += preemptions.pod_cpu_upper_bound(pod["spec"])
        for node in scenario.nodes:
            assert cpu[node["metadata"]["name"]] <= _milli(str(node["status"]["allocatable"]["cpu"]))


def test_budget_status_counts_healthy_pods_like_the_disruption_controller() -> None:
    def pod(name: str, lifecycle: str | None = None) -> dict[str, Any]:
        annotations = {generator.LIFECYCLE_ANNOTATION: lifecycle} if lifecycle else {}
        return {"metadata": {"name": name, "annotations": annotations}}

    pods = [pod("a"), pod("b"), pod("c", generator.TERMINATING), pod("d")]
    status = preemptions.budget_status({"minAvailable": 1}, pods, {"d": "2026-01-01T00:00:00Z"})
    assert (status["currentHealthy"], status["desiredHealthy"], status["disruptionsAllowed"]) == (2, 1, 1)
    assert status["disruptedPods"] == {"d": "2026-01-01T00:00:00Z"}
    status = preemptions.budget_status({"maxUnavailable": 1}, pods, {})
    assert (status["expectedPods"], status["desiredHealthy"], status["disruptionsAllowed"]) == (4, 3, 0)


def test_pinned_preemption_scenario_guards_the_cheaper_node_with_a_budget() -> None:
    scenario = preemptions.pinned_scenario()
    (budget,) = scenario.budgets
    assert budget["status"]["disruptionsAllowed"] == 0
    guarded = [p for p in scenario.existing_pods if p["metadata"]["labels"]["app"] == "guarded"]
    assert [p["spec"]["nodeName"] for p in guarded] == ["pin-n0"]
    assert [p.manifest["spec"]["priorityClassName"] for p in scenario.pending] == [
        "conformance-high",
        preemptions.NEVER_CLASS,
    ]


def test_upstream_is_denied_only_its_claim_status_writes() -> None:
    """Its extended-resource claim is created, given its finalizer and deleted through the claim itself (let
    through); the allocation goes through the status, denied with the devices in the message."""
    from tests.conformance import devices

    policy, binding = devices.no_claim_writes_policy("upstream")
    [rule] = policy["spec"]["matchConstraints"]["resourceRules"]
    assert (rule["operations"], rule["resources"]) == (["UPDATE"], ["resourceclaims/status"])
    assert binding["spec"]["policyName"] == policy["metadata"]["name"]
    [validation] = policy["spec"]["validations"]
    assert "object.status.allocation.devices.results" in validation["messageExpression"]
    assert devices.denied_devices(f"x: {devices.CLAIMS_DENIED_MARKER}; allocated []") == []
    message = (
        f"{devices.CLAIMS_DENIED_MARKER}; allocated [container-0-request-1=n1/gpu-0,container-0-request-1=n1/gpu-2]"
    )
    assert devices.denied_devices(f"add allocation and reservation to claim ns/p-extended-resources-x: {message}") == [
        "container-0-request-1=n1/gpu-0",
        "container-0-request-1=n1/gpu-2",
    ]


def test_extended_resource_claim_devices_are_compared_when_the_pod_has_no_user_claim() -> None:
    from tests.conformance import devices

    def pod(requests: dict[str, str], claims: bool = False) -> dict[str, Any]:
        spec: dict[str, Any] = {"containers": [{"name": "c", "resources": {"requests": requests}}]}
        if claims:
            spec["resourceClaims"] = [{"name": "gpu", "resourceClaimName": "p-gpu"}]
        return {"spec": spec}

    explicit = pod({"cpu": "1", f"{devices.EXTENDED_PREFIX}7": "1"})
    implicit = pod({devices.DEVICE_CLASS_PREFIX + "ext-gpu-7": "2"})
    both = pod({f"{devices.EXTENDED_PREFIX}7": "1"}, claims=True)
    assert devices.asks_for_extended_devices(explicit)
    assert devices.asks_for_extended_devices(implicit)
    assert not devices.asks_for_extended_devices(pod({"cpu": "1", "example.com/gpu": "1"}))
    assert [devices.extended_devices_compared(p) for p in (explicit, implicit, both)] == [True, True, False]
    # Upstream writes user claims first: with one, its denial is that claim's; else the extended one's.
    assert devices.compared_claims(["p-gpu"], "p-extended-resources-x") == ["p-gpu"]
    assert devices.compared_claims([], "p-extended-resources-x") == ["p-extended-resources-x"]
    assert devices.compared_claims([], None) == []


def test_upstream_owes_a_deallocation_line_per_device_its_assume_cache_held() -> None:
    from tests.conformance import devices

    def line(message: str, device: str, claim: str) -> str:
        return (
            f'I1128 16:00:00.000000  123 allocateddevices.go:204] "{message}" '
            f'device="gpu.conformance.example.com/n1/{device}" claim="{claim}"'
        )

    ours_claim, theirs = "ns/p-gpu", "ns/p-extended-resources-abcde"
    lines = [
        line("Observed device allocation", "gpu-0", theirs),
        line("Observed device allocation", "gpu-1", theirs),
        line("Observed device allocation", "gpu-2", ours_claim),
        line("Observed device allocation", "gpu-3", "ns/p2-extended-resources-xyz"),
        line("Observed device deallocation", "gpu-0", theirs),
        "not a klog line",
    ]
    assert devices.upstream_claim_lines(lines, "ns", "p") == [("Observed device deallocation", "claim", theirs)] * 2
    assert devices.upstream_claim_lines(lines, "other", "p") == []


def test_extended_resources_come_with_a_backing_class_and_leave_the_device_pass_as_it_was(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from tests.conformance import devices

    scenario = generate(17, "normal")
    [backing] = [c for c in scenario.device_classes if c["spec"].get("extendedResourceName")]
    names = {backing["spec"]["extendedResourceName"], devices.DEVICE_CLASS_PREFIX + backing["metadata"]["name"]}

    def resources(pending: Any) -> dict[str, Any]:
        return pending.manifest["spec"]["containers"][0].get("resources") or {}

    asking = [p for p in scenario.pending if names & set(resources(p).get("requests") or {})]
    assert asking
    for pending in asking:
        requested = names & set(resources(pending)["requests"])
        assert all(resources(pending)["requests"][n] == resources(pending)["limits"][n] for n in requested)
        assert "DynamicResources" in pending.features
    # The extended pass draws from its own RNG: without it, the device pass makes the same objects.
    monkeypatch.setattr(devices, "add_extended_resources", lambda scenario, seed: None)
    plain = generate(17, "normal")
    assert plain.resource_claims == scenario.resource_claims
    assert plain.resource_slices == scenario.resource_slices
    assert plain.device_classes == [c for c in scenario.device_classes if c is not backing]


def test_the_extender_section_says_which_seeds_and_commit_it_ran() -> None:
    from tests.conformance.extender_harness import section

    run = {"command": "python -m tests.conformance --extender-only", "seconds": 309.3, "seeds": "28098..28109"}
    run |= {"seeds_fresh": True, "date": "2026-11-28 15:58 UTC", "commit": "21941dc"}
    data = {"scenarios": 12, "pods": 195, "agree": 195, "disagree": 0, "known": 0, "run": run}
    text = section(data, {"filter": 210})
    assert (
        "- run: `python -m tests.conformance --extender-only`, 309.3 s, seeds 28098..28109 (drawn fresh for this run), "
        "started 2026-11-28 15:58 UTC, commit 21941dc" in text
    )
