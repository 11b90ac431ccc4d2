"""One live SchedulerProfile at run time: its pipeline, its queue, and what applying it reports.

Upstream keeps a ``profile.Map`` of frameworks and one scheduling queue for all of them; here each profile has
its own queue (a profile is a kopf object with its own daemon), so a :class:`ProfileRuntime` pairs the two.
A valid profile change swaps the framework in place and keeps the queue with its pods; the queue reads the
framework through :meth:`ProfileRuntime.less` and :meth:`ProfileRuntime.pre_enqueue`, so the swap takes
effect at once. Building and swapping is the composition root's job (``app.py``); the event handlers and
the scheduling cycle only read these.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from kopf_scheduler.client import Client, ClientRef
from kopf_scheduler.framework import Status
from kopf_scheduler.framework.builder import effective_plugins
from kopf_scheduler.framework.profile import ResolvedProfile
from kopf_scheduler.framework.runtime import Framework
from kopf_scheduler.queue import QueuedPodInfo, SchedulingQueue
from kopf_scheduler.scheduler import Scheduler
from kopf_scheduler.state.cache import ClusterCache, Snapshot
from kopf_scheduler.state.pod_info import PodInfo


@dataclass(frozen=True, slots=True)
class ProfileOutcome:
    """The result of applying a SchedulerProfile: what its status and events should say."""

    ready: bool
    reason: str
    message: str
    #: Status fields describing the serving pipeline (effectivePlugins, scorePlugins, omittedDefaultPlugins,
    #: standInPlugins).
    pipeline_status: dict[str, Any] = field(default_factory=dict)


@dataclass(slots=True, eq=False)
class ProfileRuntime:
    """One live profile: its pipeline (swapped on every valid change) and its queue (kept across changes)."""

    name: str
    framework: Framework
    resolved: ResolvedProfile
    scheduler: Scheduler
    queue: SchedulingQueue = field(init=False)
    generation: int = 0

    # The queue calls these; they read ``self.framework`` each time, so a hot reload takes effect at once.
    def less(self, a: QueuedPodInfo, b: QueuedPodInfo) -> bool:
        return self.framework.queue_sort_less(a, b)

    def pre_enqueue(self, pod: PodInfo) -> Status:
        return self.framework.run_pre_enqueue_plugins(pod)


class ProfileHandle:
    """The framework Handle of one profile: its name, the API client, the cache snapshot, the known pods."""

    def __init__(
        self, name: str, *, client: ClientRef, cache: ClusterCache, unassigned: Mapping[str, PodInfo] | None = None
    ) -> None:
        self._name = name
        self._client = client
        self._cache = cache
        #: The pending pods as watched (the app's map by uid); assigned and assumed ones are in the cache.
        self._unassigned: Mapping[str, PodInfo] = {} if unassigned is None else unassigned

    @property
    def profile_name(self) -> str:
        return self._name

    @property
    def client(self) -> Client | None:
        return self._client()

    def snapshot(self) -> Snapshot:
        return self._cache.snapshot()

    def pod_exists(self, pod: PodInfo) -> bool:
        """By uid first (the common case, O(1)); a pod of that namespace and name under another uid counts
        too, as upstream's lister looks pods up by name."""
        if pod.uid in self._unassigned or self._cache.pod(pod.uid) is not None:
            return True
        known = (*self._unassigned.values(), *self._cache.pods_in_namespace(pod.namespace))
        return any(p.namespace == pod.namespace and p.name == pod.name for p in known)


def pipeline_status(resolved: ResolvedProfile) -> dict[str, Any]:
    """The status fields that describe a serving pipeline, in the CRD's JSON shape."""
    plugins = effective_plugins(resolved)
    score = ",".join(f"{p.name}:{p.weight}" for p in plugins.score)
    return {
        "effectivePlugins": plugins.model_dump(by_alias=True, exclude_none=True),
        "scorePlugins": score or "(none)",
        "omittedDefaultPlugins": list(resolved.omitted_defaults),
        "standInPlugins": list(resolved.stand_ins),
    }
