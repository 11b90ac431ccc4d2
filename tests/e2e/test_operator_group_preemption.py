"""Workload-aware preemption end to end: a gang in a GangScheduling profile preempts for the whole group, through
the real operator process on the local control plane (which runs kube-apiserver with GenericWorkload,
GangScheduling, TopologyAwareWorkloadScheduling and WorkloadAwarePreemption, so PodGroups keep ``disruptionMode``
and get ``spec.priority`` from their ``priorityClassName``).

What kube-scheduler v1.36.3 does with those gates on (``schedule_one_podgroup.go`` runWorkloadAwarePreemption,
``framework/preemption/podgrouppreemption.go``), observed from outside: a gang fits on its node only once
lower-priority pods go. A lower-priority PodGroup with ``disruptionMode: PodGroup`` goes as a whole, even where one
of its pods would have been enough (every pod gets DisruptionTarget ``preempting to accommodate a higher priority
podgroup`` and a ``Preempted`` event related to the gang's PodGroup), a single low-priority pod goes with it, and
a pod of middle priority whose eviction is not needed stays; with ``disruptionMode: Pod`` the group loses only
the pod needed. The gang then binds, all at once. The Scene (pods in the way held by a test finalizer until the
test releases them, PriorityClasses) is test_operator_preemption's.
"""

from __future__ import annotations

import time
from typing import Any

from kubernetes import client

from tests.e2e.operator_process import create_pods, pod_condition, pod_manifest, wait_for, wait_profile_status
from tests.e2e.test_operator_preemption import HOLD, Scene, scene

__all__ = ["scene"]  # the fixture, used by the tests below

GROUP, VERSION = "scheduling.k8s.io", "v1alpha2"
GANG = {"plugins": {"multiPoint": {"enabled": [{"name": "GangScheduling"}]}}}
MEMBERS = ("m0", "m1", "m2")


def _pod_group(name: str, priority_class: str, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "PodGroup",
        "metadata": {"name": name},
        "spec": {"priorityClassName": priority_class, **spec},
    }


def _create_pod_group(scene: Scene, body: dict[str, Any]) -> dict[str, Any]:
    api = client.CustomObjectsApi(scene.cluster.api)
    created: dict[str, Any] = api.create_namespaced_custom_object(GROUP, VERSION, scene.namespace, "podgroups", body)
    return created


def _setup(scene: Scene, mode: str, *, node_cpu: str, single_cpu: str | None, members: int) -> tuple[str, str]:
    """One node of ``node_cpu`` holding the PodGroup ``low`` (priority 10, two pods of 1 cpu, ``disruptionMode:
    mode``), a pod ``keep`` of priority 20 (1 cpu) and, if ``single_cpu``, a pod ``single`` of priority 10; then a
    gang of ``members`` (1 cpu each, priority 1000). Returns the node and the uid of the gang's PodGroup."""
    node = scene.kwok_nodes(cpu=node_cpu, memory="16Gi", labels=scene.labels)
    low, mid, top = scene.priority(10), scene.priority(20), scene.priority(1000)
    scene.profile = scene.profiles(GANG)  # before start(): no default profile is made
    operator = scene.start()
    wait_profile_status(scene.cluster.api, scene.profile, ready=True)
    operator.wait_log("cache reconciled", timeout=60)
    _create_pod_group(scene, _pod_group("low", low, schedulingPolicy={"basic": {}}, disruptionMode=mode))
    placed = [("v1", low, "1", "low"), ("v2", low, "1", "low"), ("keep", mid, "1", None)]
    if single_cpu is not None:
        placed.append(("single", low, single_cpu, None))
    manifests = []
    for name, priority_class, cpu, group in placed:
        spec: dict[str, Any] = {"nodeName": node, "priorityClassName": priority_class}
        if group is not None:
            spec["schedulingGroup"] = {"podGroupName": group}
        manifest = pod_manifest(name, scene.profile, cpu=cpu, spec=spec)
        manifest["metadata"]["finalizers"] = [HOLD]
        manifests.append(manifest)
    create_pods(scene.cluster.core, scene.namespace, manifests)
    names = {name for name, *_ in placed}
    wait_for(
        lambda: sum(p.status.phase == "Running" for p in scene.pods() if p.metadata.name in names) == len(names),
        timeout=60,
        message="pods in the way not Running",
    )
    spec = {"schedulingPolicy": {"gang": {"minCount": members}}}
    gang = _create_pod_group(scene, _pod_group("gang", top, **spec))
    assert gang["spec"].get("priority") == 1000, gang  # the API server resolved the PriorityClass
    pods = [
        pod_manifest(
            name,
            scene.profile,
            cpu="1",
            node_selector=scene.labels,
            spec={"priorityClassName": top, "schedulingGroup": {"podGroupName": "gang"}},
        )
        for name in MEMBERS[:members]
    ]
    create_pods(scene.cluster.core, scene.namespace, pods)
    return node, str(gang["metadata"]["uid"])


def _pod_group_condition(scene: Scene) -> dict[str, Any] | None:
    api = client.CustomObjectsApi(scene.cluster.api)
    obj = api.get_namespaced_custom_object(GROUP, VERSION, scene.namespace, "podgroups", "gang")
    for condition in (obj.get("status") or {}).get("conditions") or []:
        if condition.get("type") == "PodGroupScheduled":
            found: dict[str, Any] = condition
            return found
    return None


def test_a_gang_preempts_a_pod_group_as_a_whole_and_a_single_pod(scene: Scene) -> None:
    """5 cpus, all taken; the gang needs 3. ``keep`` (priority 20) is reprieved first; the group ``low`` cannot come
    back (1 cpu short), so it goes, both pods, although ``single`` and one of them would have made the room: a
    PodGroup-mode group is never preempted in part; ``single`` cannot come back either."""
    node, gang_uid = _setup(scene, "PodGroup", node_cpu="5", single_cpu="2", members=3)
    victims = {"v1", "v2", "single"}

    def all_going() -> set[str]:
        going = scene.terminating()
        return going if going >= victims else set()

    assert wait_for(all_going, timeout=60, message=scene.log_tail) == victims
    for name in sorted(victims):
        condition = pod_condition(scene.read(name), "DisruptionTarget")
        assert condition is not None
        assert (condition.status, condition.reason, condition.message) == (
            "True",
            "PreemptionByScheduler",
            f"{scene.profile}: preempting to accommodate a higher priority podgroup",
        )
        [event] = wait_for(lambda name=name: scene.events(name, "Preempted"), timeout=30)
        assert event.note == f"Preempted by podgroup {gang_uid} on node cluster"
        assert event.related is not None
        assert (event.related.kind, event.related.name, event.related.uid) == ("PodGroup", "gang", gang_uid)
    # The group waits on preemption: nothing bound, nothing else evicted while the victims are held.
    waiting = wait_for(lambda: _pod_group_condition(scene), timeout=30, message=scene.log_tail)
    assert (waiting["status"], waiting["reason"]) == ("False", "Unschedulable")
    time.sleep(2)
    assert scene.terminating() == victims
    assert all(scene.node_of(name) is None for name in MEMBERS)

    scene.release()
    assert {name: scene.bound_within(name) for name in MEMBERS} == dict.fromkeys(MEMBERS, node)
    assert scene.node_of("keep") == node, scene.log_tail()
    assert not scene.events("keep", "Preempted")
    scheduled = wait_for(
        lambda: (c := _pod_group_condition(scene)) is not None and c["status"] == "True" and c, timeout=30
    )
    assert scheduled["reason"] == "Scheduled"
    assert scene.operator is not None
    assert scene.operator.log_lines("Traceback") == []


def test_a_pod_mode_group_loses_only_the_pods_needed(scene: Scene) -> None:
    """4 cpus, 1 free; a gang of two needs one more. With ``disruptionMode: Pod`` each pod of ``low`` is a victim
    of its own: one goes, the other (the older) stays, and so does ``keep``."""
    node, _ = _setup(scene, "Pod", node_cpu="4", single_cpu=None, members=2)
    going = wait_for(scene.terminating, timeout=60, message=scene.log_tail)
    assert len(going) == 1, going
    assert going < {"v1", "v2"}, going
    time.sleep(2)
    assert scene.terminating() == going
    scene.release()
    members = MEMBERS[:2]
    assert {name: scene.bound_within(name) for name in members} == dict.fromkeys(members, node)
    [kept] = {"v1", "v2"} - going
    assert scene.node_of(kept) == node
    assert scene.node_of("keep") == node
