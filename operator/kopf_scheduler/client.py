"""The one I/O seam between the operator's parts and the API server.

:class:`Client` lists the calls the event handlers (the reconciling LIST, the discovery of optional APIs), the
binding cycle (Bind through the DefaultBinder plugin, PUT of PVs and claims through VolumeBinding's PreBind) and
reporting (events, the PodScheduled condition, a PodGroup's PodGroupScheduled condition) make.
``kube.KubeClient`` implements it over HTTP; unit tests pass a fake of the same shape. It lives in its own module
so that every part can name it without importing the composition root (``app.py``), and there stays exactly one
such seam.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, AsyncIterator, Callable
from typing import Any, Protocol


class Client(Protocol):
    """The calls the app makes (``kube.KubeClient``; a fake in unit tests)."""

    async def bind(
        self, *, namespace: str, name: str, uid: str, node_name: str, annotations: dict[str, str] | None = None
    ) -> None: ...

    async def replace_persistent_volume(self, *, body: dict[str, Any]) -> dict[str, Any]: ...

    async def replace_persistent_volume_claim(self, *, namespace: str, body: dict[str, Any]) -> dict[str, Any]: ...

    async def patch_pod_status(self, *, namespace: str, name: str, patch: dict[str, Any]) -> None: ...

    async def patch_pod_annotations(self, *, namespace: str, name: str, annotations: dict[str, str]) -> None: ...

    async def patch_pod_group_status(self, *, namespace: str, name: str, patch: dict[str, Any]) -> None:
        """Strategic-merge patch of a PodGroup's ``status`` (scheduling.k8s.io/v1alpha2 ``podgroups/status``)."""
        ...

    async def patch_coscheduling_pod_group_status(self, *, namespace: str, name: str, patch: dict[str, Any]) -> str:
        """JSON merge patch of a Coscheduling PodGroup's ``status`` (scheduling.x-k8s.io/v1alpha1
        ``podgroups/status``; a custom resource takes no strategic merge); the PodGroup's resourceVersion after
        the patch ("" when the answer does not say)."""
        ...

    async def list_labelled_pods(self, *, namespace: str, selector: str) -> list[dict[str, Any]]:
        """The pods of ``namespace`` matching the label ``selector`` (a Coscheduling PodGroup's pods)."""
        ...

    async def delete_pod(self, *, namespace: str, name: str, uid: str) -> None: ...

    async def get_pod(self, *, namespace: str, name: str) -> dict[str, Any]: ...

    async def get_resource_claim(self, *, namespace: str, name: str) -> dict[str, Any]: ...

    async def update_resource_claim(self, *, namespace: str, name: str, claim: dict[str, Any]) -> dict[str, Any]: ...

    async def update_resource_claim_status(
        self, *, namespace: str, name: str, claim: dict[str, Any]
    ) -> dict[str, Any]: ...

    async def patch_resource_claim_status(
        self, *, namespace: str, name: str, patch: dict[str, Any]
    ) -> dict[str, Any]: ...

    async def create_resource_claim(self, *, namespace: str, claim: dict[str, Any]) -> dict[str, Any]: ...

    async def delete_resource_claim(self, *, namespace: str, name: str) -> None: ...

    async def create_event(self, *, namespace: str, body: dict[str, Any]) -> None: ...

    async def renew_peering_record(self, *, name: str, identity: str, lastseen: str) -> dict[str, Any]:
        """Renew this replica's record in the ClusterKopfPeering (only if it is there); the object as written
        (the renew-deadline gate, ``standing.py``)."""
        ...

    async def api_resources(self, api_prefix: str) -> set[str] | None:
        """Discovery: the resources (plurals, and subresources as ``plural/sub``) the API server serves under
        ``api_prefix`` (``/apis/<group>/<version>``); None when it does not serve that group version (404)."""
        ...

    def list_pages(
        self, path: str, *, on_version: Callable[[str], None] | None = None, slim_items: bool = False
    ) -> AsyncIterator[list[dict[str, Any]]]:
        """A LIST page by page; ``on_version`` is told its resourceVersion before the first page. With
        ``slim_items`` (pods, nodes: objects of metadata, spec and status alone) the items may come without
        ``metadata.managedFields``."""
        ...

    def watch(self, path: str, *, resource_version: str) -> AsyncGenerator[dict[str, Any], None]:
        """A watch stream of ``path`` from ``resource_version``, bookmarks included: each event as the API server
        sends it (``type``, ``object``), until the server ends the stream."""
        ...

    def writes_backlogged(self) -> bool:
        """Whether the client's writes queue for a connection: the scheduling loop's backpressure, so that it
        does not outrun the API server."""
        ...

    async def write_room(self) -> None:
        """Return once they no longer do."""


#: How a part reaches the client: read at each call, because kopf's login hook replaces it (re-login).
ClientRef = Callable[[], Client | None]
