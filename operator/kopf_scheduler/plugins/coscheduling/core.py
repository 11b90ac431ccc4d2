"""Coscheduling's PodGroup manager (scheduler-plugins v0.34.7 ``pkg/coscheduling/core``), on the cache's groups.

scheduler-plugins keeps its own bookkeeping beside the scheduler: a pod lister for a group's pods, a set of
"assigned" pod names per group, and three small caches. Here the group's pods are the cache's Coscheduling group
state (``cache.coscheduling_groups``, the machinery of the workload-aware path: every pending pod of a live
profile carrying the ``scheduling.x-k8s.io/pod-group`` label, plus the group's assumed and bound pods), and what
stays is what only this plugin knows:

- the groups that passed the minResources check (``permittedPG``: skipped for ``permitWaitingTimeSeconds``),
- the groups backed off after a failure (``backedOffPG``: refused at PreFilter for ``podGroupBackoffSeconds``),
- when each group last failed (``lastFailedSchedulePG``: QueueSort then orders it by that time instead of its
  creation, so a failing group does not block the head of the queue).

:func:`check_cluster_resource` restates ``CheckClusterResource`` with Go's quantity arithmetic and printing
(``go_quantity.py``), so that the "resource gap" message reads as scheduler-plugins' does.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable, Iterable, Mapping
from datetime import datetime
from typing import Any

from kopf_scheduler.plugins.coscheduling.go_quantity import BINARY_SI, DECIMAL_SI, GoQuantity, go_map
from kopf_scheduler.state.cache import ClusterCache, NodeInfo
from kopf_scheduler.state.pod_group_state import PodGroupState, PodGroupStateNotFound
from kopf_scheduler.state.pod_info import PodInfo

#: The row of ``watched.py`` (and the ``cache.objects`` kind) of scheduler-plugins' PodGroup.
KIND = "CoschedulingPodGroup"
#: scheduler-plugins' ``util.DefaultWaitTime``: Permit's wait when neither the PodGroup nor the args set one.
DEFAULT_WAIT_SECONDS = 60.0
#: go-cache's default expiration of ``permittedPG`` (what an entry added with a zero TTL gets).
PERMITTED_DEFAULT_TTL = 3.0

_NODE_RESOURCES = ("cpu", "memory", "pods", "ephemeral-storage")


def full_name(pod: PodInfo) -> str:
    """``namespace/label`` (scheduler-plugins' ``GetPodGroupFullName``); "" for a pod of no group."""
    group = pod.coscheduling_group
    return "" if group is None else f"{pod.namespace}/{group}"


def min_member(pod_group: Mapping[str, Any]) -> int:
    return int((pod_group.get("spec") or {}).get("minMember") or 0)


def min_resources(pod_group: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """``spec.minResources``; None where unset (an empty map is set: only the pods count is then checked)."""
    return (pod_group.get("spec") or {}).get("minResources")


def wait_seconds(pod_group: Mapping[str, Any] | None, permit_waiting_seconds: float) -> float:
    """scheduler-plugins' ``GetWaitTimeDuration``: the PodGroup's ``scheduleTimeoutSeconds`` if set, else the args'
    ``permitWaitingTimeSeconds`` if not zero, else 60 s."""
    timeout = None if pod_group is None else (pod_group.get("spec") or {}).get("scheduleTimeoutSeconds")
    if timeout is not None:
        return float(timeout)
    return permit_waiting_seconds or DEFAULT_WAIT_SECONDS


@functools.lru_cache(maxsize=4096)
def parse_timestamp(value: str) -> float | None:
    """A ``metav1.Time`` (RFC 3339) as seconds since the epoch; None if absent or malformed."""
    try:
        return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


class PodGroupManager:
    """What Coscheduling keeps per profile beside the cache (upstream ``PodGroupManager``)."""

    def __init__(
        self,
        cache: Callable[[], ClusterCache],
        permit_waiting_seconds: float,
        *,
        clock: Callable[[], float] = time.monotonic,
        wall_clock: Callable[[], float] = time.time,
    ) -> None:
        self._cache = cache
        self._permit_waiting = permit_waiting_seconds
        self._clock = clock
        self._wall_clock = wall_clock
        #: full name → when its entry expires (``clock``).
        self._permitted: dict[str, float] = {}
        self._backed_off: dict[str, float] = {}
        #: full name → when it last failed (``wall_clock``).
        self._last_failure: dict[str, float] = {}

    # -- the group of a pod ----------------------------------------------------------------------------------
    def pod_group(self, pod: PodInfo) -> tuple[str, Mapping[str, Any] | None]:
        """(full name, PodGroup) of the pod's group (upstream ``GetPodGroup``): ("", None) without the label,
        (full name, None) when its PodGroup is not (or no longer) there."""
        group = pod.coscheduling_group
        if group is None:
            return "", None
        found = self._cache().objects.get(KIND, group, pod.namespace)
        return f"{pod.namespace}/{group}", found

    def group_state(self, pod: PodInfo) -> PodGroupState | None:
        """The cache's state of the pod's group (its members), None if it holds no member."""
        key = pod.coscheduling_group_key
        if key is None:
            return None
        try:
            return self._cache().coscheduling_groups.get(*key)
        except PodGroupStateNotFound:
            return None

    def group_pods(self, pod: PodInfo) -> list[PodInfo]:
        """Every pod of the pod's group the scheduler knows (upstream lists them by label)."""
        state = self.group_state(pod)
        return [] if state is None else list(state.all_pods.values())

    def assigned_count(self, pod: PodInfo) -> int:
        """Members assumed or bound (upstream ``GetAssignedPodCount``)."""
        state = self.group_state(pod)
        return 0 if state is None else state.scheduled_pods_count()

    # -- the small caches ------------------------------------------------------------------------------------
    def _alive(self, entries: dict[str, float], name: str) -> bool:
        expiry = entries.get(name)
        if expiry is None:
            return False
        if expiry <= self._clock():
            del entries[name]
            return False
        return True

    def backoff(self, name: str, seconds: float) -> None:
        """Refuse the group at PreFilter for ``seconds`` (upstream ``BackoffPodGroup``; 0 does nothing)."""
        if seconds > 0:
            self._backed_off[name] = self._clock() + seconds

    def backed_off(self, name: str) -> bool:
        return self._alive(self._backed_off, name)

    def backed_off_for(self, name: str) -> float:
        """Seconds of backoff left (0 when none), for explain."""
        return max(0.0, self._backed_off.get(name, 0.0) - self._clock()) if self.backed_off(name) else 0.0

    def permit(self, name: str) -> None:
        """The group passed the minResources check: skip it for ``permitWaitingTimeSeconds`` (go-cache's 3 s
        default where that is 0)."""
        self._permitted[name] = self._clock() + (self._permit_waiting or PERMITTED_DEFAULT_TTL)

    def permitted(self, name: str) -> bool:
        return self._alive(self._permitted, name)

    def delete_permitted(self, name: str) -> None:
        self._permitted.pop(name, None)

    def mark_failure(self, name: str) -> None:
        self._last_failure[name] = self._wall_clock()

    def clear_failure(self, name: str) -> None:
        self._last_failure.pop(name, None)

    def last_failure(self, name: str) -> float | None:
        return self._last_failure.get(name)

    def group_time(self, namespace: str, group: str) -> float | None:
        """Upstream ``GetCreationTimestamp`` for a pod of ``group``: the group's last failure, else its PodGroup's
        creation (wall-clock seconds); None when neither is known (QueueSort then takes the pod's own time)."""
        if self._last_failure:  # nearly always empty: no key built on QueueSort's every comparison
            failed = self._last_failure.get(f"{namespace}/{group}")
            if failed is not None:
                return failed
        found = self._cache().objects.get(KIND, group, namespace)
        if found is None:
            return None
        return parse_timestamp((found.get("metadata") or {}).get("creationTimestamp") or "")

    # -- PreFilter -------------------------------------------------------------------------------------------
    def pre_filter(self, pod: PodInfo, nodes: Iterable[NodeInfo]) -> str | None:
        """Upstream ``PodGroupManager.PreFilter``: None if the pod may go on, else the error text."""
        name, pod_group = self.pod_group(pod)
        if pod_group is None:
            return None
        if self.backed_off(name):
            return f"podGroup {name} failed recently"
        pods = self.group_pods(pod)
        wanted = min_member(pod_group)
        gap = wanted - len(pods)
        if gap > 0:
            return (
                f"pre-filter pod {pod.name} cannot find enough sibling pods, "
                f"current pods number: {len(pods)}, minMember of group: {wanted}"
            )
        for member in pods:  # gated pods count against the surplus over minMember
            if member.scheduling_gates:
                gap += 1
            if gap > 0:
                return f"pre-filter pod {pod.name} cannot proceed due to gated pods in the same PodGroup"
        resources = min_resources(pod_group)
        if resources is None or self.permitted(name):
            return None
        error = check_cluster_resource(nodes, {**resources, "pods": wanted}, name)
        if error is None:
            self.permit(name)
        return error


def check_cluster_resource(nodes: Iterable[NodeInfo], request: Mapping[str, Any], group: str) -> str | None:
    """Upstream ``CheckClusterResource``: take each node's free resources (the group's own pods not counted) off
    ``request`` until nothing is left; the gap that remains after every node is the error."""
    wanted = {name: GoQuantity.parse(value) for name, value in request.items() if name != "pods"}
    if "pods" in request:
        wanted["pods"] = GoQuantity.of(int(request["pods"]), DECIMAL_SI)
    for node in nodes:
        free = node_free_resources(node, group)
        for name in list(wanted):
            quantity = wanted[name]
            quantity.sub(free.get(name) or GoQuantity())
            if quantity.sign() <= 0:
                del wanted[name]
        if not wanted:
            return None
    return f"resource gap: {go_map(wanted)}"


def node_free_resources(node: NodeInfo, group: str) -> dict[str, GoQuantity]:
    """Upstream ``getNodeResource`` as ``util.ResourceList`` shapes it: allocatable less what the node's pods
    request, with the pods of ``group`` taken off first; the pod count left; hugepages binary, other scalars
    decimal."""
    pods = [pod for pod in node.pods.values() if full_name(pod) != group]
    requested: dict[str, int] = {}
    for pod in pods:
        for name, amount in pod.requests.items():
            requested[name] = requested.get(name, 0) + amount
    allocatable = node.allocatable
    free = {
        "cpu": GoQuantity.of(allocatable.get("cpu", 0) - requested.get("cpu", 0), DECIMAL_SI, milli=True),
        "memory": GoQuantity.of(allocatable.get("memory", 0) - requested.get("memory", 0), BINARY_SI),
        "pods": GoQuantity.of(allocatable.get("pods", 0) - len(pods), BINARY_SI),
        "ephemeral-storage": GoQuantity.of(
            allocatable.get("ephemeral-storage", 0) - requested.get("ephemeral-storage", 0), BINARY_SI
        ),
    }
    for name, amount in allocatable.items():
        if name not in _NODE_RESOURCES:
            format_ = BINARY_SI if name.startswith("hugepages-") else DECIMAL_SI
            free[name] = GoQuantity.of(amount - requested.get(name, 0), format_)
    return free


__all__ = [
    "DEFAULT_WAIT_SECONDS",
    "KIND",
    "PodGroupManager",
    "check_cluster_resource",
    "full_name",
    "min_member",
    "min_resources",
    "node_free_resources",
    "parse_timestamp",
    "wait_seconds",
]
