"""SchedulerProfiles change live: hot reload, schema refusals, invalid profiles that keep the old pipeline.

Acceptance of the operator issue, second bullet: editing a profile (LeastAllocated → MostAllocated)
changes where the next pods go with no restart and ``status.observedGeneration`` follows; a malformed edit
is refused by ``kubectl apply`` (the CRD's structural schema and strict field validation); an unknown
plugin or an out-of-range argument gives Ready=False with a clear message, a Warning event on the profile,
and the previous pipeline keeps scheduling; fixing it returns Ready=True. Also from the build list: a
deleted profile's pods stay pending, and a profile created later picks them up.
"""

from __future__ import annotations

import copy
import secrets
from typing import Any

import pytest
from kubernetes import client

from tests.conftest import Cluster, NodeFactory
from tests.e2e.conftest import ProfileFactory
from tests.e2e.operator_process import (
    OperatorProcess,
    create_pods,
    delete_profile,
    get_profile,
    kubectl_apply,
    object_events,
    pod_events,
    pod_manifest,
    profile_body,
    ready_condition,
    replace_profile_spec,
    wait_for,
    wait_pods_bound,
    wait_profile_status,
    wait_scheduled_events,
)


def _fit_only(strategy: str, **resource_weights: int) -> dict[str, Any]:
    """Only NodeResourcesFit scores (so the strategy alone decides), with the given scoring strategy."""
    strategy_args: dict[str, Any] = {"type": strategy}
    if resource_weights:
        strategy_args["resources"] = [{"name": r, "weight": w} for r, w in resource_weights.items()]
    return {
        "plugins": {"score": {"disabled": [{"name": "*"}], "enabled": [{"name": "NodeResourcesFit", "weight": 1}]}},
        "pluginConfig": [{"name": "NodeResourcesFit", "args": {"scoringStrategy": strategy_args}}],
    }


def _place(cluster: Cluster, namespace: str, profile: str, prefix: str, labels: dict[str, str]) -> set[str]:
    """Create three small pods for ``profile`` and return the nodes they were bound to."""
    pods = [pod_manifest(f"{prefix}-{i}", profile, cpu="100m", node_selector=labels) for i in range(3)]
    create_pods(cluster.core, namespace, pods)
    bound = wait_pods_bound(cluster.core, namespace, [p["metadata"]["name"] for p in pods], timeout=30)
    return set(bound.values())


def _profile_warnings(cluster: Cluster, profile: str) -> list[Any]:
    events = object_events(cluster.api, "default", "SchedulerProfile", profile)
    return [e for e in events if e.type == "Warning"]


def test_profile_edit_changes_placement_without_restart_and_invalid_edits_keep_the_old_pipeline(
    cluster: Cluster, kwok_nodes: NodeFactory, namespace: str, profiles: ProfileFactory, operator: OperatorProcess
) -> None:
    labels = {"e2e-group": secrets.token_hex(4)}
    busy = kwok_nodes(cpu="8", memory="32Gi", labels=labels)
    idle = kwok_nodes(cpu="8", memory="32Gi", labels=labels)
    # Half of `busy` is taken by a pod placed there directly (no scheduler involved).
    preload = pod_manifest("preload", "none", cpu="4", spec={"nodeName": busy})
    create_pods(cluster.core, namespace, [preload])
    pid = operator.pid

    profile = profiles(_fit_only("LeastAllocated"))
    first = wait_profile_status(cluster.api, profile, ready=True)
    assert first["metadata"]["generation"] == 1
    assert first["status"]["observedGeneration"] == 1
    assert first["status"]["scorePlugins"] == "NodeResourcesFit:1"
    assert _place(cluster, namespace, profile, "least", labels) == {idle}

    # The edit a user makes: kubectl apply of the changed manifest.
    most = profile_body(profile, _fit_only("MostAllocated"))
    applied = kubectl_apply(cluster.kubeconfig, most)
    assert applied.returncode == 0, applied.stderr
    second = wait_profile_status(cluster.api, profile, ready=True, generation=2)
    assert second["metadata"]["generation"] == 2
    assert _place(cluster, namespace, profile, "most", labels) == {busy}

    # Malformed edits are refused by the API server when applied; the stored object does not change.
    bad_weight = copy.deepcopy(most)
    bad_weight["spec"]["plugins"]["score"]["enabled"][0]["weight"] = "abc"
    refused = kubectl_apply(cluster.kubeconfig, bad_weight)
    assert refused.returncode != 0
    assert "spec.plugins.score.enabled[0].weight" in refused.stderr
    assert "must be of type integer" in refused.stderr
    unknown_field = copy.deepcopy(most)
    unknown_field["spec"]["plugins"]["score"]["enabled"][0]["wieght"] = 3
    refused = kubectl_apply(cluster.kubeconfig, unknown_field)
    assert refused.returncode != 0
    assert 'unknown field "spec.plugins.score.enabled[0].wieght"' in refused.stderr
    out_of_range = copy.deepcopy(most)
    out_of_range["spec"]["percentageOfNodesToScore"] = 101
    refused = kubectl_apply(cluster.kubeconfig, out_of_range)
    assert refused.returncode != 0
    assert "spec.percentageOfNodesToScore" in refused.stderr
    assert "should be less than or equal to 100" in refused.stderr
    assert get_profile(cluster.api, profile)["metadata"]["generation"] == 2

    # Semantic errors pass the schema: Ready=False with the reason, a Warning event, old pipeline serving.
    unknown_plugin = _fit_only("LeastAllocated")
    unknown_plugin["plugins"]["score"]["enabled"].append({"name": "NoSuchPlugin", "weight": 2})
    replace_profile_spec(cluster.api, profile, unknown_plugin)
    invalid = wait_profile_status(cluster.api, profile, ready=False, generation=3)
    condition = ready_condition(invalid)
    assert condition is not None
    assert condition["reason"] == "InvalidProfile"
    assert 'ScorePlugin "NoSuchPlugin" does not exist' in condition["message"]
    assert "previous valid pipeline keeps serving" in condition["message"]
    wait_for(
        lambda: any("NoSuchPlugin" in (e.note or "") for e in _profile_warnings(cluster, profile)),
        timeout=15,
        message="no Warning event on the profile naming NoSuchPlugin",
    )
    # Still MostAllocated (the last valid spec), not the LeastAllocated of the invalid one.
    assert _place(cluster, namespace, profile, "while-unknown", labels) == {busy}

    replace_profile_spec(cluster.api, profile, _fit_only("MostAllocated"))
    fixed = wait_profile_status(cluster.api, profile, ready=True, generation=4)
    assert ready_condition(fixed)["reason"] != "InvalidProfile"

    replace_profile_spec(cluster.api, profile, _fit_only("LeastAllocated", cpu=101))
    invalid = wait_profile_status(cluster.api, profile, ready=False, generation=5)
    message = ready_condition(invalid)["message"]
    assert "scoringStrategy.resources[0].weight: Invalid value: 101" in message
    assert "not in valid range (0, 100]" in message
    assert _place(cluster, namespace, profile, "while-range", labels) == {busy}

    replace_profile_spec(cluster.api, profile, _fit_only("LeastAllocated", cpu=1))
    wait_profile_status(cluster.api, profile, ready=True, generation=6)
    # The fixed LeastAllocated pipeline serves again: back to the idle node.
    assert _place(cluster, namespace, profile, "least-again", labels) == {idle}

    assert operator.alive()
    assert operator.pid == pid
    assert operator.log_lines(r"Traceback") == []


def test_deleted_profile_leaves_its_pods_pending_and_a_new_one_picks_them_up(
    cluster: Cluster, kwok_nodes: NodeFactory, namespace: str, profiles: ProfileFactory, operator: OperatorProcess
) -> None:
    labels = {"e2e-group": secrets.token_hex(4)}
    kwok_nodes(cpu="4", labels=labels)
    gone = profiles({}, suffix="gone")
    live = profiles({}, suffix="live")
    wait_profile_status(cluster.api, gone, ready=True)
    wait_profile_status(cluster.api, live, ready=True)
    # The operator removes its finalizer, so the profile really goes while the operator runs.
    delete_profile(cluster.api, gone, wait=30)

    create_pods(
        cluster.core,
        namespace,
        [
            pod_manifest("orphan", gone, cpu="100m", node_selector=labels),
            pod_manifest("served", live, cpu="100m", node_selector=labels),
        ],
    )
    wait_pods_bound(cluster.core, namespace, ["served"], timeout=30)
    # Created in the same burst and long handled: no profile, no scheduling, no report.
    assert cluster.core.read_namespaced_pod("orphan", namespace).spec.node_name is None
    assert pod_events(cluster.api, namespace, "orphan") == []

    profiles({}, name=gone)
    wait_profile_status(cluster.api, gone, ready=True)
    wait_pods_bound(cluster.core, namespace, ["orphan"], timeout=30)
    events = wait_scheduled_events(cluster.api, namespace, ["orphan"])
    scheduled = pod_events(cluster.api, namespace, "orphan", reason="Scheduled", events=events)
    assert [e.reporting_controller for e in scheduled] == [gone]


@pytest.mark.parametrize(
    ("spec", "fragment"),
    [
        ({"plugins": {"score": {"enabled": [{"name": "NodeResourcesFit", "weight": "abc"}]}}}, "must be of type"),
        # A nameless entry (an empty name is kube-scheduler's to judge: it ignores one in pluginConfig).
        ({"pluginConfig": [{"args": {}}]}, "spec.pluginConfig[0].name"),
        ({"plugins": {"filtre": {}}}, 'unknown field "spec.plugins.filtre"'),
    ],
    ids=["string-weight", "nameless-plugin-config", "unknown-extension-point"],
)
def test_malformed_profile_is_refused_at_create(
    cluster: Cluster, crds: list[str], spec: dict[str, Any], fragment: str
) -> None:
    """The schema alone refuses these (no operator needed): kubectl apply fails and names the field."""
    name = f"malformed-{secrets.token_hex(3)}"
    result = kubectl_apply(cluster.kubeconfig, profile_body(name, spec))
    assert result.returncode != 0, result.stdout
    assert fragment in result.stderr
    with pytest.raises(client.ApiException) as missing:
        get_profile(cluster.api, name)
    assert missing.value.status == 404


def test_profile_invalid_from_the_start_schedules_once_fixed(
    cluster: Cluster, kwok_nodes: NodeFactory, namespace: str, profiles: ProfileFactory, operator: OperatorProcess
) -> None:
    """No valid pipeline ever existed: Ready=False, its pods wait; the fix brings the pipeline and binds them."""
    labels = {"e2e-group": secrets.token_hex(4)}
    node = kwok_nodes(cpu="4", labels=labels)
    profile = profiles({"plugins": {"filter": {"enabled": [{"name": "NoSuchFilter"}]}}})
    invalid = wait_profile_status(cluster.api, profile, ready=False)
    message = ready_condition(invalid)["message"]
    assert 'FilterPlugin "NoSuchFilter" does not exist' in message
    assert "previous valid pipeline" not in message  # there was none
    create_pods(cluster.core, namespace, [pod_manifest("early", profile, cpu="100m", node_selector=labels)])

    replace_profile_spec(cluster.api, profile, {})
    wait_profile_status(cluster.api, profile, ready=True, generation=2)
    assert wait_pods_bound(cluster.core, namespace, ["early"], timeout=30) == {"early": node}
