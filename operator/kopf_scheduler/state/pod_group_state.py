"""The runtime state of every pod group the scheduler knows (upstream ``backend/cache/podgroupstate.go``).

Workload-aware scheduling keys a group by the pods' ``spec.schedulingGroup.podGroupName`` in their namespace
(:attr:`PodInfo.scheduling_group_key`). For each group the cache keeps every member pod it knows and splits
them into *unscheduled* (neither assumed nor assigned), *assumed* (past Reserve, with the assumed copy that
names the node) and *assigned* (bound). The gang plugins read the counts (PreEnqueue waits for minCount
members, Permit for minCount scheduled ones), the pod-group cycle pops the unscheduled members together, and
placement scorers read the scheduled ones.

The transitions are upstream's, quirks included: adding a pod puts it in assigned or unscheduled by its node
name (and leaves it in unscheduled if it was there); assuming a pod the group does not hold is ignored, and
one whose stored version already names a node goes to assigned; forgetting returns an assumed pod to
unscheduled (to assigned if its stored version names a node). Every change takes a new generation from one
scheduler-wide counter, so a group deleted and created again never repeats a generation: a cycle's
:class:`PodGroupSnapshot` copies only the groups whose generation moved since it was last updated, and
assume/forget on a copy (the pod-group cycle's trial placements) move the copy's generation too, so the next
update copies it afresh.

The same machinery keeps scheduler-plugins' Coscheduling groups, keyed by the pods'
``scheduling.x-k8s.io/pod-group`` label in their namespace (:attr:`PodInfo.coscheduling_group_key`): the cache holds
one :class:`PodGroupStates` per gang API, each with its own key (two APIs may name groups alike), and the
Coscheduling plugin reads the same counts (PreFilter: members against minMember; Permit: scheduled against it).

Which pods join a group and when is :class:`ClusterCache`'s part (upstream ``cache.go``): pending pods of our
profiles as the event handlers see them, assigned pods as the cache accounts them, and the cache's assume,
forget and the watch event that confirms an assumed pod.
"""

from __future__ import annotations

import itertools
import logging
from collections.abc import Callable, Iterable, Iterator

from kopf_scheduler.state.pod_info import PodGroupKey, PodInfo

logger = logging.getLogger("kopf_scheduler")

#: One counter for every group of the scheduler (upstream's package-level atomic): generations never repeat.
_generations = itertools.count(1)


def next_pod_group_generation() -> int:
    """The next generation of any pod group state (upstream ``nextPodGroupGeneration``)."""
    return next(_generations)


def key_string(key: PodGroupKey) -> str:
    """``namespace/name``, as upstream prints a pod group key."""
    return f"{key[0]}/{key[1]}"


class PodGroupStateNotFound(LookupError):
    """No state for the asked pod group; the message is upstream's lister error."""

    def __init__(self, key: PodGroupKey) -> None:
        super().__init__(f"pod group state not found for pod group {key_string(key)}")
        self.key = key


class PodGroupStateData:
    """One group's members by uid, and which of them are unscheduled, assumed and assigned.

    The uid sets are dicts (insertion-ordered): what the queries return comes out in a stable order.
    """

    __slots__ = ("all_pods", "assigned", "assumed", "generation", "unscheduled")

    def __init__(self) -> None:
        #: Bumped on every change (from the scheduler-wide counter); a snapshot copies only a moved one.
        self.generation = 0
        #: Every member pod known to the scheduler, by uid (the version last added or updated).
        self.all_pods: dict[str, PodInfo] = {}
        #: Members neither assumed nor assigned.
        self.unscheduled: dict[str, None] = {}
        #: Members past Reserve, waiting for the rest of the gang before binding: the assumed copies.
        self.assumed: dict[str, PodInfo] = {}
        #: Members bound to a node.
        self.assigned: dict[str, None] = {}

    # -- transitions ---------------------------------------------------------------------------------
    def add_pod(self, pod: PodInfo) -> None:
        """``pod`` joins the group: assigned if it names a node, unscheduled otherwise."""
        self.generation = next_pod_group_generation()
        self.all_pods[pod.uid] = pod
        if pod.node_name:
            self.assigned[pod.uid] = None
        else:
            self.unscheduled[pod.uid] = None

    def update_pod(self, old: PodInfo, new: PodInfo) -> None:
        """A newer version of a member; one that got its node (a binding) moves to assigned."""
        self.generation = next_pod_group_generation()
        self.all_pods[new.uid] = new
        if not old.node_name and new.node_name:
            self.assigned[new.uid] = None
            self.unscheduled.pop(new.uid, None)
            self.assumed.pop(new.uid, None)

    def delete_pod(self, uid: str) -> None:
        """The pod leaves the group (and every set of it)."""
        self.generation = next_pod_group_generation()
        self.all_pods.pop(uid, None)
        self.unscheduled.pop(uid, None)
        self.assumed.pop(uid, None)
        self.assigned.pop(uid, None)

    def assume_pod(self, pod: PodInfo) -> None:
        """``pod`` (the assumed copy, naming its node) passed Reserve. Ignored if the group does not hold it
        (it may have been deleted meanwhile); assigned if the held version already names a node."""
        stored = self.all_pods.get(pod.uid)
        if stored is None:
            return
        self.generation = next_pod_group_generation()
        if stored.node_name:
            self.assigned[pod.uid] = None
        else:
            self.assumed[pod.uid] = pod
        self.unscheduled.pop(pod.uid, None)

    def forget_pod(self, uid: str) -> None:
        """Undo :meth:`assume_pod`: back to unscheduled (to assigned if the held version names a node).
        Ignored if the group does not hold the pod."""
        stored = self.all_pods.get(uid)
        if stored is None:
            return
        self.generation = next_pod_group_generation()
        self.assumed.pop(uid, None)
        if stored.node_name:
            self.assigned[uid] = None
        else:
            self.unscheduled[uid] = None

    # -- queries (upstream's framework.PodGroupState) ------------------------------------------------
    def empty(self) -> bool:
        return not self.all_pods

    def all_pod_uids(self) -> frozenset[str]:
        """The uids of every member known to the scheduler (upstream ``AllPods``)."""
        return frozenset(self.all_pods)

    def all_pods_count(self) -> int:
        return len(self.all_pods)

    def unscheduled_pods(self) -> dict[str, PodInfo]:
        """The unscheduled members by pod name (the shape upstream's ``PodActivator.Activate`` takes)."""
        all_pods = self.all_pods
        return {pod.name: pod for pod in (all_pods[uid] for uid in self.unscheduled)}

    def assumed_pod_uids(self) -> frozenset[str]:
        return frozenset(self.assumed)

    def assigned_pod_uids(self) -> frozenset[str]:
        return frozenset(self.assigned)

    def scheduled_pods(self) -> list[PodInfo]:
        """The assigned members (as held), then the assumed ones (their assumed copies)."""
        all_pods = self.all_pods
        return [*(all_pods[uid] for uid in self.assigned), *self.assumed.values()]

    def scheduled_pods_count(self) -> int:
        """Members assumed or assigned: what a gang's quorum counts."""
        return len(self.assumed) + len(self.assigned)

    def _copy_into(self, other: PodGroupStateData) -> None:
        other.generation = self.generation
        other.all_pods = dict(self.all_pods)
        other.unscheduled = dict(self.unscheduled)
        other.assumed = dict(self.assumed)
        other.assigned = dict(self.assigned)


class PodGroupState(PodGroupStateData):
    """The live state of one pod group, changed by the cache."""

    __slots__ = ()

    def snapshot(self) -> PodGroupStateSnapshot:
        """A copy for a cycle (the pod objects are shared, the sets are not)."""
        copy = PodGroupStateSnapshot()
        self._copy_into(copy)
        return copy


class PodGroupStateSnapshot(PodGroupStateData):
    """A point-in-time copy of a :class:`PodGroupState` that a pod-group cycle assumes and forgets its
    trial placements in (:meth:`assume_pod`, :meth:`forget_pod`) without touching the live state."""

    __slots__ = ()


class PodGroupSnapshot:
    """A cycle's view of every group (upstream ``Snapshot.podGroupStates`` and its lister), kept across
    cycles so that :meth:`PodGroupStates.update_snapshot` re-copies only the groups that changed."""

    __slots__ = ("states",)

    def __init__(self) -> None:
        self.states: dict[PodGroupKey, PodGroupStateSnapshot] = {}

    def get(self, namespace: str, name: str) -> PodGroupStateSnapshot:
        """The group's copy; :class:`PodGroupStateNotFound` if the snapshot holds none."""
        key = (namespace, name)
        found = self.states.get(key)
        if found is None:
            raise PodGroupStateNotFound(key)
        return found

    def __len__(self) -> int:
        return len(self.states)

    @classmethod
    def from_pods(cls, pods: Iterable[PodInfo]) -> PodGroupSnapshot:
        """A snapshot of the groups of ``pods``, each added as :meth:`PodGroupStateData.add_pod` adds it
        (upstream ``createPodGroupStates``, what ``NewSnapshot`` builds from a pod list)."""
        snapshot = cls()
        for pod in pods:
            key = pod.scheduling_group_key
            if key is None:
                continue
            state = snapshot.states.get(key)
            if state is None:
                state = snapshot.states[key] = PodGroupStateSnapshot()
            state.add_pod(pod)
        return snapshot


def scheduling_group_key(pod: PodInfo) -> PodGroupKey | None:
    """Workload-aware scheduling's key of a pod's group (``spec.schedulingGroup``)."""
    return pod.scheduling_group_key


def coscheduling_group_key(pod: PodInfo) -> PodGroupKey | None:
    """Coscheduling's key of a pod's group (the ``scheduling.x-k8s.io/pod-group`` label)."""
    return pod.coscheduling_group_key


class PodGroupStates:
    """Every known pod group's live state, by (namespace, podGroupName); what upstream's cache keeps in
    ``podGroupStates`` and changes in its ``*PodGroupMember`` methods. ``key_of`` says which group a pod is of
    (workload-aware scheduling's by default, :func:`coscheduling_group_key` for Coscheduling's); callers pass
    only pods it finds a group for."""

    __slots__ = ("_key_of", "_states")

    def __init__(self, key_of: Callable[[PodInfo], PodGroupKey | None] = scheduling_group_key) -> None:
        self._states: dict[PodGroupKey, PodGroupState] = {}
        self._key_of = key_of

    def get(self, namespace: str, name: str) -> PodGroupState:
        """The group's live state; :class:`PodGroupStateNotFound` if no member is known."""
        key = (namespace, name)
        found = self._states.get(key)
        if found is None:
            raise PodGroupStateNotFound(key)
        return found

    def __len__(self) -> int:
        return len(self._states)

    def __iter__(self) -> Iterator[PodGroupKey]:
        return iter(self._states)

    def add_member(self, pod: PodInfo) -> None:
        """``pod`` joins its group, which is created if it is the first member (upstream ``addPodGroupMember``)."""
        key = self._key(pod)
        state = self._states.get(key)
        if state is None:
            state = self._states[key] = PodGroupState()
        state.add_pod(pod)

    def update_member(self, old: PodInfo, new: PodInfo) -> None:
        """A newer version of a member (upstream ``updatePodGroupMember``); a group that was never added to is
        an error logged, as upstream's (a missed add event)."""
        key = self._key(new)
        state = self._states.get(key)
        if state is None:
            logger.error(
                "Pod group state not found for update, this indicates a missed add event: pod=%s podGroupKey=%s",
                new.key,
                key_string(key),
            )
            return
        state.update_pod(old, new)

    def remove_member(self, pod: PodInfo) -> None:
        """``pod`` leaves its group; the group goes when its last member does (upstream ``removePodGroupMember``)."""
        key = self._key(pod)
        state = self._states.get(key)
        if state is None:
            return
        state.delete_pod(pod.uid)
        if state.empty():
            del self._states[key]

    def assume_member(self, pod: PodInfo) -> None:
        """The assumed copy ``pod`` passed Reserve (upstream ``assumePodGroupMember``). A group not known yet is
        created holding that copy, which (naming its node) then counts as assigned, as upstream's does."""
        key = self._key(pod)
        state = self._states.get(key)
        if state is None:
            state = self._states[key] = PodGroupState()
            state.all_pods[pod.uid] = pod
        state.assume_pod(pod)

    def forget_member(self, pod: PodInfo) -> None:
        """Undo :meth:`assume_member` (upstream ``forgetPodGroupMember``); a group not known is an error logged."""
        key = self._key(pod)
        state = self._states.get(key)
        if state is None:
            logger.error(
                "Pod group state not found for forget, this indicates a missed add or assume event: "
                "pod=%s podGroupKey=%s",
                pod.key,
                key_string(key),
            )
            return
        state.forget_pod(pod.uid)

    def _key(self, pod: PodInfo) -> PodGroupKey:
        key = self._key_of(pod)
        if key is None:
            raise ValueError(f"pod {pod.key} has no pod group")
        return key

    def update_snapshot(self, snapshot: PodGroupSnapshot) -> None:
        """Bring ``snapshot`` up to date (upstream ``updatePodGroupStateSnapshot``): groups gone from the cache
        leave it, and only groups whose generation differs from their copy's are copied again."""
        states, copies = self._states, snapshot.states
        if not states and not copies:
            return
        for key in [key for key in copies if key not in states]:
            del copies[key]
        for key, state in states.items():
            existing = copies.get(key)
            if existing is None or existing.generation != state.generation:
                copies[key] = state.snapshot()
