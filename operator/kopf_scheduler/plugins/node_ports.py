"""NodePorts: a pod asking for host ports only fits nodes where those ports are free (§2.7).

Upstream ``plugins/nodeports``, v1.36. The wanted ports are the ``hostPort > 0`` ports of the regular
containers and of restartable (sidecar) init containers, with protocol defaulting to TCP and host IP to
0.0.0.0 (:attr:`PodInfo.host_ports`). PreFilter is skipped for pods without any. A wanted port conflicts
with a port in use on the node when protocol and port are equal and either IP is 0.0.0.0 or both IPs are
equal; such nodes fail with Unschedulable (preemption may free the port).

Most nodes use no host port at all, and a wanted port can only clash with the same (protocol, port), so
instead of visiting every candidate's NodeInfo the Filter looks the wanted ports up in the cache's
``host_port_users`` index, kept in step with ``NodeInfo.used_ports`` by the cache (bound, assumed and, during
the nominated-pods pass, temporarily assumed pods alike), and marks the few nodes it names.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np

from kopf_scheduler.framework import (
    QUEUE,
    QUEUE_SKIP,
    SUCCESS,
    ActionType,
    ClusterEvent,
    ClusterEventWithHint,
    CycleState,
    EventResource,
    FilterPlugin,
    FilterResult,
    PreFilterPlugin,
    QueueingHint,
    Status,
    as_pod,
    is_assigned_or_nominated,
)
from kopf_scheduler.framework.interface import PreFilterResult

if TYPE_CHECKING:
    from kopf_scheduler.state.cache import Snapshot
    from kopf_scheduler.state.pod_info import HostPort, PodInfo

NAME = "NodePorts"
ERR_REASON = "node(s) didn't have free ports for the requested pod ports"
PRE_FILTER_STATE_KEY = "PreFilter" + NAME

#: The wildcard host IP (upstream ``DefaultBindAllHostIP``).
BIND_ALL_HOST_IP = "0.0.0.0"


def conflicting_slots(snapshot: Snapshot, wanted: tuple[HostPort, ...]) -> np.ndarray:
    """Slots (int64, possibly repeated) of the nodes where one of ``wanted`` is in use (``CheckConflict``)."""
    index = snapshot.cache.host_port_users
    found: list[np.ndarray] = []
    for port in wanted:
        users = index.get((port.protocol, port.port))
        if not users:
            continue
        if port.host_ip == BIND_ALL_HOST_IP:
            # Wanting every address clashes with the port on any address.
            found.append(np.fromiter(users, dtype=np.int64, count=len(users)))
        else:
            clashing = [slot for slot, ips in users.items() if port.host_ip in ips or BIND_ALL_HOST_IP in ips]
            found.append(np.asarray(clashing, dtype=np.int64))
    return np.concatenate(found) if found else np.zeros(0, dtype=np.int64)


class NodePorts(PreFilterPlugin, FilterPlugin):
    name: ClassVar[str] = NAME

    _rejection = Status.unschedulable(ERR_REASON, plugin=NAME)

    def pre_filter(self, state: CycleState, pod: PodInfo, snapshot: Snapshot) -> tuple[PreFilterResult | None, Status]:
        if not pod.host_ports:
            return None, Status.skip(plugin=NAME)
        state.write(PRE_FILTER_STATE_KEY, pod.host_ports)
        return None, SUCCESS

    def filter(self, state: CycleState, pod: PodInfo, nodes: np.ndarray, snapshot: Snapshot) -> FilterResult | None:
        # Upstream returns an Error status when PreFilter did not run; read() raises likewise.
        wanted: tuple[HostPort, ...] = state.read(PRE_FILTER_STATE_KEY)
        slots = conflicting_slots(snapshot, wanted)
        if not len(slots):
            return None
        # Mark the clashing slots in a table-wide mask and gather it for the candidates (cheaper than isin).
        clashes = np.zeros(snapshot.table.capacity, dtype=bool)
        clashes[slots] = True
        rejected = clashes[nodes]
        if not rejected.any():
            return None
        return FilterResult.uniform(rejected, self._rejection)

    # -- EnqueueExtensions --------------------------------------------------------------------------------
    def events_to_register(self) -> list[ClusterEventWithHint]:
        return [
            ClusterEventWithHint(ClusterEvent(EventResource.POD, ActionType.DELETE), is_schedulable_after_pod_deleted),
            ClusterEventWithHint(ClusterEvent(EventResource.NODE, ActionType.ADD)),
        ]


def is_schedulable_after_pod_deleted(pod: PodInfo, old: Any, new: Any) -> QueueingHint:
    """A bound (or nominated) pod holding a host port the rejected pod wants went away."""
    deleted = as_pod(old)
    if deleted is None:
        raise ValueError("pod delete hint called without the deleted pod")
    if not is_assigned_or_nominated(deleted) or not deleted.host_ports:
        return QUEUE_SKIP
    conflict = any(want.conflicts_with(used) for want in pod.host_ports for used in deleted.host_ports)
    return QUEUE if conflict else QUEUE_SKIP
