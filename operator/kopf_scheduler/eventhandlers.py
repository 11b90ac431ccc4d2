"""Watch events into the cache and the queues, and the reconciling LIST (upstream ``eventhandlers.go``).

Upstream's informer handlers add, update and delete nodes and assigned pods in the cache, add unassigned pods
of its profiles to the queue, and turn every cluster change into a :class:`ClusterEvent` that moves parked
pods whose rejecting plugins registered for it. :class:`EventHandlers` does the same for kopf's watch events,
plus the workload selectors and namespace labels PodTopologySpread and InterPodAffinity read, and the objects
plugins read as upstream's listers (storage objects, PDBs, DynamicResources' objects in ``cache.objects``; upstream's
plugins read them from the informer factory and register for their events). Which kinds are watched, and which part
of the cache each feeds, is the table in ``watched.py`` (:meth:`EventHandlers.on_watch_event` dispatches by it). It
also keeps every unassigned pod, whatever its schedulerName, so a profile created later finds its pods at once.

The nominator (one for all profiles) follows the pending pods of our profiles as upstream's queue feeds it: a
pod added with ``status.nominatedNodeName`` (unless PreEnqueue gates it) is nominated there, an update
follows the new status (``UpdateNominatedPod``), and a pod bound or deleted leaves it.

The pending pods of our live profiles are their pod groups' members (``spec.schedulingGroup``; upstream's
Add/Update/RemovePodGroupMember for the pods of its profiles): added, updated and removed with their watch events,
adopted when their profile goes live (before any of them enters its queue, so that PreEnqueue counts them all)
and dropped when it goes; bound ones move by the cache's own path. A new member also moves the parked pods of
the workload-aware profiles (upstream's ``EventUnscheduledPodAdd``, which GangScheduling's hint judges).

Why the authoritative LIST (:meth:`EventHandlers.ensure_reconciled`): kopf stops the watches while a replica
is paused by peering and re-lists on resume, but never purges objects deleted meanwhile (client-go's
reflector would). So the cache is rebuilt from a fresh LIST at the start and at every pause, with watch
changes and deletions that race the LIST remembered so a stale LIST can neither resurrect the deleted nor
delete the newly seen; while the replica stays paused the warm standby (``standby.py``) follows the cluster
from that LIST with watches of its own (:meth:`EventHandlers.follow`), so a takeover finds the cache whole.
New pending pods that arrive while that LIST is due wait outside the queues until it is done (upstream waits
for every informer's sync before it schedules; here PreEnqueue would otherwise judge a pod against a cache that
lacks its ResourceClaims).

kopf lists each kind too before it watches it; where our LIST can stand in for kopf's
(:meth:`EventHandlers.version_for_watch`), kopf's watch starts from our LIST's resourceVersion instead, as
client-go's reflector watches from its own LIST: every object is listed and decoded once, not twice, and
kopf hands no listed object to the handlers (``kopf_hooks.start_watches_from_our_lists``, installed by
``handlers.py``).

The optional kinds of ``watched.py`` (an alpha API a cluster may not serve: Workload and PodGroup) are listed and
followed only where the API server serves them: :meth:`EventHandlers.discover` asks once, before the first
reconciling LIST, with one discovery GET per API group version (upstream's informers for them start only with
their feature gate on). kopf finds the same by its own scan and watches none of them that is not served; a
watch event of one that arrives anyway still lands in ``cache.objects``.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
from collections.abc import Callable, Iterable, Mapping
from typing import Any, NamedTuple

from kopf_scheduler import json_codec
from kopf_scheduler.client import Client, ClientRef
from kopf_scheduler.framework import APIError
from kopf_scheduler.framework.events import (
    EVENT_UNSCHEDULED_POD_ADD,
    ClusterEvent,
    EventResource,
    node_events,
    object_events,
    pod_events,
)
from kopf_scheduler.live_profiles import ProfileRuntime
from kopf_scheduler.queue import GATED, PodNominator, SchedulingQueue
from kopf_scheduler.state.cache import TERMINAL_PHASES, ClusterCache
from kopf_scheduler.state.objects import Key, object_key
from kopf_scheduler.state.pod_info import PodInfo, same_scheduling_inputs
from kopf_scheduler.state.selectors import LabelSelector
from kopf_scheduler.unassigned_pods import UnassignedPods
from kopf_scheduler.watched import WATCHED_KINDS, Feed, WatchedKind, of_feed, optional_by_api

logger = logging.getLogger("kopf_scheduler")

#: Seconds between the attempts of a re-list for kopf (:meth:`EventHandlers._relist_for_watch`) before kopf lists
#: itself: kopf's own LIST would retry as long (its error backoffs).
RELIST_BACKOFFS = (0.5, 1.0, 2.0, 3.0, 5.0)

#: The storage objects' cluster events, by kind (upstream's ``EventResource``): the kinds whose row says so.
_OBJECT_RESOURCES = {
    watched.kind: EventResource(watched.event_resource) for watched in of_feed(Feed.OBJECTS) if watched.cluster_event
}
#: Workload kinds that select by a plain label map (the core group's); the apps kinds select by a LabelSelector.
_MAP_SELECTORS = frozenset(watched.kind for watched in of_feed(Feed.WORKLOAD) if not watched.group)

#: Called when a pod is bound or gone, with its uid and ``namespace/name`` key (reports about it are void).
ForgetPod = Callable[[str, str], None]
#: Applies one LIST page to the cache and returns the keys it listed.
PageApplier = Callable[[list[dict[str, Any]]], Iterable[Any]]
#: Applies one watch event (its type, its object) to the cache.
EventApplier = Callable[[str | None, dict[str, Any]], None]


class _ListedKind(NamedTuple):
    """A kind the reconciling LIST lists: its paths, how a page is applied, how the unlisted are purged, and
    how a watch event is applied (the warm standby's watch of the paths, :meth:`EventHandlers.follow`)."""

    paths: list[str]
    apply_page: PageApplier
    purge_unlisted: Callable[[set[Any]], None]
    apply_event: EventApplier
    #: Objects of metadata, spec and status alone (pods, nodes): listed without managedFields (``list_pages``).
    slim_items: bool = False


class EventHandlers:
    """Feeds the cache and the profiles' queues from watch events and from the reconciling LIST."""

    def __init__(
        self,
        *,
        cache: ClusterCache,
        profiles: Mapping[str, ProfileRuntime],
        unassigned: UnassignedPods,
        client: ClientRef,
        namespaces: Iterable[str] = (),
        forget_pod: ForgetPod,
        nominator: PodNominator | None = None,
    ) -> None:
        self._cache = cache
        self._profiles = profiles
        self._unassigned = unassigned
        self._client = client
        self._namespaces = tuple(namespaces)
        self._forget_pod = forget_pod
        #: Every profile's nominated pods (the app's one nominator).
        self._nominator = nominator if nominator is not None else PodNominator()
        self._reconciled = False
        #: A reconciling LIST has completed once (``sched-handler-sync``); never reset.
        self.synced_once = False
        self._reconcile_lock = asyncio.Lock()
        #: While a reconciling LIST is in flight: uids the watches changed or deleted meanwhile. The LIST is
        #: older than those events, so it must neither resurrect the deleted nor delete the newly seen.
        self._listing = False
        self._watched_during_list: set[str] = set()
        self._deleted_during_list: set[str] = set()
        #: New pending pods seen while a reconciling LIST is due (see :meth:`enqueue`), queued by its end.
        self._held: dict[str, PodInfo] = {}
        self._hold_pods = False
        #: Path → the resourceVersion the cache holds it at (its LIST's, or its last watch event's while the
        #: standby follows it); paths whose watch kopf has streamed since the last pause (:meth:`version_for_watch`).
        self._versions: dict[str, str] = {}
        self._handed: set[str] = set()
        #: The optional kinds (``watched.py``) the API server serves: None until :meth:`discover` has asked.
        self._served_optional: frozenset[str] | None = None
        self._discovery_lock = asyncio.Lock()
        #: Kind → how its watch events are applied: the feed its row in ``watched.py`` names.
        self._appliers: dict[str, EventApplier] = {watched.kind: self._applier(watched) for watched in WATCHED_KINDS}
        #: Told of every pod event first, the reconciling LIST's included (the Coscheduling groups' members).
        self.pod_observer: EventApplier | None = None

    def _applier(self, watched: WatchedKind) -> EventApplier:
        if watched.feed is Feed.NODE:
            return self.on_node_event
        if watched.feed is Feed.POD:
            return self.on_pod_event
        if watched.feed is Feed.NAMESPACE:
            return self.on_namespace_event
        if watched.feed is Feed.WORKLOAD:
            return functools.partial(self.on_workload_event, watched.kind)
        return functools.partial(self.on_object_event, watched.kind)

    # -- watch events --------------------------------------------------------------------------------
    def on_watch_event(self, kind: str, event_type: str | None, obj: dict[str, Any]) -> None:
        """A watch event of any watched kind (``watched.py``), applied by the feed its row names."""
        self._appliers[kind](event_type, obj)

    def on_node_event(self, event_type: str | None, obj: dict[str, Any]) -> None:
        name = (obj.get("metadata") or {}).get("name", "")
        old = self._cache.node(name)
        old_obj = old.obj if old is not None else None
        self._note_watch(event_type, obj)
        if event_type != "DELETED" and _same_version(old_obj, obj):
            return  # kopf's initial LIST repeats what our reconciling LIST already applied
        obj = json_codec.without_managed_fields(obj)
        if event_type == "DELETED":
            self._cache.remove_node(name)
            self._broadcast(node_events(old_obj, None), old_obj, None)
            return
        if old_obj is not None and _rv(obj) and _rv(obj) < _rv(old_obj):
            return
        self._cache.add_or_update_node(obj)
        self._broadcast(node_events(old_obj, obj), old_obj, obj)

    def on_pod_event(self, event_type: str | None, obj: dict[str, Any]) -> None:
        if self.pod_observer is not None:
            self.pod_observer(event_type, obj)
        uid = _uid(obj)
        old_assigned = self._cache.pod(uid)
        old_unassigned = self._unassigned.get(uid)
        self._note_watch(event_type, obj)
        if event_type != "DELETED" and (_same_pod_version(old_unassigned, obj) or _same_pod_version(old_assigned, obj)):
            return  # a version we hold already (kopf's LIST after ours); upstream's informers never repeat one
        if event_type != "DELETED" and (
            _older_pod_version(old_unassigned, obj) or _older_pod_version(old_assigned, obj)
        ):
            return  # a stream lagging behind a newer LIST (the view refreshed after a pause, standing.py)
        obj = json_codec.without_managed_fields(obj)
        phase = (obj.get("status") or {}).get("phase")
        if event_type == "DELETED" or phase in TERMINAL_PHASES:
            self._pod_gone(uid, obj, old_unassigned, old_assigned)
        elif (obj.get("spec") or {}).get("nodeName"):
            self._pod_assigned(uid, obj, old_unassigned, old_assigned)
        else:
            self._pod_pending(uid, obj, old_unassigned)
        self._compact(uid)

    def _compact(self, uid: str) -> None:
        """The queues, the hints and the cluster events have read the new version: keep what stays compact
        (:meth:`PodInfo.compact`; 50000 pods as dicts were most of the operator's memory)."""
        for pod in (self._unassigned.get(uid), self._cache.pod(uid)):
            if pod is not None:
                pod.compact()

    def _pod_gone(
        self, uid: str, obj: dict[str, Any], old_unassigned: PodInfo | None, old_assigned: PodInfo | None
    ) -> None:
        self._forget_pod(uid, _key(obj))
        if old_unassigned is not None:
            self._unassigned.remove(uid)
            self._held.pop(uid, None)
            self._nominator.delete_nominated_pod_if_exists(old_unassigned)
            self._queue_for(old_unassigned.scheduler_name, lambda q: q.delete(uid))
            if old_unassigned.in_pod_group and old_unassigned.scheduler_name in self._profiles:
                self._cache.remove_pod_group_member(old_unassigned)  # upstream RemovePodGroupMember
        if old_assigned is not None:
            self._cache.remove_pod(uid)
            self._broadcast(pod_events(old_assigned, None), old_assigned, None)

    def _pod_assigned(
        self, uid: str, obj: dict[str, Any], old_unassigned: PodInfo | None, old_assigned: PodInfo | None
    ) -> None:
        if old_unassigned is not None:
            self._unassigned.remove(uid)
            self._held.pop(uid, None)
            self._nominator.delete_nominated_pod_if_exists(old_unassigned)
            self._queue_for(old_unassigned.scheduler_name, lambda q: q.delete(uid))
        self._forget_pod(uid, _key(obj))
        # The parsed pods, not their objects, go to the queues: every hint would parse an object again.
        new_assigned = self._cache.add_or_update_pod(obj)
        self._broadcast(pod_events(old_assigned, new_assigned), old_assigned, new_assigned)

    def _pod_pending(self, uid: str, obj: dict[str, Any], old_unassigned: PodInfo | None) -> None:
        if old_unassigned is not None and same_scheduling_inputs(old_unassigned.obj, obj):
            pod = old_unassigned.with_obj(obj)  # e.g. our own PodScheduled=False patch coming back
        else:
            pod = PodInfo.from_obj(obj)
        self._unassigned.add(pod)
        runtime = self._profiles.get(pod.scheduler_name)
        if runtime is not None and (pod.in_pod_group or (old_unassigned is not None and old_unassigned.in_pod_group)):
            # Upstream Add/UpdatePodGroupMember, for an assumed member too: the pending pods of a live profile
            # are their groups' members (a profile created or removed later adopts or drops them); a Coscheduling
            # member may change groups with its label.
            if old_unassigned is None:
                self._cache.add_pod_group_member(pod)
            else:
                self._cache.update_pod_group_member(old_unassigned, pod)
        if self._cache.is_assumed(uid):
            return  # its Binding is in flight; the bound pod's own event settles it
        if runtime is None:
            return
        if old_unassigned is None or uid in self._held:
            self.enqueue(runtime, pod)
        else:
            runtime.queue.update(old_unassigned, pod)
            self._nominator.update_nominated_pod(old_unassigned, pod)

    def enqueue(self, runtime: ProfileRuntime, pod: PodInfo) -> None:
        """A new pending pod into its profile's queue, and into the nominator if its status nominates it
        (upstream nominates as the pod enters activeQ, so not while PreEnqueue gates it).

        Until the reconciling LIST has made the cache whole the pod is held instead, and queued at its end
        (:meth:`_release_held`): no loop pops before that, and PreEnqueue would judge it against a partial
        cache (a pod listed before its ResourceClaims is gated, and every claim listed after it then puts
        every gated pod to the hints: 2000 claims × 2000 pods took 18 s of start-up).
        """
        if self._holding():
            self._held[pod.uid] = pod
            return
        runtime.queue.add(pod)
        if runtime.queue.location(pod.uid) != GATED:
            self._nominator.add_pod(pod)
        if pod.scheduling_group is not None:
            self._nudge_gangs(pod)
        pod.compact()  # PreEnqueue plugins may have read (decoded) the object

    def _nudge_gangs(self, pod: PodInfo) -> None:
        """A new pending pod of a pod group may complete a gang parked at PreEnqueue: upstream moves every parked
        pod on it when GangScheduling is on (``EventUnscheduledPodAdd`` in ``addPodToSchedulingQueue``); here the
        queues of the workload-aware profiles hear it, and only for pods of a group (ordinary pods move nothing)."""
        for runtime in self._profiles.values():
            if runtime.framework.workload_aware:
                runtime.queue.move_all_to_active_or_backoff(EVENT_UNSCHEDULED_POD_ADD, None, pod)

    def adopt_pending_pods(self, runtime: ProfileRuntime) -> None:
        """A profile just went live: its pending pods join their pod groups (all of them first, so that PreEnqueue
        counts every member), then enter its queue. Assumed pods (a binding of a removed profile still in
        flight) are left to their binding cycle."""
        name = runtime.name
        mine = [
            pod
            for pod in self._unassigned.values()
            if pod.scheduler_name == name and not self._cache.is_assumed(pod.uid)
        ]
        for pod in mine:
            if pod.in_pod_group:
                self._cache.add_pod_group_member(pod)
        for pod in mine:
            self.enqueue(runtime, pod)

    def disown_pending_pods(self, name: str) -> None:
        """Profile ``name`` is gone: its pending pods hold no nominated place any more (nothing will schedule them
        there) and leave their pod groups, as the pods of no profile of ours (assumed ones excepted, as above)."""
        for pod in self._unassigned.values():
            if pod.scheduler_name == name:
                self._nominator.delete_nominated_pod_if_exists(pod)
                if pod.in_pod_group and not self._cache.is_assumed(pod.uid):
                    self._cache.remove_pod_group_member(pod)

    def hold_pods_until_reconciled(self) -> None:
        """From now until the next reconciling LIST has made the cache whole, new pending pods wait outside the
        queues (the operator calls this before kopf's watches start; :meth:`invalidate` does it too)."""
        self._hold_pods = True

    def _holding(self) -> bool:
        return self._hold_pods and not self._reconciled

    def _release_held(self) -> None:
        """Queue the held pods (their latest versions), in the order they arrived."""
        held, self._held = self._held, {}
        for uid in held:
            pod = self._unassigned.get(uid)
            runtime = None if pod is None else self._profiles.get(pod.scheduler_name)
            if pod is not None and runtime is not None and not self._cache.is_assumed(uid):
                self.enqueue(runtime, pod)

    def _note_watch(self, event_type: str | None, obj: dict[str, Any]) -> None:
        if self._listing:
            target = self._deleted_during_list if event_type == "DELETED" else self._watched_during_list
            target.add(_uid(obj))

    def on_workload_event(self, kind: str, event_type: str | None, obj: dict[str, Any]) -> None:
        meta = obj.get("metadata") or {}
        namespace, name = meta.get("namespace", ""), meta.get("name", "")
        selector: LabelSelector | None = None
        if event_type != "DELETED":
            raw = (obj.get("spec") or {}).get("selector")
            if raw:
                # Services and ReplicationControllers select by a plain label map; the apps kinds by LabelSelector.
                as_selector = {"matchLabels": raw} if kind in _MAP_SELECTORS else raw
                selector = LabelSelector.parse(as_selector)
        self._cache.set_workload_selector(kind, namespace, name, selector)

    def on_namespace_event(self, event_type: str | None, obj: dict[str, Any]) -> None:
        meta = obj.get("metadata") or {}
        labels = None if event_type == "DELETED" else dict(meta.get("labels") or {})
        self._cache.set_namespace_labels(meta.get("name", ""), labels)

    def on_object_event(self, kind: str, event_type: str | None, obj: dict[str, Any]) -> None:
        """Keep ``cache.objects`` current and tell the queues (a new PV may fit a parked pod's claim)."""
        storage = self._cache.objects
        namespace, name = object_key(kind, obj)
        old = storage.get(kind, name, namespace)
        self._note_watch(event_type, obj)
        if event_type != "DELETED" and (_same_version(old, obj) or (old is not None and 0 < _rv(obj) < _rv(old))):
            return  # a version we hold already, or an older one (a LIST that raced a watch event)
        old, new = storage.apply(kind, event_type, json_codec.without_managed_fields(obj))
        resource = _OBJECT_RESOURCES.get(kind)
        if resource is not None:  # PDBs move no pod: upstream registers no cluster event for them
            self._broadcast(object_events(resource, old, new), old, new)

    def _queue_for(self, scheduler_name: str, action: Callable[[SchedulingQueue], None]) -> None:
        runtime = self._profiles.get(scheduler_name)
        if runtime is not None:
            action(runtime.queue)

    def _broadcast(self, events: Iterable[ClusterEvent], old: Any, new: Any) -> None:
        """Every profile's queue hears every cluster event (upstream's MoveAllToActiveOrBackoffQueue)."""
        for event in events:
            self.move_all_to_active_or_backoff(event, old, new)

    def move_all_to_active_or_backoff(
        self, event: ClusterEvent, old: Any, new: Any, pre_check: Callable[[PodInfo], bool] | None = None
    ) -> None:
        """One cluster event to every profile's queue; ``pre_check`` limits the pods it may move.

        Also what the binding cycle calls after a failure freed an assumed pod's place (AssignedPodDelete).
        """
        for runtime in self._profiles.values():
            runtime.queue.move_all_to_active_or_backoff(event, old, new, pre_check=pre_check)

    # -- which optional kinds are served (discovery) ----------------------------------------------------
    @property
    def served_optional(self) -> frozenset[str] | None:
        """The optional kinds the API server serves (:meth:`discover`); None before it has asked."""
        return self._served_optional

    async def discover(self) -> frozenset[str]:
        """Which optional kinds (``watched.py``) the API server serves: asked once (one discovery GET per API group
        version), then remembered for the process's life. A group version it does not serve is logged at INFO,
        one line naming it; a failed GET is logged as a warning and its kinds count as not served. Without a
        client (before kopf's login) nothing is asked and nothing is served."""
        async with self._discovery_lock:
            if self._served_optional is not None:
                return self._served_optional
            client = self._client()
            if client is None:
                return frozenset()
            served: set[str] = set()
            for prefix, rows in optional_by_api().items():
                api = prefix.removeprefix("/apis/")
                try:
                    resources = await client.api_resources(prefix)
                except Exception as error:  # the app runs on without the optional API
                    logger.warning("discovery of %s failed (%s): %s not watched", api, error, _kinds(rows))
                    continue
                missing = [watched for watched in rows if watched.plural not in (resources or ())]
                if missing:
                    logger.info("the API server does not serve %s %s: not watched", api, _kinds(missing))
                served.update(watched.kind for watched in rows if watched not in missing)
            self._served_optional = frozenset(served)
            return self._served_optional

    def _is_listed(self, watched: WatchedKind) -> bool:
        return not watched.optional or watched.kind in (self._served_optional or ())

    # -- authoritative re-list -----------------------------------------------------------------------
    def invalidate(self) -> None:
        """kopf has paused the replica and stopped its watches: they may miss deletions from now on, so the cache
        is rebuilt from the next reconciling LIST, and no kopf stream is past any version recorded after it (the
        versions recorded before it are void)."""
        self._reconciled = False
        self._hold_pods = True
        self._handed.clear()
        self._versions.clear()

    @property
    def reconciled(self) -> bool:
        """The cache equals the last reconciling LIST plus the watch events since."""
        return self._reconciled

    async def ensure_reconciled(self) -> None:
        """Make the cache equal to a fresh LIST, except for what the watches changed while it was in flight.

        Each page is applied as it arrives and then dropped (a cluster's pods as raw dicts are the largest
        thing this process would ever hold at once); objects known before but absent from the LIST are
        deleted once their kind's last page is in.
        """
        async with self._reconcile_lock:
            if self._reconciled or self._client() is None:
                return
            await self.discover()
            self._listing = True
            try:
                pods = await self._reconcile_every_kind()
            finally:
                self._listing = False
                self._watched_during_list.clear()
                self._deleted_during_list.clear()
            self._reconciled = True
            self.synced_once = True
            self._hold_pods = False
            self._release_held()
            logger.info("cache reconciled: %d nodes, %d pods", self._cache.num_nodes, len(pods))

    async def version_for_watch(self, path: str) -> str | None:
        """kopf is about to LIST ``path`` and watch it from that LIST's resourceVersion: the resourceVersion of
        our reconciling LIST of the path if it can stand in for kopf's, else None (kopf lists as usual).

        It can when the cache holds the path (reconciled, waiting for the reconcile if one is due) and no kopf
        stream of the path has run since the last pause (:meth:`invalidate`; kopf's streams stop at a pause):
        the version is our LIST's, or where the warm standby's watch of the path stopped (:meth:`follow`).
        kopf's watch then replays exactly what happened since, as client-go's reflector watches from its own
        LIST, and kopf hands no listed object to the handlers: at 50000 pending pods its LIST and the
        per-object work took longer than ours (docs/benchmarks.md). A second request before the next pause
        (kopf re-lists after a 410 Gone, or its watch restarted) re-lists the kind here (:meth:`_relist_for_watch`).
        """
        await self.discover()
        if path not in self._listed_paths():
            return None
        if path in self._handed:
            return await self._relist_for_watch(path)
        self._handed.add(path)  # from here on kopf streams the path (from our version, or from its own LIST)
        try:
            await self.ensure_reconciled()
        except Exception as error:  # kopf's own LIST then retries with kopf's backoff; the loop retries ours
            logger.info("kopf lists %s itself: the reconciling LIST failed (%s)", path, error)
            return None
        version = self._versions.get(path, "")
        return version if self._reconciled and version else None

    async def _relist_for_watch(self, path: str) -> str | None:
        """kopf re-lists ``path`` (its watch was answered 410 Gone, or restarted): our LIST of the kind stands in,
        and what it no longer returns is deleted, as client-go's reflector replaces its store after a 410. kopf's
        own re-list hands over the listed objects only, so a pod deleted while the watch was gone stayed in the
        cache for good, its node's room taken (tests/e2e/test_operator_faults.py, the 410 storm). A failing LIST
        is retried (:data:`RELIST_BACKOFFS`) before kopf lists itself; None without a reconciled cache (the
        loop's reconciling LIST comes first then)."""
        kind = next((listed for listed in self._lists() if path in listed.paths), None)
        if kind is None or not self._reconciled:
            return None
        for backoff in (*RELIST_BACKOFFS, None):
            try:
                async with self._reconcile_lock:
                    self._listing = True
                    try:
                        await self._reconcile_kind(kind)
                    finally:
                        self._listing = False
                        self._watched_during_list.clear()
                        self._deleted_during_list.clear()
                return self._versions.get(path) or None
            except Exception as error:
                if backoff is None:
                    logger.warning("kopf re-lists %s itself: our LIST failed (%s)", path, error)
                    return None
                logger.info("re-listing %s failed (%s); again in %.1f s", path, error, backoff)
                await asyncio.sleep(backoff)
        return None  # pragma: no cover - the loop returns

    def _lists(self) -> list[_ListedKind]:
        """What a reconciling LIST lists, kind by kind (every row of ``watched.py`` but the optional ones the API
        server does not serve): the nodes, then the pods (:meth:`_reconcile_every_kind` returns their uids), then the
        others in the table's order."""
        first = (*of_feed(Feed.NODE), *of_feed(Feed.POD))
        rest = [watched for watched in WATCHED_KINDS if watched not in first and self._is_listed(watched)]
        return [self._listed_kind(watched) for watched in (*first, *rest)]

    def _listed_kind(self, watched: WatchedKind) -> _ListedKind:
        kind, paths, apply_event = watched.kind, self._paths(watched), self._appliers[watched.kind]
        if watched.feed is Feed.NODE:
            return _ListedKind(paths, self._apply_node_page, self._purge_unlisted_nodes, apply_event, slim_items=True)
        if watched.feed is Feed.POD:
            return _ListedKind(paths, self._apply_pod_page, self._purge_unlisted_pods, apply_event, slim_items=True)
        if watched.feed is Feed.NAMESPACE:
            return _ListedKind(paths, self._apply_namespace_page, self._purge_unlisted_namespaces, apply_event)
        if watched.feed is Feed.WORKLOAD:
            apply_page = functools.partial(self._apply_workload_page, kind)
            return _ListedKind(paths, apply_page, functools.partial(self._purge_unlisted_workloads, kind), apply_event)
        apply_page = functools.partial(self._apply_storage_page, kind)
        return _ListedKind(paths, apply_page, functools.partial(self._purge_unlisted_objects, kind), apply_event)

    def _listed_paths(self) -> set[str]:
        return {path for kind in self._lists() for path in kind.paths}

    async def _reconcile_every_kind(self) -> set[Any]:
        """Every kind at once: each LIST's round trip may wait on a busy loop (kopf still lists what our LIST
        cannot stand in for), most kinds are empty or small, and the pods need not wait for the nodes (the cache
        keeps a pod of a node it does not know yet until the node comes). A failed LIST cancels the others and
        is raised as itself (not as a group); the listed pod uids are returned."""
        try:
            async with asyncio.TaskGroup() as group:
                tasks = [group.create_task(self._reconcile_kind(kind)) for kind in self._lists()]
        except BaseExceptionGroup as errors:
            raise errors.exceptions[0] from None
        return tasks[1].result()  # the pods (second in :meth:`_lists`)

    async def _reconcile_kind(self, kind: _ListedKind) -> set[Any]:
        """LIST one kind, then drop what the cache holds of it and the LIST no longer returned; the listed keys."""
        listed = await self._relist(kind.paths, kind.apply_page, slim_items=kind.slim_items)
        kind.purge_unlisted(listed)
        return listed

    def _paths(self, watched: WatchedKind) -> list[str]:
        """Where a kind is listed. Pods and ``cache.objects``' namespaced kinds are listed where kopf watches them:
        every namespace, or the ``--namespace`` ones; every other kind (the workloads too) in every namespace."""
        per_namespace = watched.namespaced and watched.feed in (Feed.POD, Feed.OBJECTS)
        if not per_namespace or not self._namespaces:
            return [watched.path]
        return [watched.namespace_path(namespace) for namespace in self._namespaces]

    async def _relist(self, paths: list[str], apply_page: PageApplier, *, slim_items: bool = False) -> set[Any]:
        """LIST every path page by page; ``apply_page`` applies one page and returns the keys it listed.
        Each path's resourceVersion is kept for kopf's watch of it (:meth:`version_for_watch`)."""
        client = self._client()
        assert client is not None
        listed: set[Any] = set()
        for path in paths:
            versions: list[str] = []
            async for page in client.list_pages(path, on_version=versions.append, slim_items=slim_items):
                # No await between here and the next page: the application is atomic for the event loop,
                # and our own applying must not count as "watched while listing".
                self._listing = False
                try:
                    listed.update(apply_page(page))
                finally:
                    self._listing = True
            if versions and versions[0]:
                self._versions[path] = versions[0]
        return listed

    # -- the warm standby's watches ---------------------------------------------------------------------
    async def follow(self) -> None:
        """Watch every listed path from the version the cache holds it at and apply its events, until cancelled
        (the warm standby, ``standby.py``): each path's version follows its events and bookmarks, so a watch
        started from it later (the next stream, or kopf's at the resume) neither misses nor repeats one.

        Raises :class:`APIError` 410 when a version is too old to watch from (the caller re-lists), and any
        other error of a stream (the caller follows again from where each path is)."""
        client = self._client()
        assert client is not None
        try:
            async with asyncio.TaskGroup() as group:
                for kind in self._lists():
                    for path in kind.paths:
                        if self._versions.get(path):
                            group.create_task(self._follow_path(client, path, kind.apply_event))
        except BaseExceptionGroup as errors:
            raise errors.exceptions[0] from None

    async def _follow_path(self, client: Client, path: str, apply_event: EventApplier) -> None:
        while True:  # the API server ends every stream after its timeout: go on from the last version
            # Closed when cancelled (a hand-over) by this frame, not left to the garbage collector.
            async with contextlib.aclosing(client.watch(path, resource_version=self._versions[path])) as events:
                async for event in events:
                    event_type, obj = event.get("type"), event.get("object") or {}
                    if event_type == "ERROR":
                        raise APIError(int(obj.get("code") or 500), str(obj.get("message") or obj))
                    if event_type != "BOOKMARK":
                        apply_event(event_type, obj)
                    version = (obj.get("metadata") or {}).get("resourceVersion")
                    if version:
                        self._versions[path] = version

    def _watched_meanwhile(self, obj: dict[str, Any]) -> bool:
        """A watch changed or deleted the object while the LIST was in flight: its watched state wins."""
        return self._watched_uid_meanwhile(_uid(obj))

    def _watched_uid_meanwhile(self, uid: str) -> bool:
        return uid in self._watched_during_list or uid in self._deleted_during_list

    def _apply_node_page(self, page: list[dict[str, Any]]) -> list[str]:
        for node in page:
            if not self._watched_meanwhile(node):
                self.on_node_event(None, node)
        return [(n.get("metadata") or {}).get("name", "") for n in page]

    def _purge_unlisted_nodes(self, listed: set[str]) -> None:
        for name in list(self._cache.node_names()):
            info = self._cache.node(name)
            if name not in listed and info is not None and not self._watched_meanwhile(info.obj):
                self.on_node_event("DELETED", info.obj)

    def _apply_pod_page(self, page: list[dict[str, Any]]) -> list[str]:
        for pod in page:
            if not self._watched_meanwhile(pod):
                self.on_pod_event(None, pod)
        return [_uid(p) for p in page]

    def _purge_unlisted_pods(self, listed: set[str]) -> None:
        known = [*self._cache.pods(), *self._unassigned.values()]
        for pod in known:
            uid = pod.uid
            if uid not in listed and not self._watched_uid_meanwhile(uid) and not self._cache.is_assumed(uid):
                self.on_pod_event("DELETED", pod.obj)

    def _apply_workload_page(self, kind: str, page: list[dict[str, Any]]) -> list[tuple[str, str]]:
        for item in page:
            self.on_workload_event(kind, None, item)
        metas = [i.get("metadata") or {} for i in page]
        return [(meta.get("namespace", ""), meta.get("name", "")) for meta in metas]

    def _purge_unlisted_workloads(self, kind: str, listed: set[tuple[str, str]]) -> None:
        for key in [k for k in self._cache.workload_selectors if k[0] == kind and (k[1], k[2]) not in listed]:
            self._cache.set_workload_selector(*key, None)

    def _apply_namespace_page(self, page: list[dict[str, Any]]) -> list[str]:
        for namespace in page:
            self.on_namespace_event(None, namespace)
        return [(n.get("metadata") or {}).get("name", "") for n in page]

    def _purge_unlisted_namespaces(self, listed: set[str]) -> None:
        for name in [n for n in self._cache.namespace_labels if n not in listed]:
            self._cache.set_namespace_labels(name, None)

    def _apply_storage_page(self, kind: str, page: list[dict[str, Any]]) -> list[Key]:
        for obj in page:
            if not self._watched_meanwhile(obj):
                self.on_object_event(kind, None, obj)
        return [object_key(kind, obj) for obj in page]

    def _purge_unlisted_objects(self, kind: str, listed: set[Key]) -> None:
        storage = self._cache.objects
        for namespace, name in storage.keys(kind) - listed:
            obj = storage.get(kind, name, namespace)
            if obj is not None and not self._watched_meanwhile(obj):
                self.on_object_event(kind, "DELETED", obj)


def _kinds(rows: Iterable[WatchedKind]) -> str:
    """The rows' plurals, for a log line."""
    return ", ".join(watched.plural for watched in rows)


# -- raw objects ---------------------------------------------------------------------------------------
def _uid(obj: dict[str, Any]) -> str:
    meta = obj.get("metadata") or {}
    return meta.get("uid") or f"{meta.get('namespace', '')}/{meta.get('name', '')}"


def _same_version(known: dict[str, Any] | None, obj: dict[str, Any]) -> bool:
    """The cache already holds exactly this version (a LIST and a watch both delivered it)."""
    if known is None:
        return False
    version = (obj.get("metadata") or {}).get("resourceVersion")
    return bool(version) and version == (known.get("metadata") or {}).get("resourceVersion")


def _same_pod_version(known: PodInfo | None, obj: dict[str, Any]) -> bool:
    """:func:`_same_version` for a kept pod, by its parsed version (its object may be compact)."""
    if known is None:
        return False
    version = (obj.get("metadata") or {}).get("resourceVersion")
    return bool(version) and version == known.resource_version


def _older_pod_version(known: PodInfo | None, obj: dict[str, Any]) -> bool:
    """``obj`` is an older version of a pod we hold (both versions numeric, as the node events' check reads them)."""
    if known is None:
        return False
    try:
        held = int(known.resource_version or 0)
    except ValueError:
        return False
    version = _rv(obj)
    return bool(held and version) and version < held


def _key(obj: dict[str, Any]) -> str:
    """``namespace/name`` by PodInfo.key's rule (explanations are recorded under that key)."""
    meta = obj.get("metadata") or {}
    return f"{meta.get('namespace') or 'default'}/{meta.get('name', '')}"


def _rv(obj: dict[str, Any]) -> int:
    """resourceVersion as a number for 'is this newer' checks (etcd revisions); 0 if not numeric."""
    try:
        return int((obj.get("metadata") or {}).get("resourceVersion") or 0)
    except ValueError:
        return 0
