"""DynamicResources' PreBind writes and binding conditions (plugins/dynamic_resources/binding.py) and the
scheduler-wide claim tracker (tracker.py), against the fake client: the order of the writes, conflicts,
upstream's error texts, and the in-flight/assumed bookkeeping."""

from __future__ import annotations

import asyncio
import copy
from typing import Any

import pytest

from kopf_scheduler.framework import APIError
from kopf_scheduler.plugins.dynamic_resources.binding import (
    FINALIZER,
    BindingFailed,
    BindingTimeout,
    bind_claim,
    claim_ready_for_binding,
    claim_timed_out,
    deallocation,
    is_reserved_for_pod,
    pod_reference,
    unreserve_patch,
    wait_for_binding_conditions,
)
from kopf_scheduler.plugins.dynamic_resources.tracker import ClaimTracker, tracker_for
from kopf_scheduler.state.cache import ClusterCache
from kopf_scheduler.state.objects import RESOURCE_CLAIM
from tests.unit.app_harness import FakeClient

ALLOCATION = {"devices": {"results": [{"request": "gpu", "driver": "d", "pool": "n1", "device": "g0"}]}}
REF = pod_reference("p", "pod-uid")


def claim(rv: str = "1", **status: Any) -> dict[str, Any]:
    return {
        "metadata": {"name": "c", "namespace": "default", "uid": "claim-uid", "resourceVersion": rv},
        "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": "gpu"}}]}},
        "status": dict(status),
    }


def run(coro: Any) -> Any:
    return asyncio.run(coro)


def test_allocation_adds_the_finalizer_first_then_writes_allocation_and_reservation_together() -> None:
    client = FakeClient()
    answer = run(bind_claim(client, claim(), ALLOCATION, REF, now=lambda: "2026-11-25T00:00:00Z"))
    verbs = [verb for verb, *_ in client.claim_writes]
    assert verbs == ["update-claim", "update"]
    first, second = client.claim_writes[0][3], client.claim_writes[1][3]
    assert FINALIZER in first["metadata"]["finalizers"]
    assert not first["status"].get("allocation")
    assert second["status"]["allocation"]["devices"] == ALLOCATION["devices"]
    assert second["status"]["allocation"]["allocationTimestamp"] == "2026-11-25T00:00:00Z"
    assert second["status"]["reservedFor"] == [REF]
    assert is_reserved_for_pod(answer, "pod-uid")


def test_an_allocated_claim_only_gets_the_reservation() -> None:
    client = FakeClient()
    allocated = claim(allocation=copy.deepcopy(ALLOCATION), reservedFor=[pod_reference("q", "other")])
    run(bind_claim(client, allocated, None, REF))
    assert [verb for verb, *_ in client.claim_writes] == ["update"]
    assert client.claim_writes[0][3]["status"]["reservedFor"] == [pod_reference("q", "other"), REF]


def test_a_conflict_rereads_the_claim_and_retries() -> None:
    client = FakeClient()
    fresh = claim(rv="7")
    fresh["metadata"]["finalizers"] = [FINALIZER]
    client.claims["default", "c"] = fresh
    client.claim_errors = [APIError(409, "conflict")]
    run(bind_claim(client, claim(), ALLOCATION, REF))
    # the finalizer update conflicted; the re-read claim has it already, so only the status write follows
    assert [verb for verb, *_ in client.claim_writes] == ["update"]
    assert client.claim_writes[0][3]["metadata"]["resourceVersion"] == "7"


@pytest.mark.parametrize(
    ("current", "message"),
    [
        pytest.param({"deletionTimestamp": "x"}, "claim default/c got deleted in the meantime", id="deleted"),
        pytest.param({"allocated": True}, "claim default/c got allocated elsewhere in the meantime", id="taken"),
    ],
)
def test_a_claim_changed_in_the_meantime_fails_with_upstreams_text(current: dict[str, Any], message: str) -> None:
    client = FakeClient()
    changed = claim(allocation=ALLOCATION) if current.get("allocated") else claim()
    if "deletionTimestamp" in current:
        changed["metadata"]["deletionTimestamp"] = "2026-11-25T00:00:00Z"
    with pytest.raises(RuntimeError, match=message):
        run(bind_claim(client, changed, ALLOCATION, REF))
    assert client.claim_writes == []


def test_a_non_conflict_error_names_the_write() -> None:
    client = FakeClient()
    client.claims["default", "c"] = claim()
    client.claim_errors = [APIError(403, "forbidden")]
    already = claim()
    already["metadata"]["finalizers"] = [FINALIZER]
    with pytest.raises(APIError, match="add allocation and reservation to claim default/c: forbidden"):
        run(bind_claim(client, already, ALLOCATION, REF))


def test_unreserve_patch_and_deallocation_are_upstreams() -> None:
    assert unreserve_patch("cu", "pu") == {
        "metadata": {"uid": "cu"},
        "status": {"reservedFor": [{"$patch": "delete", "uid": "pu"}]},
    }
    cleared = deallocation(claim(allocation=ALLOCATION, reservedFor=[REF], devices=[{"device": "g0"}]))
    assert cleared["status"] == {}


def _conditioned(conditions: list[dict[str, Any]] | None, stamp: str = "2026-11-25T00:00:00Z") -> dict[str, Any]:
    result = {**ALLOCATION["devices"]["results"][0], "bindingConditions": ["Attached"]}
    result["bindingFailureConditions"] = ["Failed"]
    status: dict[str, Any] = {"allocation": {"devices": {"results": [result]}, "allocationTimestamp": stamp}}
    if conditions is not None:
        status["devices"] = [{"driver": "d", "pool": "n1", "device": "g0", "conditions": conditions}]
    return claim(**status)


def test_binding_conditions_readiness_failure_and_timeout() -> None:
    assert not claim_ready_for_binding(_conditioned(None))
    assert not claim_ready_for_binding(_conditioned([{"type": "Attached", "status": "False"}]))
    assert claim_ready_for_binding(_conditioned([{"type": "Attached", "status": "True"}]))
    assert claim_ready_for_binding(claim(allocation=ALLOCATION))  # no binding conditions
    failed = _conditioned([{"type": "Failed", "status": "True", "reason": "R", "message": "m"}])
    with pytest.raises(BindingFailed, match='device binding failed: claim=c, reason=R, message="m"'):
        claim_ready_for_binding(failed)
    stamp = 1_700_000_000.0
    assert claim_timed_out(_conditioned(None, "2023-11-14T22:13:20Z"), 600, now=stamp + 601)
    assert not claim_timed_out(_conditioned(None, "2023-11-14T22:13:20Z"), 600, now=stamp + 599)


def test_waiting_for_binding_conditions_polls_until_ready_or_deadline() -> None:
    versions = [_conditioned(None, "2999-01-01T00:00:00Z"), _conditioned([{"type": "Attached", "status": "True"}])]
    slept: list[float] = []

    async def sleep(seconds: float) -> None:
        slept.append(seconds)

    run(wait_for_binding_conditions(lambda: [versions[min(len(slept), 1)]], 600, sleep=sleep, clock=lambda: 0.0))
    assert slept == [5.0]
    ticks = iter([0.0, 700.0])
    with pytest.raises(BindingTimeout):
        run(wait_for_binding_conditions(lambda: [versions[0]], 600, sleep=sleep, clock=lambda: next(ticks)))


# -- the tracker ---------------------------------------------------------------------------------------------
def test_in_flight_allocations_count_as_taken_until_removed() -> None:
    cache = ClusterCache()
    cache.objects.apply(RESOURCE_CLAIM, "ADDED", claim())
    tracker = tracker_for(cache)
    assert tracker is tracker_for(cache)  # one per scheduler
    assert tracker.allocated_claims() == []
    tracker.signal_pending_allocation("claim-uid", claim(allocation=ALLOCATION))
    assert tracker.pending_allocation("claim-uid") == ALLOCATION
    assert [c["status"]["allocation"] for c in tracker.allocated_claims()] == [ALLOCATION]
    assert tracker.remove_pending_allocation("claim-uid")
    assert not tracker.remove_pending_allocation("claim-uid")
    assert tracker.allocated_claims() == []


def test_an_assumed_claim_stands_until_the_watch_delivers_its_version() -> None:
    cache = ClusterCache()
    cache.objects.apply(RESOURCE_CLAIM, "ADDED", claim(rv="1"))
    tracker = ClaimTracker(lambda: cache.objects)
    written = claim(rv="2", allocation=ALLOCATION, reservedFor=[REF])
    assert tracker.assume_after_api_call(written)
    assert tracker.get("default", "c") is written
    assert len(tracker.allocated_claims()) == 1
    cache.objects.apply(RESOURCE_CLAIM, "MODIFIED", claim(rv="2", allocation=ALLOCATION, reservedFor=[REF]))
    assert tracker.get("default", "c") is not written
    assert not tracker.assume_after_api_call(claim(rv="2"))  # the watch has it already


def test_restore_drops_an_assumption() -> None:
    cache = ClusterCache()
    cache.objects.apply(RESOURCE_CLAIM, "ADDED", claim(rv="1"))
    tracker = ClaimTracker(lambda: cache.objects)
    tracker.assume_after_api_call(claim(rv="3", allocation=ALLOCATION))
    tracker.restore("default", "c")
    assert tracker.get("default", "c")["metadata"]["resourceVersion"] == "1"
