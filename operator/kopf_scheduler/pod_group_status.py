"""The status of scheduler-plugins' Coscheduling PodGroups, kept as its PodGroup controller keeps it (v0.34.7
``pkg/controllers/podgroup_controller.go``), so that a cluster needs no scheduler-plugins controller beside us.

The controller reconciles a PodGroup whenever it or one of its pods (``scheduling.x-k8s.io/pod-group: <name>``)
changes, and moves it one step at a time:

- no phase yet → ``Pending``;
- ``Pending`` → ``Scheduling`` once the group has minMember pods; ``occupiedBy`` then names the owners of its
  first pod (``namespace/ownerName``, sorted, comma-joined);
- from then on it counts the pods in phase Running, Succeeded and Failed and sets ``Pending`` (fewer pods than
  minMember), ``Scheduling`` (fewer than minMember running or succeeded), ``Running`` (minMember running or
  succeeded), ``Failed`` (some failed, and failed + running + succeeded reach minMember) or ``Finished``
  (minMember succeeded), the last two final: a Finished or Failed group is never reconciled again.

Its status is merge-patched through the ``podgroups/status`` subresource, only when it changes. The v0.34.7
controller never writes ``scheduleStartTime`` (nor the old ``scheduled`` count, gone from the API since v0.26);
neither does this.

The controller reads a group's pods from its informer's cache, never from the API server; so does this:
:class:`GroupMembers` keeps the labelled pods of every group from every pod event the operator gets (the reconciling
LIST's included, on the standby too, whether the keeper is on or not; terminal pods included, which the scheduler's
own cache drops); a pod event that changes none of that (a member nominated or bound, still Pending) reconciles
nothing. The controller's own write comes back to it as an event and is reconciled again (the next step); so is each
write of ours, at the next flush, whatever the watch shows by then. A reconcile asks the API server (one LIST of the
group's namespace and label) only for a group with a Succeeded or Failed pod: a terminal pod deleted while a watch
was down would otherwise stay counted (the reconciling LIST purges only the pods the scheduler's cache holds). It
also goes on from its own last write until the watch shows it, so a slow watch does not make it write the same step
twice: the cached PodGroup is behind that write while its resourceVersion is the one the write was based on or one
an earlier write of ours made (each patch answers the version it made). A watch that showed the first of two quick
writes (no phase → Pending, then Pending → Scheduling once the pods were there) used to make it write Scheduling
again, one extra write per group on a loaded API server. (A LIST per reconcile, and a step written again, were most
of the API server's extra work in the Coscheduling bench.)

Only the active replica writes: :meth:`CoschedulingStatus.flush` runs from the scheduling loops (which run on
the active replica only), each flush reconciling the groups touched since the last one; the loop's first flush
after a takeover reconciles every PodGroup. It is on while some live profile enables Coscheduling.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Coroutine, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from kopf_scheduler.client import ClientRef
from kopf_scheduler.plugins.coscheduling.core import parse_timestamp
from kopf_scheduler.state.pod_info import COSCHEDULING_POD_GROUP_LABEL as LABEL

logger = logging.getLogger("kopf_scheduler")

PENDING, SCHEDULING, RUNNING, FINISHED, FAILED = "Pending", "Scheduling", "Running", "Finished", "Failed"
_FINAL = (FINISHED, FAILED)
#: The controller gives up on a group whose scheduling started this long after its creation.
GIVE_UP_SECONDS = 48 * 3600.0

Spawn = Callable[[Coroutine[Any, Any, None]], None]
#: The PodGroups the cache holds now: (namespace, name) → object.
PodGroupsView = Callable[[], Mapping[tuple[str, str], Mapping[str, Any]]]


def next_status(pod_group: Mapping[str, Any], pods: Sequence[Mapping[str, Any]]) -> dict[str, Any] | None:
    """The controller's ``Reconcile`` for one PodGroup and its labelled pods: the status it writes next, None
    for a group in a final phase (left alone). ``pods`` in the order the controller would see them (by name)."""
    status = dict(pod_group.get("status") or {})
    phase = status.get("phase") or ""
    if phase in _FINAL or _given_up(pod_group, status):
        return None
    wanted = int((pod_group.get("spec") or {}).get("minMember") or 0)
    if phase == "":
        status["phase"] = PENDING
    elif phase == PENDING:
        if len(pods) >= wanted:
            status["phase"] = SCHEDULING
            if pods:
                _fill_occupied_by(status, pods[0])
    else:
        running, succeeded, failed = pod_counts(pods)
        status.update(running=running, succeeded=succeeded, failed=failed)
        status["phase"] = _counted_phase(len(pods), wanted, running, succeeded, failed)
    # The API type's fields are omitempty: a zero count or an empty string is not written at all.
    return {key: value for key, value in status.items() if value not in (0, "")}


def _given_up(pod_group: Mapping[str, Any], status: Mapping[str, Any]) -> bool:
    """The controller stops reconciling a Pending or Scheduling group with no pod running whose
    ``scheduleStartTime`` is over 48 hours after its creation (its pods may have been garbage-collected). Only a
    status someone else wrote has that time: neither the v0.34.7 controller nor this writes it."""
    if status.get("phase") not in (PENDING, SCHEDULING) or status.get("running"):
        return False
    started = parse_time(status.get("scheduleStartTime"))
    created = parse_time((pod_group.get("metadata") or {}).get("creationTimestamp"))
    return started is not None and created is not None and started - created > GIVE_UP_SECONDS


def parse_time(value: Any) -> float | None:
    """A ``metav1.Time`` as epoch seconds; None when unset or malformed."""
    return parse_timestamp(value) if isinstance(value, str) and value else None


def _counted_phase(count: int, wanted: int, running: int, succeeded: int, failed: int) -> str:
    if count < wanted:
        return PENDING
    phase = SCHEDULING if succeeded + running < wanted else RUNNING
    if failed != 0 and failed + running + succeeded >= wanted:
        phase = FAILED
    if succeeded >= wanted:
        phase = FINISHED
    return phase


def pod_counts(pods: Iterable[Mapping[str, Any]]) -> tuple[int, int, int]:
    """(running, succeeded, failed) by ``status.phase`` (the controller's ``getCurrentPodStats``)."""
    phases = [(pod.get("status") or {}).get("phase") for pod in pods]
    return phases.count("Running"), phases.count("Succeeded"), phases.count("Failed")


def _fill_occupied_by(status: dict[str, Any], pod: Mapping[str, Any]) -> None:
    """The controller's ``fillOccupiedObj``: the first pod's owners as ``namespace/name``, sorted; a pod without
    owners leaves ``occupiedBy`` as it was."""
    meta = pod.get("metadata") or {}
    owners = meta.get("ownerReferences") or []
    if owners:
        namespace = meta.get("namespace") or ""
        status["occupiedBy"] = ",".join(sorted(f"{namespace}/{owner.get('name', '')}" for owner in owners))


def status_patch(old: Mapping[str, Any], new: Mapping[str, Any]) -> dict[str, Any] | None:
    """The JSON merge patch from ``old`` status to ``new`` (controller-runtime's ``MergeFrom``): changed and
    added fields, null for those gone (a count back to zero); None when nothing changed."""
    changed: dict[str, Any] = {key: value for key, value in new.items() if old.get(key) != value}
    changed.update((key, None) for key in old if key not in new)
    return {"status": changed} if changed else None


GroupKey = tuple[str, str]


class GroupMembers:
    """The pods of each Coscheduling group as the pod watch last showed them (the controller's informer, reduced
    to what its reconcile reads: name, namespace, owners and phase), terminal pods included."""

    def __init__(self) -> None:
        self._by_group: dict[GroupKey, dict[str, dict[str, Any]]] = {}
        self._group_of: dict[str, GroupKey] = {}

    def observe(self, event_type: str | None, obj: Mapping[str, Any]) -> tuple[GroupKey | None, GroupKey | None]:
        """Apply one pod event; returns the group the pod left and the group it is in now (None: none), or
        (None, None) when nothing a reconcile reads changed (a pod nominated, bound or otherwise updated in the
        same phase: most pod events of a gang)."""
        meta = obj.get("metadata") or {}
        uid = meta.get("uid") or ""
        label = None if event_type == "DELETED" else (meta.get("labels") or {}).get(LABEL)
        before = self._group_of.get(uid)
        if label is None and before is None:
            return None, None  # the hot path: a pod of no group
        now = (meta.get("namespace") or "", label) if label else None
        if before is not None and before != now:
            self._forget(uid, before)
        if now is not None:
            view = _member_view(meta, obj.get("status") or {})
            members = self._by_group.setdefault(now, {})
            if before == now and members.get(uid) == view:
                return None, None
            self._group_of[uid] = now
            members[uid] = view
        return (before if before != now else None), now

    def _forget(self, uid: str, key: GroupKey) -> None:
        del self._group_of[uid]
        members = self._by_group.get(key)
        if members is not None:
            members.pop(uid, None)
            if not members:
                del self._by_group[key]

    def pods(self, key: GroupKey) -> list[dict[str, Any]]:
        """The group's pods, by name (the order the controller's List gives)."""
        return sorted(self._by_group.get(key, {}).values(), key=lambda pod: pod["metadata"]["name"])


def _member_view(meta: Mapping[str, Any], status: Mapping[str, Any]) -> dict[str, Any]:
    kept = {"name": meta.get("name") or "", "namespace": meta.get("namespace") or ""}
    if meta.get("ownerReferences"):
        kept["ownerReferences"] = [{"name": owner.get("name", "")} for owner in meta["ownerReferences"]]
    return {"metadata": kept, "status": {"phase": status.get("phase")}}


def _has_terminal_pod(pods: Iterable[Mapping[str, Any]]) -> bool:
    return any((pod.get("status") or {}).get("phase") in ("Succeeded", "Failed") for pod in pods)


class CoschedulingStatus:
    """Keeps the status of the Coscheduling PodGroups the operator watches (one per app)."""

    def __init__(self, *, client: ClientRef, pod_groups: PodGroupsView, spawn: Spawn) -> None:
        self._client = client
        self._pod_groups = pod_groups
        self._spawn = spawn
        self._members = GroupMembers()
        self._dirty: set[GroupKey] = set()
        self._in_flight: set[GroupKey] = set()
        #: Group → our last status write the watch has not shown yet.
        self._written: dict[GroupKey, _OwnWrite] = {}
        #: Whether the next flush reconciles every PodGroup (start-up, a takeover, switched on).
        self._all = True
        self._enabled = False

    @property
    def enabled(self) -> bool:
        """Some live profile enables Coscheduling (the app sets it as profiles come and go)."""
        return self._enabled

    @enabled.setter
    def enabled(self, value: bool) -> None:
        if value and not self._enabled:
            self._all = True  # the groups changed unseen while it was off
        self._enabled = value

    def touch(self, namespace: str, name: str) -> None:
        """A PodGroup changed: reconcile it at the next flush."""
        self._dirty.add((namespace, name))

    def observe_pod(self, event_type: str | None, obj: Mapping[str, Any]) -> None:
        """A pod event (every one, the reconciling LIST's included, whether or not the keeper is on): the group
        the pod left and the one it is in are reconciled at the next flush."""
        left, now = self._members.observe(event_type, obj)
        if not self._enabled:
            return
        if left is not None:
            self._dirty.add(left)
        if now is not None:
            self._dirty.add(now)

    def resync(self) -> None:
        """Reconcile every PodGroup at the next flush (this replica just became the active one)."""
        self._all = True

    def flush(self) -> None:
        """Reconcile the PodGroups touched since the last flush (every one after :meth:`resync`)."""
        if not self._enabled or self._client() is None:
            return
        groups = self._pod_groups()
        for gone in [key for key in self._written if key not in groups]:
            del self._written[gone]
        keys = set(groups) if self._all else self._dirty & set(groups)
        self._all = False
        self._dirty = set()  # a group without its PodGroup waits for the PodGroup's own event
        for key in keys:
            if key in self._in_flight:  # once the running reconcile ends, again with what changed since
                self._dirty.add(key)
                continue
            self._in_flight.add(key)
            self._spawn(self._reconcile(key, groups[key]))

    async def _reconcile(self, key: GroupKey, pod_group: Mapping[str, Any]) -> None:
        namespace, name = key
        try:
            client = self._client()
            if client is None:
                return
            pods: Sequence[Mapping[str, Any]] = self._members.pods(key)
            if _has_terminal_pod(pods):
                listed = await client.list_labelled_pods(namespace=namespace, selector=f"{LABEL}={name}")
                pods = sorted(listed, key=lambda pod: (pod.get("metadata") or {}).get("name") or "")
            version, current = self._current_status(key, pod_group)
            new = next_status({**pod_group, "status": current}, pods)
            patch = None if new is None else status_patch(current, new)
            if new is not None and patch is not None:
                made = await client.patch_coscheduling_pod_group_status(namespace=namespace, name=name, patch=patch)
                self._record_write(key, version, new, made)
                self._dirty.add(key)  # the next step, as the controller's write comes back to it as an event
        except Exception as exc:
            logger.warning("Coscheduling PodGroup %s/%s: status not updated: %s", namespace, name, exc)
            self._dirty.add(key)
        finally:
            self._in_flight.discard(key)

    def _current_status(self, key: GroupKey, pod_group: Mapping[str, Any]) -> tuple[str, dict[str, Any]]:
        """The PodGroup's resourceVersion and its status as it stands: our last write while the cached object is
        one from before it (the one it was based on, or one an earlier write of ours made: the watch shows our
        writes in order, and late), otherwise the cached object's (it shows our last write, or a later one)."""
        version = str((pod_group.get("metadata") or {}).get("resourceVersion") or "")
        written = self._written.get(key)
        if written is not None:
            if version in written.before:
                return version, dict(written.status)
            del self._written[key]
        return version, dict(pod_group.get("status") or {})

    def _record_write(self, key: GroupKey, base: str, status: dict[str, Any], made: str) -> None:
        """Our write of ``status`` over the PodGroup at ``base`` made version ``made``."""
        previous = self._written.get(key)
        before = {base} if previous is None else {*previous.before, previous.made, base}
        self._written[key] = _OwnWrite(status=status, made=made, before=frozenset(before))


@dataclass(frozen=True)
class _OwnWrite:
    """The keeper's last status write of a group, until the watch shows it."""

    status: dict[str, Any]
    #: The resourceVersion the write made ("" when the API server's answer did not say).
    made: str
    #: The versions of the PodGroup from before it: the one it was based on and those our earlier writes made
    #: since the watch last showed one of ours (the watch may show them first: it is behind our last write).
    before: frozenset[str]


__all__ = ["LABEL", "CoschedulingStatus", "GroupMembers", "next_status", "pod_counts", "status_patch"]
