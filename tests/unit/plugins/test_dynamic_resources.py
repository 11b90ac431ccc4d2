"""DynamicResources stand-in: pods with ResourceClaims stay Pending with a clear reason, never bound blind;
pods without claims are skipped; a profile that disables it binds them (design.md "Never bind blind")."""

from __future__ import annotations

from typing import Any

import pytest

from kopf_scheduler.api.profile import SchedulerProfileSpec
from kopf_scheduler.framework import Code, CycleState
from kopf_scheduler.framework.builder import ProfileError, resolve_profile
from kopf_scheduler.framework.extension_points import ExtensionPoint
from kopf_scheduler.framework.registry import default_registry
from kopf_scheduler.plugins.dynamic_resources import NOT_IMPLEMENTED, DynamicResources
from kopf_scheduler.profiles import pipeline_status
from kopf_scheduler.state.cache import ClusterCache
from tests.unit.app_harness import FakeClient, drive, new_app, pending
from tests.unit.factories import FakeHandle, make_node, make_pod, pod_info

CLAIMS = {"resourceClaims": [{"name": "gpu", "resourceClaimName": "my-gpu"}]}
MESSAGE = (
    "pod uses ResourceClaims: DynamicResources is not implemented by kopf-scheduler yet; "
    "disable it in the profile to bind such pods without device allocation"
)
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


def test_no_event_can_undo_the_refusal() -> None:
    """spec.resourceClaims is immutable: only a profile change (a wildcard move) or the periodic flush retries."""
    assert DynamicResources(handle=FakeHandle()).events_to_register() == []


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
