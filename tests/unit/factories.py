"""Builders for nodes, pods and caches in unit tests: API-shaped dicts, so tests read like manifests."""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from typing import Any

import numpy as np

from kopf_scheduler.framework import ClusterEvent, ClusterEventWithHint, CycleState, Plugin, QueueingHintFn
from kopf_scheduler.framework.enqueue import registrations_of
from kopf_scheduler.framework.events import node_events, pod_events
from kopf_scheduler.framework.extender import Extender
from kopf_scheduler.framework.interface import PluginsRunner
from kopf_scheduler.plugins.registry import in_tree_registry
from kopf_scheduler.queue import SchedulingQueue
from kopf_scheduler.state.cache import ClusterCache, Snapshot
from kopf_scheduler.state.pod_info import PodInfo

_uids = itertools.count()


def make_node(
    name: str,
    *,
    cpu: str | int = "4",
    memory: str | int = "32Gi",
    pods: int = 110,
    labels: dict[str, str] | None = None,
    taints: list[dict[str, Any]] | None = None,
    unschedulable: bool = False,
    extra: dict[str, str | int] | None = None,
    images: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    allocatable: dict[str, str | int] = {"cpu": cpu, "memory": memory, "pods": pods, **(extra or {})}
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name, **(labels or {})}},
        "spec": {"taints": taints or [], "unschedulable": unschedulable},
        "status": {"allocatable": allocatable, "capacity": dict(allocatable), "images": images or []},
    }


def make_pod(
    name: str = "pod",
    *,
    namespace: str = "default",
    requests: dict[str, str | int] | None = None,
    node_name: str = "",
    labels: dict[str, str] | None = None,
    spec: dict[str, Any] | None = None,
    uid: str | None = None,
) -> dict[str, Any]:
    container: dict[str, Any] = {"name": "c", "image": "registry.k8s.io/pause:3.10"}
    if requests:
        container["resources"] = {"requests": dict(requests)}
    body: dict[str, Any] = {"containers": [container], "schedulerName": "default-scheduler"}
    if node_name:
        body["nodeName"] = node_name
    body.update(spec or {})
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "uid": uid or f"uid-{name}-{next(_uids)}",
            "labels": dict(labels or {}),
        },
        "spec": body,
        "status": {"phase": "Running" if node_name else "Pending"},
    }


def make_cache(nodes: list[dict[str, Any]], pods: list[dict[str, Any]] = ()) -> ClusterCache:  # type: ignore[assignment]
    cache = ClusterCache()
    for node in nodes:
        cache.add_or_update_node(node)
    for pod in pods:
        cache.add_or_update_pod(pod)
    return cache


def pod_info(obj: dict[str, Any]) -> PodInfo:
    return PodInfo.from_obj(obj)


def slots(snapshot: Snapshot, names: list[str] | None = None) -> np.ndarray:
    """Node table slots for ``names`` (all nodes in node-tree order when omitted)."""
    if names is None:
        return snapshot.order
    found = [snapshot.slot_of(n) for n in names]
    return np.asarray(found, dtype=np.int64)


class FakeHandle:
    """The Handle plugins get in unit tests: a cache-backed snapshot, no API client."""

    def __init__(self, cache: ClusterCache | None = None, *, profile_name: str = "default-scheduler") -> None:
        self.cache = cache or ClusterCache()
        self._profile_name = profile_name
        self.client = None
        #: Uids of pods the test deleted: :meth:`pod_exists` says no for them.
        self.deleted: set[str] = set()
        #: The framework built on this handle and its extenders (``attach_pipeline``).
        self.plugins_runner: PluginsRunner | None = None
        self.extenders: tuple[Extender, ...] = ()

    def attach_pipeline(self, runner: PluginsRunner, extenders: Sequence[Extender]) -> None:
        self.plugins_runner = runner
        self.extenders = tuple(extenders)

    @property
    def profile_name(self) -> str:
        return self._profile_name

    def snapshot(self) -> Snapshot:
        return self.cache.snapshot()

    def pod_exists(self, pod: PodInfo) -> bool:
        return pod.uid not in self.deleted


def new_state() -> CycleState:
    return CycleState()


def hint_for(plugin: Plugin, event: ClusterEvent) -> QueueingHintFn:
    """The QueueingHint ``plugin`` registered for ``event``: exactly one registration must match, with a hint."""
    matching = [r for r in plugin.events_to_register() or () if r.event.matches(event)]
    assert len(matching) == 1, matching
    assert matching[0].hint is not None
    return matching[0].hint


def events_to_register(names: list[str]) -> dict[str, list[ClusterEventWithHint]]:
    """The registrations of the named in-tree plugins (default args), asked of plugin instances as the
    framework asks them. Names the registry lacks are left out, as the profile builder leaves out default
    plugins not implemented yet (DefaultPreemption)."""
    registry = in_tree_registry()
    return {name: registrations_of(registry[name](handle=FakeHandle())) for name in names if name in registry}


def node_event(queue: SchedulingQueue, old: dict[str, Any] | None, new: dict[str, Any] | None) -> None:
    """A node watch event (add: ``old`` None; delete: ``new`` None) told to ``queue`` as EventHandlers tells
    every profile's queue: its cluster events (``node_events``), one move each."""
    for event in node_events(old, new):
        queue.move_all_to_active_or_backoff(event, old, new)


def pod_event(queue: SchedulingQueue, old: PodInfo | None, new: PodInfo | None) -> None:
    """A bound pod's watch event told to ``queue`` as EventHandlers tells it (``pod_events``, one move each)."""
    for event in pod_events(old, new):
        queue.move_all_to_active_or_backoff(event, old, new)
