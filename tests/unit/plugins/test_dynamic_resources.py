"""DynamicResources stand-in: pods with ResourceClaims stay Pending with a clear reason, never bound blind;
pods without claims are skipped; a profile that disables it binds them (design.md "Never bind blind")."""

from __future__ import annotations

from typing import Any

import pytest

from kopf_scheduler.api.profile import SchedulerProfileSpec
from kopf_scheduler.framework import QUEUE, QUEUE_SKIP, ActionType, ClusterEvent, Code, CycleState, EventResource
from kopf_scheduler.framework.builder import ProfileError, resolve_profile
from kopf_scheduler.framework.extension_points import ExtensionPoint
from kopf_scheduler.framework.registry import default_registry
from kopf_scheduler.plugins.dynamic_resources import NOT_IMPLEMENTED, DynamicResources
from kopf_scheduler.profiles import pipeline_status
from kopf_scheduler.state.cache import ClusterCache
from kopf_scheduler.state.pod_info import PodInfo
from kopf_scheduler.state.storage import RESOURCE_CLAIM
from tests.unit.app_harness import FakeClient, drive, new_app, pending
from tests.unit.factories import FakeHandle, make_node, make_pod, pod_info

CLAIMS = {"resourceClaims": [{"name": "gpu", "resourceClaimName": "my-gpu"}]}
MESSAGE = (
    "pod uses ResourceClaims: DynamicResources cannot allocate devices in kopf-scheduler yet; "
    "disable it in the profile to bind such pods without device allocation"
)
CLAIM = {"metadata": {"name": "my-gpu", "namespace": "default", "uid": "claim-uid"}, "spec": {}}
DISABLED = {"plugins": {"multiPoint": {"disabled": [{"name": "DynamicResources"}]}}}


def _pre_filter(spec: dict[str, Any]) -> Any:
    plugin = DynamicResources(handle=FakeHandle())
    return plugin.pre_filter(CycleState(), pod_info(make_pod(spec=spec)), ClusterCache().snapshot())


def test_a_pod_with_resource_claims_is_unschedulable_and_unresolvable() -> None:
    result, status = _pre_filter(CLAIMS)
    assert result is None
    assert status.code is Code.UNSCHEDULABLE_AND_UNRESOLVABLE
    assert status.reasons == (MESSAGE,) == (NOT_IMPLEMENTED,)
    assert status.plugin == "DynamicResources"


@pytest.mark.parametrize("spec", [pytest.param({}, id="no-field"), pytest.param({"resourceClaims": []}, id="empty")])
def test_a_pod_without_claims_is_skipped(spec: dict[str, Any]) -> None:
    _, status = _pre_filter(spec)
    assert status.code is Code.SKIP


def _with_claims(*claims: dict[str, Any]) -> DynamicResources:
    cache = ClusterCache()
    for claim in claims:
        cache.storage.apply(RESOURCE_CLAIM, "ADDED", claim)
    return DynamicResources(handle=FakeHandle(cache))


def _template_pod(status: list[dict[str, Any]] | None = None, uid: str = "pod-uid") -> PodInfo:
    pod = make_pod("p", spec={"resourceClaims": [{"name": "gpu", "resourceClaimTemplateName": "tmpl"}]}, uid=uid)
    if status is not None:
        pod["status"] = {**pod.get("status", {}), "resourceClaimStatuses": status}
    return pod_info(pod)


def _owned(uid: str = "pod-uid") -> dict[str, Any]:
    meta = {"name": "p-gpu-x", "namespace": "default", "uid": "c2"}
    return {"metadata": {**meta, "ownerReferences": [{"uid": uid, "controller": True, "kind": "Pod", "name": "p"}]}}


def test_pre_enqueue_waits_for_a_named_claim() -> None:
    pod = pod_info(make_pod("p", spec=CLAIMS))
    status = _with_claims().pre_enqueue(pod)
    assert status.code is Code.UNSCHEDULABLE_AND_UNRESOLVABLE
    assert status.reasons == ('resourceclaim.resource.k8s.io "my-gpu" not found',)
    assert _with_claims(CLAIM).pre_enqueue(pod).is_success


def test_pre_enqueue_refuses_a_claim_being_deleted() -> None:
    deleting = {**CLAIM, "metadata": {**CLAIM["metadata"], "deletionTimestamp": "2026-01-01T00:00:00Z"}}
    status = _with_claims(deleting).pre_enqueue(pod_info(make_pod("p", spec=CLAIMS)))
    assert status.reasons == ('resourceclaim "my-gpu" is being deleted',)


def test_pre_enqueue_resolves_template_claims_through_the_pod_status() -> None:
    plugin = _with_claims(_owned())
    assert plugin.pre_enqueue(_template_pod()).reasons == ('pod "default/p": ResourceClaim not created yet',)
    assert plugin.pre_enqueue(_template_pod([{"name": "gpu", "resourceClaimName": "p-gpu-x"}])).is_success
    assert plugin.pre_enqueue(_template_pod([{"name": "gpu"}])).is_success  # no claim generated: valid
    stranger = _template_pod([{"name": "gpu", "resourceClaimName": "p-gpu-x"}], uid="other")
    assert plugin.pre_enqueue(stranger).reasons == (
        "ResourceClaim default/p-gpu-x was not created for Pod default/p (Pod is not owner)",
    )


def test_pre_enqueue_ignores_pods_without_claims() -> None:
    assert _with_claims().pre_enqueue(pod_info(make_pod("p"))).is_success


def test_a_new_claim_of_the_pod_requeues_it_another_does_not() -> None:
    pod = pod_info(make_pod("p", spec=CLAIMS))
    plugin = _with_claims(CLAIM)
    assert plugin.is_schedulable_after_claim_change(pod, None, CLAIM) is QUEUE
    other = {"metadata": {"name": "x", "namespace": "default", "uid": "x"}}
    assert plugin.is_schedulable_after_claim_change(pod, None, other) is QUEUE_SKIP
    assert _with_claims().is_schedulable_after_claim_change(pod, None, CLAIM) is QUEUE_SKIP  # still missing


def test_the_pods_generated_claim_requeues_it() -> None:
    plugin = _with_claims(_owned())
    waiting = _template_pod()
    updated = _template_pod([{"name": "gpu", "resourceClaimName": "p-gpu-x"}])
    assert plugin.is_schedulable_after_pod_change(waiting, waiting, updated) is QUEUE
    assert plugin.is_schedulable_after_pod_change(waiting, waiting, waiting) is QUEUE_SKIP
    assert plugin.is_schedulable_after_pod_change(pod_info(make_pod("q", uid="q")), None, updated) is QUEUE_SKIP


def test_events_are_claim_changes_and_the_pods_generated_claim() -> None:
    events = [hint.event for hint in DynamicResources(handle=FakeHandle()).events_to_register()]
    assert events == [
        ClusterEvent(EventResource.RESOURCE_CLAIM, ActionType.ADD | ActionType.UPDATE),
        ClusterEvent(EventResource.POD, ActionType.UPDATE_POD_GENERATED_RESOURCE_CLAIM),
    ]


def test_the_default_profile_runs_it_as_a_stand_in_and_says_so() -> None:
    resolved = resolve_profile("sp", SchedulerProfileSpec(), default_registry())
    assert resolved.stand_ins == ("DynamicResources",)
    assert "DynamicResources" in resolved.omitted_defaults  # not upstream's plugin
    assert resolved.enabled(ExtensionPoint.PRE_FILTER)[-2].name == "DynamicResources"  # NodeDeclaredFeatures last
    status = pipeline_status(resolved)
    assert status["standInPlugins"] == ["DynamicResources"]
    assert "DynamicResources" in status["omittedDefaultPlugins"]


def test_a_profile_that_disables_it_has_no_stand_in() -> None:
    resolved = resolve_profile("sp", SchedulerProfileSpec.model_validate(DISABLED), default_registry())
    assert resolved.stand_ins == ()
    assert "DynamicResources" not in resolved.omitted_defaults
    assert "DynamicResources" not in resolved.plugin_names()


def test_enabling_it_where_the_stand_in_has_no_implementation_is_refused_with_a_note() -> None:
    spec = SchedulerProfileSpec.model_validate({"plugins": {"filter": {"enabled": [{"name": "DynamicResources"}]}}})
    with pytest.raises(ProfileError) as raised:
        resolve_profile("sp", spec, default_registry())
    assert str(raised.value) == (
        'plugins.filter.enabled[0]: plugin "DynamicResources" does not extend FilterPlugin plugin '
        "(kopf-scheduler's plugin of that name is a stand-in that does not implement it yet)"
    )


def test_the_default_profile_keeps_a_pod_with_claims_pending_with_a_failed_scheduling_event() -> None:
    client = FakeClient()
    app = new_app(client)
    app.on_node_event(None, make_node("n1"))
    outcome = app.apply_profile(name="sp", spec={}, generation=1)
    assert "stand-ins that keep the pods needing them pending: DynamicResources" in outcome.message
    app.on_storage_event("ResourceClaim", "ADDED", CLAIM)
    app.on_pod_event("ADDED", pending("claims", spec=CLAIMS))
    app.on_pod_event("ADDED", pending("plain"))
    drive(app)
    assert client.bindings == [("default", "plain", "n1")]
    [event] = [e for e in client.events if e["reason"] == "FailedScheduling"]
    assert event["note"] == (
        f"0/1 nodes are available: {MESSAGE}. "
        "preemption: 0/1 nodes are available: 1 Preemption is not helpful for scheduling."
    )
    [(name, patch)] = client.status_patches
    assert name == "claims"
    [condition] = patch["status"]["conditions"]
    assert (condition["type"], condition["status"], condition["reason"]) == ("PodScheduled", "False", "Unschedulable")


def test_a_profile_that_disables_it_binds_a_pod_with_claims() -> None:
    client = FakeClient()
    app = new_app(client)
    app.on_node_event(None, make_node("n1"))
    outcome = app.apply_profile(name="sp", spec=DISABLED, generation=1)
    assert "stand-ins" not in outcome.message
    app.on_pod_event("ADDED", pending("claims", spec=CLAIMS))
    drive(app)
    assert client.bindings == [("default", "claims", "n1")]


def test_a_pod_waits_for_its_claim_then_is_retried_when_the_claim_appears() -> None:
    client = FakeClient()
    app = new_app(client)
    app.on_node_event(None, make_node("n1"))
    app.apply_profile(name="sp", spec={}, generation=1)
    app.on_pod_event("ADDED", pending("claims", spec=CLAIMS))
    drive(app)
    assert client.events == []  # parked at PreEnqueue: no attempt, no event
    app.on_storage_event("ResourceClaim", "ADDED", CLAIM)
    drive(app)
    [event] = [e for e in client.events if e["reason"] == "FailedScheduling"]
    assert MESSAGE in event["note"]
    assert client.bindings == []
