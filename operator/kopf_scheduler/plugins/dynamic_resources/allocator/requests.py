"""A claim's requests as the search reads them, the candidate devices and the results it records.

Upstream counterpart: ``structured/internal/incubating/allocator_incubating.go`` (``requestAccessor``,
``deviceWithID``, ``requestData``, ``internalDeviceResult``) and the claim accessors it uses.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from kopf_scheduler.plugins.dynamic_resources.allocator.common import EXACT_COUNT, DeviceID, spec_of
from kopf_scheduler.plugins.dynamic_resources.allocator.pools import Pool


@dataclass(frozen=True)
class Request:
    """A request's ``exactly`` or one ``firstAvailable`` subrequest (upstream ``requestAccessor``), read once:
    the search consults these fields for every candidate device."""

    name: str
    spec: Mapping[str, Any]
    subrequest: bool
    device_class_name: str
    allocation_mode: str
    count: int
    admin_access: bool
    has_admin_access: bool
    selectors: tuple[Mapping[str, Any], ...]
    tolerations: tuple[Mapping[str, Any], ...]
    capacity_requests: Mapping[str, Any] | None

    @classmethod
    def of(cls, name: str, spec: Mapping[str, Any], *, subrequest: bool) -> Request:
        count = spec.get("count")
        admin = None if subrequest else spec.get("adminAccess")  # subrequests have no adminAccess
        return cls(
            name=name,
            spec=spec,
            subrequest=subrequest,
            device_class_name=spec.get("deviceClassName") or "",
            allocation_mode=spec.get("allocationMode") or EXACT_COUNT,
            count=1 if count is None else int(count),
            admin_access=bool(admin),
            has_admin_access=admin is not None,
            selectors=tuple(spec.get("selectors") or ()),
            tolerations=tuple(spec.get("tolerations") or ()),
            capacity_requests=(spec.get("capacity") or {}).get("requests"),
        )


@dataclass(frozen=True)
class Candidate:
    """A device with where it comes from (upstream ``deviceWithID``).

    ``verdicts`` keeps each CEL selector's outcome on this device by expression (True, False or the
    evaluation error): a selector sees only the driver and the device, and a candidate lives only as long as
    the slices it was built from (:class:`SliceIndex`), so the outcome holds for every later pod."""

    id: DeviceID
    device: Mapping[str, Any]
    slice: Mapping[str, Any]
    pool: Pool
    verdicts: dict[str, bool | Exception] = field(default_factory=dict, compare=False, repr=False)


@dataclass
class RequestData:
    request: Request
    parent: Request | None
    device_class: Mapping[str, Any] | None = None
    num_devices: int = 0
    selected_subrequest: int = 0
    all_devices: list[Candidate] = field(default_factory=list)

    @property
    def name(self) -> str:
        return f"{self.parent.name}/{self.request.name}" if self.parent else self.request.name


@dataclass
class DeviceResult:
    request: Request
    parent: Request | None
    candidate: Candidate
    admin_access: bool | None = None
    share_id: str | None = None
    consumed_capacity: dict[str, Any] | None = None

    @property
    def request_name(self) -> str:
        return f"{self.parent.name}/{self.request.name}" if self.parent else self.request.name


RequestKey = tuple[int, int, int]  # claim, request, subrequest index


def claim_ref(claim: Mapping[str, Any]) -> str:
    meta = claim.get("metadata") or {}
    return f"{meta['namespace']}/{meta.get('name', '')}" if meta.get("namespace") else meta.get("name", "")


def claim_spec_devices(claim: Mapping[str, Any]) -> Mapping[str, Any]:
    return spec_of(claim).get("devices") or {}


def claim_requests(claim: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    return list(claim_spec_devices(claim).get("requests") or ())


def read_request(raw: Mapping[str, Any]) -> Request:
    return Request.of(raw.get("name", ""), raw.get("exactly") or {}, subrequest=False)


def request_class_names(raw: Mapping[str, Any]) -> list[str]:
    """The DeviceClasses a claim's request names (its ``exactly`` or its subrequests)."""
    if raw.get("exactly") is not None:
        return [(raw["exactly"] or {}).get("deviceClassName") or ""]
    return [sub.get("deviceClassName") or "" for sub in raw.get("firstAvailable") or ()]


def read_subrequests(raw: Mapping[str, Any]) -> list[Request]:
    return [Request.of(sub.get("name", ""), sub, subrequest=True) for sub in raw.get("firstAvailable") or ()]
