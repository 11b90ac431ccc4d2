"""The devices in use, kept claim by claim (allocator.AllocatedDevices, ClaimTracker.allocated_state).

The incremental count must always equal the walk over every claim that it replaces (upstream's
GatherAllocatedState over the allocated-devices index and the in-flight claims): these drive random watch
events, assumed versions and in-flight allocations, and compare the two after each step.
"""

from __future__ import annotations

import random
from typing import Any

import pytest

from kopf_scheduler.plugins.dynamic_resources.allocator import (
    AllocatedDevices,
    AllocatedState,
    allocated_state,
    claim_devices,
)
from kopf_scheduler.plugins.dynamic_resources.tracker import ClaimTracker, tracker_for
from kopf_scheduler.state.cache import ClusterCache
from kopf_scheduler.state.objects import RESOURCE_CLAIM

DRIVER = "gpu.example.com"


def _result(rng: random.Random) -> dict[str, Any]:
    result: dict[str, Any] = {"driver": DRIVER, "pool": f"n{rng.randrange(3)}", "device": f"gpu-{rng.randrange(4)}"}
    kind = rng.randrange(4)
    if kind == 1:
        result["adminAccess"] = True
    elif kind == 2:
        result["shareID"] = f"share-{rng.randrange(3)}"
    elif kind == 3:
        result["shareID"] = f"share-{rng.randrange(3)}"
        result["consumedCapacity"] = {"memory": f"{rng.randrange(1, 4)}Gi"}
    return result


def _claim(name: str, rv: int, rng: random.Random) -> dict[str, Any]:
    status: dict[str, Any] = {}
    if rng.random() < 0.7:
        status["allocation"] = {"devices": {"results": [_result(rng) for _ in range(rng.randrange(1, 3))]}}
    return {
        "metadata": {"name": name, "namespace": "default", "uid": f"uid-{name}", "resourceVersion": str(rv)},
        "spec": {},
        "status": status,
    }


def _walked(tracker: ClaimTracker) -> AllocatedState:
    return allocated_state(tracker.allocated_claims())


@pytest.mark.parametrize("seed", range(40))
def test_the_kept_count_equals_the_walk_over_every_claim(seed: int) -> None:
    rng = random.Random(seed)
    cache = ClusterCache()
    objects = cache.objects
    for name in ("a", "b"):  # claims stored before the tracker counts anything
        objects.apply(RESOURCE_CLAIM, "ADDED", _claim(name, 1, rng))
    tracker = tracker_for(cache)
    rv = 10
    for _ in range(60):
        rv += 1
        name = rng.choice("abcdef")
        step = rng.randrange(7)
        if step <= 1:
            objects.apply(RESOURCE_CLAIM, "MODIFIED", _claim(name, rv, rng))
        elif step == 2:
            watched = objects.get(RESOURCE_CLAIM, name, "default")
            if watched is not None:
                objects.apply(RESOURCE_CLAIM, "DELETED", watched)
        elif step == 3:
            tracker.assume_after_api_call(_claim(name, rv, rng))
        elif step == 4:
            tracker.restore("default", name)
        elif step == 5:
            tracker.get("default", name)  # may drop an assumed version the watch caught up with
        elif rng.random() < 0.5:
            tracker.signal_pending_allocation(f"uid-{name}", _claim(name, rv, rng))
        else:
            tracker.remove_pending_allocation(f"uid-{name}")
        assert tracker.allocated_state() == _walked(tracker)
        if rng.random() < 0.1:
            objects.remove(RESOURCE_CLAIM, ("default", name))  # the reconciling LIST drops it
            assert tracker.allocated_state() == _walked(tracker)


def test_a_state_handed_out_is_a_copy() -> None:
    rng = random.Random(1)
    cache = ClusterCache()
    claim = _claim("a", 1, rng)
    claim["status"] = {"allocation": {"devices": {"results": [{"driver": DRIVER, "pool": "n1", "device": "g"}]}}}
    cache.objects.apply(RESOURCE_CLAIM, "ADDED", claim)
    tracker = tracker_for(cache)
    handed = tracker.allocated_state()
    handed.devices.add((DRIVER, "n1", "other"))
    cache.objects.apply(RESOURCE_CLAIM, "DELETED", claim)
    assert handed.devices == {(DRIVER, "n1", "g"), (DRIVER, "n1", "other")}
    assert tracker.allocated_state().devices == set()


def test_a_device_two_claims_name_stays_taken_until_both_let_go() -> None:
    held = claim_devices(
        {"status": {"allocation": {"devices": {"results": [{"driver": DRIVER, "pool": "p", "device": "d"}]}}}}
    )
    assert held is not None
    devices = AllocatedDevices()
    devices.add(held)
    devices.add(held)
    devices.remove(held)
    assert devices.state().devices == {(DRIVER, "p", "d")}
    devices.remove(held)
    assert devices.state() == AllocatedState()


def test_a_claim_without_allocation_or_with_admin_access_only_holds_nothing() -> None:
    assert claim_devices({"status": {}}) is None
    admin = {"driver": DRIVER, "pool": "p", "device": "d", "adminAccess": True}
    assert claim_devices({"status": {"allocation": {"devices": {"results": [admin]}}}}) is None
