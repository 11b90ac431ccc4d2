"""DynamicResources' binding cycle: PreBind writes each claim's allocation and the pod's reservation, then
waits for the devices' binding conditions (upstream ``dynamicresources.go``: ``bindClaim``,
``isClaimReadyForBinding``, ``isClaimTimeout``, ``isPodReadyForBinding``).

The writes restate upstream's order, which is what keeps a claim from ending up half-claimed:

1. the ``resource.kubernetes.io/delete-protection`` finalizer is added in a normal update (only when the claim
   is being allocated; a retry after an interruption finds it there and goes on);
2. one status update writes ``status.allocation`` and appends the pod to ``status.reservedFor`` together
   (with ``allocationTimestamp``, as DRADeviceBindingConditions is on in 1.36), so no claim is ever allocated
   for a pod without being reserved for it by the same write;
3. a 409 conflict re-reads the claim and tries again (client-go's ``retry.DefaultRetry``: 5 attempts); a
   claim deleted, or allocated by someone else, in the meantime fails the pod's PreBind.

A failed PreBind makes the runtime call Unreserve, which takes the pod out of ``reservedFor`` again (a
strategic-merge patch) and drops the in-flight allocation: a claim reserved for no pod is deallocated by the
resourceclaim controller, and the pod goes back to the queue.
"""

from __future__ import annotations

import asyncio
import copy
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from kopf_scheduler.framework import APIClient, APIError

Claim = dict[str, Any]

#: The finalizer a scheduler-allocated claim carries (upstream ``resourceapi.Finalizer``).
FINALIZER = "resource.kubernetes.io/delete-protection"
#: client-go's ``retry.DefaultRetry``: attempts of an update that ran into a conflict.
CONFLICT_ATTEMPTS = 5
#: How often PreBind re-reads the claims while waiting for binding conditions (upstream: 5 s).
BINDING_POLL_SECONDS = 5.0


class BindingFailed(Exception):
    """A device's binding failure condition is true (upstream ``ErrDeviceBindingFailed``)."""


class BindingTimeout(Exception):
    """Binding conditions not met within ``bindingTimeout`` (upstream ``ErrDeviceBindingTimeout``)."""


def claim_key(claim: Claim) -> str:
    """``namespace/name``, as upstream's ``klog.KObj`` prints a claim."""
    meta = claim.get("metadata") or {}
    return f"{meta.get('namespace') or ''}/{meta.get('name') or ''}"


def pod_reference(pod_name: str, pod_uid: str) -> dict[str, str]:
    """The ``reservedFor`` entry of a pod (upstream ``ResourceClaimConsumerReference``)."""
    return {"resource": "pods", "name": pod_name, "uid": pod_uid}


def is_reserved_for_pod(claim: Claim, pod_uid: str) -> bool:
    """Upstream ``resourceclaim.IsReservedForPod``."""
    reserved = (claim.get("status") or {}).get("reservedFor") or ()
    return any(ref.get("resource") == "pods" and ref.get("uid") == pod_uid for ref in reserved)


def now_rfc3339() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


async def bind_claim(
    client: APIClient,
    claim: Claim,
    allocation: Mapping[str, Any] | None,
    reference: Mapping[str, str],
    *,
    now: Callable[[], str] = now_rfc3339,
) -> Claim:
    """Upstream ``bindClaim``: record ``allocation`` (None: the claim was allocated already) and reserve the
    claim for the pod; the claim the API server answered with. Raises with upstream's texts."""
    key = claim_key(claim)
    meta = claim.get("metadata") or {}
    namespace, name = meta.get("namespace") or "", meta.get("name") or ""
    current = copy.deepcopy(claim)
    for attempt in range(CONFLICT_ATTEMPTS):
        if attempt:
            current = await client.get_resource_claim(namespace=namespace, name=name)
        try:
            return await _try_bind(client, current, allocation, reference, key, now)
        except APIError as error:
            if error.status != 409 or attempt == CONFLICT_ATTEMPTS - 1:
                raise
    raise AssertionError("unreachable")


async def _try_bind(
    client: APIClient,
    claim: Claim,
    allocation: Mapping[str, Any] | None,
    reference: Mapping[str, str],
    key: str,
    now: Callable[[], str],
) -> Claim:
    meta = claim.setdefault("metadata", {})
    namespace, name = meta.get("namespace") or "", meta.get("name") or ""
    if meta.get("deletionTimestamp"):
        raise RuntimeError(f"claim {key} got deleted in the meantime")
    status = claim.setdefault("status", {})
    if allocation is not None:
        if status.get("allocation"):
            raise RuntimeError(f"claim {key} got allocated elsewhere in the meantime")
        if FINALIZER not in (meta.get("finalizers") or ()):
            meta["finalizers"] = [*(meta.get("finalizers") or ()), FINALIZER]
            claim = await _wrapped(
                client.update_resource_claim(namespace=namespace, name=name, claim=claim),
                f"add finalizer to claim {key}",
            )
            status = claim.setdefault("status", {})
        status["allocation"] = copy.deepcopy(dict(allocation))
    status["reservedFor"] = [*(status.get("reservedFor") or ()), dict(reference)]
    if not status.get("allocation"):
        raise RuntimeError(f"claim {key} got deallocated elsewhere in the meantime")
    status["allocation"].setdefault("allocationTimestamp", now())
    what = "add allocation and reservation to claim" if allocation is not None else "add reservation to claim"
    return await _wrapped(
        client.update_resource_claim_status(namespace=namespace, name=name, claim=claim), f"{what} {key}"
    )


async def _wrapped(call: Awaitable[Claim], context: str) -> Claim:
    """Upstream's ``fmt.Errorf("<context>: %w", err)``; a conflict stays an APIError so it is retried."""
    try:
        return await call
    except APIError as error:
        if error.status == 409:
            raise
        raise APIError(error.status, f"{context}: {error}") from error


def unreserve_patch(claim_uid: str, pod_uid: str) -> dict[str, Any]:
    """Upstream Unreserve's strategic-merge patch: drop the pod's entry from ``reservedFor``."""
    return {"metadata": {"uid": claim_uid}, "status": {"reservedFor": [{"$patch": "delete", "uid": pod_uid}]}}


def deallocation(claim: Claim) -> Claim:
    """Upstream PostFilter's deallocation: the claim without reservedFor, allocation and device statuses."""
    updated = copy.deepcopy(claim)
    status = updated.setdefault("status", {})
    for field in ("reservedFor", "allocation", "devices"):
        status.pop(field, None)
    return updated


# -- binding conditions ---------------------------------------------------------------------------------------
def has_binding_conditions(claims: list[Claim]) -> bool:
    """Upstream ``hasBindingConditions``: an allocated device that must become ready first."""
    return any(result.get("bindingConditions") for claim in claims for result in _results(claim))


def claim_ready_for_binding(claim: Claim) -> bool:
    """Upstream ``isClaimReadyForBinding``: every binding condition of every allocated device is true; a true
    binding failure condition raises :class:`BindingFailed` with upstream's text."""
    if not (claim.get("status") or {}).get("allocation"):
        return False
    name = (claim.get("metadata") or {}).get("name") or ""
    for result in _results(claim):
        if not result.get("bindingConditions"):
            continue
        device_status = _device_status(claim, result)
        if device_status is None:
            return False
        conditions = {c.get("type"): c for c in device_status.get("conditions") or ()}
        for failure in result.get("bindingFailureConditions") or ():
            condition = conditions.get(failure)
            if condition is not None and condition.get("status") == "True":
                raise BindingFailed(
                    f"device binding failed: claim={name}, reason={condition.get('reason', '')}, "
                    f'message="{condition.get("message", "")}"'
                )
        if any((conditions.get(wanted) or {}).get("status") != "True" for wanted in result["bindingConditions"]):
            return False
    return True


def claim_timed_out(claim: Claim, binding_timeout: float, *, now: float | None = None) -> bool:
    """Upstream ``isClaimTimeout``: a device with binding conditions, allocated longer ago than the timeout."""
    allocation = (claim.get("status") or {}).get("allocation") or {}
    stamp = allocation.get("allocationTimestamp")
    if not stamp or not any(result.get("bindingConditions") is not None for result in _results(claim)):
        return False
    allocated = datetime.strptime(stamp, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC).timestamp()
    return allocated + binding_timeout < (time.time() if now is None else now)


async def wait_for_binding_conditions(
    latest: Callable[[], list[Claim]],
    binding_timeout: float,
    *,
    sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    clock: Callable[[], float] = time.monotonic,
) -> None:
    """Upstream PreBind's wait: poll the claims (``latest`` reads the watched versions) every 5 s until all
    are ready, a failure condition is true, or ``binding_timeout`` passed."""
    deadline = clock() + binding_timeout
    while True:
        claims = latest()
        if all(_ready_or_timeout(claim, binding_timeout) for claim in claims):
            return
        if clock() >= deadline:
            raise BindingTimeout("device binding timeout: context deadline exceeded")
        await sleep(BINDING_POLL_SECONDS)


def _ready_or_timeout(claim: Claim, binding_timeout: float) -> bool:
    if claim_ready_for_binding(claim):
        return True
    if claim_timed_out(claim, binding_timeout):
        name = (claim.get("metadata") or {}).get("name") or ""
        raise BindingTimeout(f"device binding timeout: claim={name}")
    return False


def _results(claim: Claim) -> list[Mapping[str, Any]]:
    allocation = (claim.get("status") or {}).get("allocation") or {}
    return list((allocation.get("devices") or {}).get("results") or ())


def _device_status(claim: Claim, result: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """Upstream ``getAllocatedDeviceStatus``: the claim's status entry for the allocated device."""
    devices: Sequence[Mapping[str, Any]] = (claim.get("status") or {}).get("devices") or ()
    for device in devices:
        if (device.get("driver"), device.get("pool"), device.get("device")) == (
            result.get("driver"),
            result.get("pool"),
            result.get("device"),
        ):
            return device
    return None
