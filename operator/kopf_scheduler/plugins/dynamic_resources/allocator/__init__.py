"""The structured-parameters device allocator behind DynamicResources.

Upstream counterpart: ``k8s.io/dynamic-resource-allocation@v0.36.3/structured``. ``allocator.go`` picks one of
three implementations by the feature set the scheduler passes (``dynamicresources.go`` builds it from
``plugins/feature``). With the gates on by default in 1.36 (DRAAdminAccess, DRAPrioritizedList,
DRAPartitionableDevices, DRADeviceTaints, DRAConsumableCapacity, and DRADeviceBindingConditions with
DRAResourceClaimDeviceStatus, both beta and on in 1.36's kube_features.go; DRAListTypeAttributes is never passed)
"stable" is too small (no ConsumableCapacity) and "incubating" is chosen. This package restates that variant,
a module per upstream file or concern:

* ``common``: limits, device identities, errors, ``Features`` and the CEL selector interface (``allocator.go``);
* ``allocated``: the devices in use (the scheduler's ``allocateddevices.go``, ``GatherAllocatedState``);
* ``pools``: ``GatherPools`` (``pools_incubating.go``): newest pool generation, incomplete and invalid pools,
  pool and slice order;
* ``requests``, ``constraints``, ``taints``, ``consumable_capacity``: what the search checks per device
  (``allocator_incubating.go``, ``constraint.go``, ``consumable_capacity.go``);
* ``slice_index``: each node's pools, candidates and finished searches, kept between cycles;
* ``incubating``: :class:`Allocator`, built once per scheduling cycle; ``allocation``: one ``Allocate`` call
  (``allocateOne``, ``allocateDevice``, counters); ``results``: the result's node selector and configs.

Objects are the API's JSON dicts (resource.k8s.io/v1). The search order is upstream's, because the conformance
suite compares the chosen devices: pools sorted by (driver, pool), pools with binding conditions last, slices of
a pool sorted by name, devices in slice order; the first full solution wins (depth-first, combinations within a
request, backtracking across requests and claims). CEL selectors are evaluated through :class:`SelectorCompiler`
so the allocator stays I/O-free and independent of the CEL implementation.
"""

from kopf_scheduler.plugins.dynamic_resources.allocator.allocated import (
    AllocatedDevices,
    AllocatedState,
    ClaimDevices,
    allocated_state,
    claim_devices,
)
from kopf_scheduler.plugins.dynamic_resources.allocator.common import (
    ALLOCATION_RESULTS_MAX_SIZE,
    AllocationError,
    AllocationTimeout,
    CompiledSelectorLike,
    DeviceID,
    Features,
    NodeAllocationError,
    SelectorCompiler,
    SharedDeviceID,
)
from kopf_scheduler.plugins.dynamic_resources.allocator.consumable_capacity import (
    consumed_capacity,
    request_fits_capacity,
)
from kopf_scheduler.plugins.dynamic_resources.allocator.incubating import Allocator
from kopf_scheduler.plugins.dynamic_resources.allocator.pools import Pool, gather_pools, node_matches
from kopf_scheduler.plugins.dynamic_resources.allocator.slice_index import SliceIndex
from kopf_scheduler.plugins.dynamic_resources.allocator.taints import taint_prevents_allocation

__all__ = [
    "ALLOCATION_RESULTS_MAX_SIZE",
    "AllocatedDevices",
    "AllocatedState",
    "AllocationError",
    "AllocationTimeout",
    "Allocator",
    "ClaimDevices",
    "CompiledSelectorLike",
    "DeviceID",
    "Features",
    "NodeAllocationError",
    "Pool",
    "SelectorCompiler",
    "SharedDeviceID",
    "SliceIndex",
    "allocated_state",
    "claim_devices",
    "consumed_capacity",
    "gather_pools",
    "node_matches",
    "request_fits_capacity",
    "taint_prevents_allocation",
]
