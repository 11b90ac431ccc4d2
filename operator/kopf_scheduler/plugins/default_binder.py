"""DefaultBinder: binds the pod by POSTing a Binding (upstream ``plugins/defaultbinder``, §2.19).

The HTTP call itself lives in ``kopf_scheduler.kube`` behind the Handle's :class:`APIClient`; this plugin
only turns its outcome into a Status. Any failure is an Error status (the pod goes to backoff with reason
SchedulerError), as upstream's ``AsStatus(err)``. Success needs no status patch: the API server's binding
handler sets ``spec.nodeName`` and ``PodScheduled=True`` itself.

Ours, beyond upstream: a Binding answered in a way that leaves open whether the API server applied it (no answer in
time, a lost connection, a 5xx, a 409 "already assigned" that may be its own replayed or late answer) is followed by
a GET of the pod, and counts as done when the pod (the same uid) is bound to that node
(``CycleState.found_bound``: another replica may have bound it there, so the binding cycle posts no Scheduled
event and counts no bind for it). Upstream turns such a
Binding into an error, forgets the assumed pod and frees its room in the cache until the watch event of the bound
pod arrives; a cycle in between could place another pod there. The fault proxy's e2e tests
(tests/e2e/test_operator_faults.py: a 409 or 504 after the write) over-committed nodes so.
"""

from __future__ import annotations

from typing import ClassVar

from kopf_scheduler.framework import (
    BINDING_ANNOTATIONS,
    SUCCESS,
    APIClient,
    BindPlugin,
    ClusterEventWithHint,
    CycleState,
    StandingLostError,
    Status,
)
from kopf_scheduler.state.pod_info import PodInfo

#: Our own text for a framework started without an API client (tests, dry runs): binding cannot happen.
ERR_NO_CLIENT = "no API client to bind pods with"


class NoClientError(RuntimeError):
    """The Handle has no API client."""


class DefaultBinder(BindPlugin):
    name: ClassVar[str] = "DefaultBinder"

    def events_to_register(self) -> list[ClusterEventWithHint]:
        return []  # it never rejects a pod, so no event needs to requeue one

    async def bind(self, state: CycleState, pod: PodInfo, node_name: str) -> Status:
        client = self.handle.client
        if client is None:
            return Status.as_error(NoClientError(ERR_NO_CLIENT), plugin=self.name)
        try:
            annotations = state.get(BINDING_ANNOTATIONS)
            if annotations:  # spec.explain.annotations: the attempt's account goes onto the pod in the same write
                await client.bind(
                    namespace=pod.namespace, name=pod.name, uid=pod.uid, node_name=node_name, annotations=annotations
                )
            else:
                await client.bind(namespace=pod.namespace, name=pod.name, uid=pod.uid, node_name=node_name)
        except Exception as exc:  # APIError and transport errors alike: upstream makes any error an Error status
            if _maybe_applied(exc) and await _bound_to(client, pod, node_name):
                state.found_bound = True  # by this Binding or by another replica's to the same node: who, unknown
                return SUCCESS
            return Status.as_error(exc, plugin=self.name)
        return SUCCESS


def _maybe_applied(exc: Exception) -> bool:
    """Whether a failed Binding may have taken effect: no HTTP answer (timeout, connection lost), a 5xx, or a 409
    (the pod is already bound: perhaps by this very Binding, answered late). A 4xx otherwise was refused."""
    if isinstance(exc, StandingLostError):  # the renew-deadline gate: nothing was written
        return False
    status = getattr(exc, "status", None)
    return not isinstance(status, int) or status == 409 or status >= 500


async def _bound_to(client: APIClient, pod: PodInfo, node_name: str) -> bool:
    """The live pod, the same uid, is bound to ``node_name`` (False when the GET fails too)."""
    try:
        live = await client.get_pod(namespace=pod.namespace, name=pod.name)
    except Exception:
        return False
    meta, spec = live.get("metadata") or {}, live.get("spec") or {}
    return bool(meta.get("uid") == pod.uid and spec.get("nodeName") == node_name)
