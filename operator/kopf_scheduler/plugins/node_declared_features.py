"""NodeDeclaredFeatures: a pod that needs a node feature fits only nodes that declare it (KEP-5328).

Upstream ``plugins/nodedeclaredfeatures`` v1.36.3 (gate ``NodeDeclaredFeatures``, beta and on by default in
1.36, so the plugin is the last entry of the default multiPoint list) with the inference library
``k8s.io/component-helpers/nodedeclaredfeatures`` v0.36.3. The kubelet publishes the features it supports in
``node.status.declaredFeatures`` (the API server keeps the list sorted and unique); PreFilter infers the
features the pod needs from its spec, Filter rejects nodes that do not declare all of them
(UnschedulableAndUnresolvable: preempting pods cannot add a feature).

The library's registry in v0.36.3 has five features; only two are ever inferred for *scheduling*:

- ``RestartAllContainersOnContainerExits``: a regular or init container has a ``restartPolicyRules`` entry
  whose action is ``RestartAllContainers`` (API gates ContainerRestartRules and
  RestartAllContainersOnContainerExits, both beta and on in 1.36);
- ``UserNamespacesHostNetworkSupport``: ``hostNetwork: true`` with ``hostUsers: false`` (the API server
  only admits such pods with the UserNamespacesHostNetworkSupport gate, alpha and off in 1.36).

The other three (``InPlacePodLevelResourcesVerticalScaling``, ``InPlacePodVerticalScalingInitContainers``,
``ExtendWebSocketsToKubelet``) only matter for pod *updates* (the API server's resize admission) or not at
all, so they never make a pod require anything here; a node declaring them, or names the library does not
know, changes no verdict. No feature has a ``MaxVersion`` in v0.36.3, so the scheduler's own version never
drops one.

Most pods need no feature: PreFilter answers Skip for them and Filter is not called, so the plugin costs
them one walk over the containers' ``restartPolicyRules`` (memoised on the pod). For the others Filter judges
each distinct declared-feature set of the node table once (``declared_feature_set``, interned like taint
sets) and indexes the verdict by slot.
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
    PreFilterResult,
    QueueingHint,
    Status,
    as_pod,
    node_pair,
)

if TYPE_CHECKING:
    from kopf_scheduler.state.cache import Snapshot
    from kopf_scheduler.state.pod_info import PodInfo

NAME = "NodeDeclaredFeatures"
ERR_REASON = "node(s) didn't match Pod's required features"
PRE_FILTER_STATE_KEY = "PreFilter" + NAME

RESTART_ALL_CONTAINERS = "RestartAllContainersOnContainerExits"
USER_NAMESPACES_HOST_NETWORK = "UserNamespacesHostNetworkSupport"
#: The ``restartPolicyRules[].action`` that needs the kubelet to restart the whole pod in place.
ACTION_RESTART_ALL_CONTAINERS = "RestartAllContainers"

_MEMO_KEY = NAME


def _restarts_all_containers(spec: dict[str, Any]) -> bool:
    """A regular or init container asks to restart every container when it exits (ephemeral ones cannot)."""
    for key in ("containers", "initContainers"):
        for container in spec.get(key) or ():
            for rule in container.get("restartPolicyRules") or ():
                if rule.get("action") == ACTION_RESTART_ALL_CONTAINERS:
                    return True
    return False


def _user_namespace_with_host_network(spec: dict[str, Any]) -> bool:
    """``hostNetwork`` together with an explicit ``hostUsers: false`` (unset means host users)."""
    return bool(spec.get("hostNetwork")) and spec.get("hostUsers") is False


def infer_required_features(spec: dict[str, Any]) -> frozenset[str]:
    """Upstream ``Framework.InferForPodScheduling`` on a pod spec: the features a node must declare."""
    required: set[str] = set()
    if _restarts_all_containers(spec):
        required.add(RESTART_ALL_CONTAINERS)
    if _user_namespace_with_host_network(spec):
        required.add(USER_NAMESPACES_HOST_NETWORK)
    return frozenset(required)


def required_features(pod: PodInfo) -> frozenset[str]:
    """The pod's required features, inferred once per pod object (the fields involved are immutable)."""
    found = pod.memo.get(_MEMO_KEY)
    if found is None:
        if not any(pod.may_have_field(name) for name in _INFERRED_FROM):
            found = frozenset()  # without decoding a compact pod
        else:
            found = infer_required_features(pod.obj.get("spec") or {})
        pod.memo[_MEMO_KEY] = found
    return found


#: Every field :func:`infer_required_features` can require a feature for.
_INFERRED_FROM = ("restartPolicyRules", "hostUsers")


class NodeDeclaredFeatures(PreFilterPlugin, FilterPlugin):
    name: ClassVar[str] = NAME

    _rejection = Status.unschedulable(ERR_REASON, plugin=NAME, unresolvable=True)
    _skip = Status.skip(plugin=NAME)

    def pre_filter(self, state: CycleState, pod: PodInfo, snapshot: Snapshot) -> tuple[PreFilterResult | None, Status]:
        required = required_features(pod)
        if not required:
            return None, self._skip
        state.write(PRE_FILTER_STATE_KEY, required)
        return None, SUCCESS

    def filter(self, state: CycleState, pod: PodInfo, nodes: np.ndarray, snapshot: Snapshot) -> FilterResult | None:
        # Upstream returns an Error status when PreFilter did not run; read() raises likewise.
        required: frozenset[str] = state.read(PRE_FILTER_STATE_KEY)
        table = snapshot.table
        fits = np.fromiter(
            (required <= declared for declared in table.declared_feature_sets),
            dtype=bool,
            count=len(table.declared_feature_sets),
        )
        rejected = ~fits[table.declared_feature_set[nodes]]
        if not rejected.any():
            return None
        return FilterResult.uniform(rejected, self._rejection)

    # -- EnqueueExtensions --------------------------------------------------------------------------------
    def events_to_register(self) -> list[ClusterEventWithHint]:
        return [
            ClusterEventWithHint(
                ClusterEvent(EventResource.NODE, ActionType.ADD | ActionType.UPDATE_NODE_DECLARED_FEATURE),
                is_schedulable_after_node_change,
            ),
            ClusterEventWithHint(ClusterEvent(EventResource.POD, ActionType.UPDATE), is_schedulable_after_pod_update),
        ]


def is_schedulable_after_node_change(pod: PodInfo, old: Any, new: Any) -> QueueingHint:
    """A new node, or a node whose declared features changed (upstream does not check them against the pod)."""
    original, modified = node_pair(old, new)
    if original is not None and _declared(original) == _declared(modified):
        return QUEUE_SKIP
    return QUEUE


def is_schedulable_after_pod_update(pod: PodInfo, old: Any, new: Any) -> QueueingHint:
    """The rejected pod itself changed what it requires."""
    original, modified = as_pod(old), as_pod(new)
    if original is None or modified is None:
        raise ValueError("pod update hint called without the old and the new pod")
    if modified.uid != pod.uid:
        return QUEUE_SKIP
    return QUEUE_SKIP if required_features(original) == required_features(modified) else QUEUE


def _declared(node: Any) -> list[str]:
    return list((node.get("status") or {}).get("declaredFeatures") or ())
