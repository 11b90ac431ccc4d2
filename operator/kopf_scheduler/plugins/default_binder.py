"""DefaultBinder: binds the pod by POSTing a Binding (upstream ``plugins/defaultbinder``, §2.19).

The HTTP call itself lives in ``kopf_scheduler.kube`` behind the Handle's :class:`APIClient`; this plugin
only turns its outcome into a Status. Any failure is an Error status (the pod goes to backoff with reason
SchedulerError), as upstream's ``AsStatus(err)``. Success needs no status patch: the API server's binding
handler sets ``spec.nodeName`` and ``PodScheduled=True`` itself.
"""

from __future__ import annotations

from typing import ClassVar

from kopf_scheduler.framework import BINDING_ANNOTATIONS, SUCCESS, BindPlugin, ClusterEventWithHint, CycleState, Status
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
            return Status.as_error(exc, plugin=self.name)
        return SUCCESS
