"""DynamicResources' cycle state: the pod's claims, the cycle's allocator, Filter's allocations by node and
Score's prioritized-list score computed from them.

Upstream counterpart: ``plugins/dynamicresources/dynamicresources.go`` (``stateData``, ``informationForClaim``,
``computeScore``); the node-by-node results are upstream's ``nodeAllocations``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from kopf_scheduler.plugins.dynamic_resources.allocator import Allocator
from kopf_scheduler.plugins.dynamic_resources.claims import Claim
from kopf_scheduler.plugins.dynamic_resources.extended import ExtendedRequests
from kopf_scheduler.state.node_affinity import NodeSelector
from kopf_scheduler.state.objects import ClusterObjects

STATE_KEY = "DynamicResources"
#: Upstream ``FirstAvailableDeviceRequestMaxSize``: the score of a prioritized list's first subrequest.
FIRST_AVAILABLE_MAX = 8


@dataclass(slots=True)
class ClaimEntry:
    """One of the pod's claims (upstream ``informationForClaim`` with its claim)."""

    claim: Claim
    #: Parsed ``status.allocation.nodeSelector`` of an allocated claim (None: any node).
    available_on: NodeSelector | None = None
    #: Set by Reserve for a claim the scheduler allocates.
    allocation: dict[str, Any] | None = None
    #: The scheduler's own claim for DRA-backed extended resources (always the last entry).
    extended: bool = False

    @property
    def allocated(self) -> bool:
        return bool((self.claim.get("status") or {}).get("allocation"))


@dataclass(slots=True)
class StateData:
    """Upstream ``stateData``: the pod's claims, the allocator, and Filter's results by node."""

    entries: list[ClaimEntry] = field(default_factory=list)
    allocator: Allocator | None = None
    #: Indexes of allocated claims some node could not offer (PostFilter may deallocate one).
    unavailable: set[int] = field(default_factory=set)
    #: Node name → allocation results for the claims to allocate, in their order.
    #: (Built when called: a kept search's results are built only for the nodes that need them.)
    node_allocations: dict[str, Callable[[], list[dict[str, Any]]]] = field(default_factory=dict)
    #: The pod's DRA-backed extended resources (None: it requests none); its claim is the last entry.
    extended: ExtendedRequests | None = None
    #: The DeviceClasses (and the rest) PreFilter saw, for Filter's per-node extended-resource requests.
    objects: ClusterObjects | None = None
    #: Filter's claims to allocate when no node variant replaces the extended-resource claim (see pending_claims).
    pending: list[Claim] | None = None

    def pending_claims(self, variant: Claim | None) -> list[Claim]:
        """The claims Filter allocates on a node: those not allocated, the extended-resource claim as the
        node's ``variant`` (read once per cycle when there is no variant)."""
        if variant is None:
            if self.pending is None:
                self.pending = [entry.claim for _, entry in self.to_allocate()]
            return self.pending
        return [variant if entry.extended else entry.claim for _, entry in self.to_allocate()]

    def to_allocate(self) -> list[tuple[int, ClaimEntry]]:
        return [(index, entry) for index, entry in enumerate(self.entries) if not entry.allocated]

    def user_entries(self) -> list[ClaimEntry]:
        """Upstream ``allUserClaims``: the pod's own claims, without the scheduler's extended-resource one."""
        return self.entries[:-1] if self.extended is not None else self.entries

    def extended_entry(self) -> ClaimEntry | None:
        """Upstream ``extendedResourceClaim``: the scheduler's claim, if the pod has one."""
        return self.entries[-1] if self.extended is not None else None


EMPTY = StateData()


def has_prioritized_list(claim: Claim) -> bool:
    return any(
        request.get("firstAvailable")
        for request in ((claim.get("spec") or {}).get("devices") or {}).get("requests") or ()
    )


def prioritized_list_score(data: StateData, results: list[dict[str, Any]]) -> int:
    """Upstream ``computeScore``: for every subrequest allocated, ``8 - its index`` in its ``firstAvailable``."""
    score = 0
    new_results = iter(results)
    for entry in data.entries:
        allocation = (entry.claim.get("status") or {}).get("allocation") or next(new_results, None) or {}
        allocated = {
            result.get("request")
            for result in (allocation.get("devices") or {}).get("results") or ()
            if "/" in (result.get("request") or "")
        }
        for request in ((entry.claim.get("spec") or {}).get("devices") or {}).get("requests") or ():
            for index, sub in enumerate(request.get("firstAvailable") or ()):
                if f"{request.get('name', '')}/{sub.get('name', '')}" in allocated:
                    score += FIRST_AVAILABLE_MAX - index
    return score
