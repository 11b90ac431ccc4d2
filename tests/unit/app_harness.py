"""A SchedulerApp with a fake API client, for the unit tests of the app and its parts.

The fake records what users would see (Bindings, events, PodScheduled patches) and serves LISTs from
``lists``; :func:`drive` runs every poppable pod of a profile through one cycle and waits for its binding.
"""

from __future__ import annotations

import asyncio
import copy
import random
from collections.abc import AsyncIterator, Callable
from typing import Any

from kopf_scheduler.app import SchedulerApp
from kopf_scheduler.framework import APIError
from kopf_scheduler.framework.registry import Registry
from kopf_scheduler.settings import RunSettings
from tests.unit.factories import make_pod


class FakeClient:
    """Records calls; ``bind_errors`` maps pod name → APIError raised by bind."""

    def __init__(self) -> None:
        self.bindings: list[tuple[str, str, str]] = []
        #: Pod name → the annotations its Binding carried (spec.explain.annotations).
        self.binding_annotations: dict[str, dict[str, str]] = {}
        #: Merge patches of pod annotations, as (name, annotations).
        self.annotation_patches: list[tuple[str, dict[str, str]]] = []
        self.events: list[dict[str, Any]] = []
        self.status_patches: list[tuple[str, dict[str, Any]]] = []
        #: PodGroup status patches (the pod-group cycle's PodGroupScheduled condition), as (namespace, name, patch).
        self.pod_group_patches: list[tuple[str, str, dict[str, Any]]] = []
        #: Coscheduling PodGroup status patches, as (namespace, name, patch).
        self.coscheduling_patches: list[tuple[str, str, dict[str, Any]]] = []
        self.bind_errors: dict[str, APIError] = {}
        #: What get_pod answers, by (namespace, name) (absent: 404).
        self.live_pods: dict[tuple[str, str], dict[str, Any]] = {}
        self.lists: dict[str, list[dict[str, Any]]] = {}
        #: Path → the resourceVersion its LIST reports (none when absent).
        self.versions: dict[str, str] = {}
        #: PUTs of PVs and claims (VolumeBinding's PreBind), as (kind, body); answered with the body.
        self.replaced: list[tuple[str, dict[str, Any]]] = []
        #: DELETEs of pods (preemption's victims), as (namespace, name, uid).
        self.deleted: list[tuple[str, str, str]] = []
        #: DynamicResources' claim status writes: ("update" | "patch", namespace, name, body).
        self.claim_writes: list[tuple[str, str, str, dict[str, Any]]] = []
        #: What get_resource_claim answers, by (namespace, name); updates store their answer here too.
        self.claims: dict[tuple[str, str], dict[str, Any]] = {}
        #: Errors the next claim write raises, popped in order (e.g. a 409 conflict).
        self.claim_errors: list[APIError] = []
        #: Called with every claim this client creates (a test feeds it to the app, as the watch would).
        self.on_claim_created: Callable[[dict[str, Any]], None] | None = None
        #: How often the scheduling loop asked whether its writes queue.
        self.backlog_checks = 0
        #: Path → the events the next watch of it delivers, after which the stream stays open (until cancelled).
        self.watch_events: dict[str, list[dict[str, Any]]] = {}
        #: Every watch started, as (path, resourceVersion); and how many LISTs of each path were made.
        self.watches: list[tuple[str, str]] = []
        self.list_counts: dict[str, int] = {}
        self.slim_lists: dict[str, bool] = {}
        #: Paths whose watch stream was closed (the connection released), in order.
        self.closed_watches: list[str] = []
        #: Discovery: API group version path → the resources served there (absent: not served); the paths asked.
        self.discovery: dict[str, set[str]] = {}
        self.discovered: list[str] = []

    async def bind(
        self, *, namespace: str, name: str, uid: str, node_name: str, annotations: dict[str, str] | None = None
    ) -> None:
        if name in self.bind_errors:
            raise self.bind_errors[name]
        self.bindings.append((namespace, name, node_name))
        if annotations is not None:
            self.binding_annotations[name] = annotations

    async def patch_pod_annotations(self, *, namespace: str, name: str, annotations: dict[str, str]) -> None:
        self.annotation_patches.append((name, annotations))

    async def get_pod(self, *, namespace: str, name: str) -> dict[str, Any]:
        if (namespace, name) not in self.live_pods:
            raise APIError(404, f'pods "{name}" not found')
        return copy.deepcopy(self.live_pods[namespace, name])

    async def replace_persistent_volume(self, *, body: dict[str, Any]) -> dict[str, Any]:
        self.replaced.append(("PersistentVolume", body))
        return body

    async def replace_persistent_volume_claim(self, *, namespace: str, body: dict[str, Any]) -> dict[str, Any]:
        self.replaced.append(("PersistentVolumeClaim", body))
        return body

    async def patch_pod_status(self, *, namespace: str, name: str, patch: dict[str, Any]) -> Any:
        self.status_patches.append((name, patch))
        return {}

    async def patch_pod_group_status(self, *, namespace: str, name: str, patch: dict[str, Any]) -> None:
        self.pod_group_patches.append((namespace, name, patch))

    async def delete_pod(self, *, namespace: str, name: str, uid: str) -> None:
        self.deleted.append((namespace, name, uid))

    async def get_resource_claim(self, *, namespace: str, name: str) -> dict[str, Any]:
        if (namespace, name) not in self.claims:
            raise APIError(404, f'resourceclaims.resource.k8s.io "{name}" not found')
        return copy.deepcopy(self.claims[namespace, name])

    async def update_resource_claim(self, *, namespace: str, name: str, claim: dict[str, Any]) -> dict[str, Any]:
        return self._write_claim("update-claim", namespace, name, claim)

    async def update_resource_claim_status(self, *, namespace: str, name: str, claim: dict[str, Any]) -> dict[str, Any]:
        return self._write_claim("update", namespace, name, claim)

    async def patch_resource_claim_status(self, *, namespace: str, name: str, patch: dict[str, Any]) -> dict[str, Any]:
        if self.claim_errors:
            raise self.claim_errors.pop(0)
        self.claim_writes.append(("patch", namespace, name, patch))
        return patch

    async def create_resource_claim(self, *, namespace: str, claim: dict[str, Any]) -> dict[str, Any]:
        """Records ("create", …) and answers with a generated name, a UID and resourceVersion 1."""
        if self.claim_errors:
            raise self.claim_errors.pop(0)
        self.claim_writes.append(("create", namespace, "", claim))
        answer = copy.deepcopy(claim)
        meta = answer.setdefault("metadata", {})
        meta["name"] = f"{meta.pop('generateName', '')}{len(self.claim_writes):05d}"
        meta.update(namespace=namespace, uid=f"created-{len(self.claim_writes)}", resourceVersion="1")
        self.claims[namespace, meta["name"]] = answer
        if self.on_claim_created is not None:
            self.on_claim_created(copy.deepcopy(answer))
        return copy.deepcopy(answer)

    async def delete_resource_claim(self, *, namespace: str, name: str) -> None:
        self.claim_writes.append(("delete", namespace, name, {}))
        self.claims.pop((namespace, name), None)

    def _write_claim(self, verb: str, namespace: str, name: str, claim: dict[str, Any]) -> dict[str, Any]:
        """Records the write and answers as the API server would: the body with a new resourceVersion."""
        if self.claim_errors:
            raise self.claim_errors.pop(0)
        self.claim_writes.append((verb, namespace, name, claim))
        answer = copy.deepcopy(claim)
        meta = answer.setdefault("metadata", {})
        meta["resourceVersion"] = str(int(meta.get("resourceVersion") or 0) + 1)
        self.claims[namespace, name] = answer
        return copy.deepcopy(answer)

    async def create_event(self, *, namespace: str, body: dict[str, Any]) -> Any:
        self.events.append(body)
        return body

    def writes_backlogged(self) -> bool:
        self.backlog_checks += 1
        return False

    async def write_room(self) -> None:
        return None

    async def api_resources(self, api_prefix: str) -> set[str] | None:
        self.discovered.append(api_prefix)
        return self.discovery.get(api_prefix)

    async def patch_coscheduling_pod_group_status(self, *, namespace: str, name: str, patch: dict[str, Any]) -> str:
        """Recorded; answers the resourceVersion the write made: ``w<n>`` for the n-th such write."""
        self.coscheduling_patches.append((namespace, name, patch))
        return f"w{len(self.coscheduling_patches)}"

    async def list_labelled_pods(self, *, namespace: str, selector: str) -> list[dict[str, Any]]:
        path = f"/api/v1/namespaces/{namespace}/pods"
        self.list_counts[path] = self.list_counts.get(path, 0) + 1
        key, _, value = selector.partition("=")
        pods = self.lists.get("/api/v1/pods", [])
        return [
            pod
            for pod in pods
            if (pod.get("metadata") or {}).get("namespace") == namespace
            and ((pod.get("metadata") or {}).get("labels") or {}).get(key) == value
        ]

    async def list_all(self, path: str) -> list[dict[str, Any]]:
        return self.lists.get(path, [])

    async def list_pages(
        self, path: str, *, on_version: Callable[[str], None] | None = None, slim_items: bool = False
    ) -> AsyncIterator[list[dict[str, Any]]]:
        """Two pages (a one-item first page), so page-by-page application is exercised; the LIST's
        resourceVersion is ``versions[path]`` (none when absent). ``slim_items`` is recorded per path (the
        items are served as they are: the handlers take managedFields off themselves)."""
        self.list_counts[path] = self.list_counts.get(path, 0) + 1
        self.slim_lists[path] = slim_items
        if on_version is not None and path in self.versions:
            on_version(self.versions[path])
        items = await self.list_all(path)
        yield items[:1]
        if items[1:]:
            yield items[1:]

    async def watch(self, path: str, *, resource_version: str) -> AsyncIterator[dict[str, Any]]:
        self.watches.append((path, resource_version))
        try:
            for event in self.watch_events.pop(path, []):
                yield event
            await asyncio.Event().wait()  # an open stream with nothing more to say
        finally:
            self.closed_watches.append(path)


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


async def until(condition: Callable[[], bool], *, tries: int = 200, step: float = 0.01) -> None:
    """Let the event loop run until ``condition()`` holds (or ``tries`` steps passed; the test asserts after)."""
    for _ in range(tries):
        if condition():
            return
        await asyncio.sleep(step)


def new_app(
    client: FakeClient | None = None, clock: FakeClock | None = None, *, registry: Registry | None = None
) -> SchedulerApp:
    """``registry``: the plugins profiles may name (default: the in-tree ones)."""
    return SchedulerApp(
        settings=RunSettings(),
        client=client or FakeClient(),
        registry=registry,
        rng=random.Random(1),
        hostname="test",
        clock=clock or FakeClock(),
    )


def pending(name: str, *, scheduler: str = "sp", **kwargs: Any) -> dict[str, Any]:
    pod = make_pod(name, **kwargs)
    pod["spec"]["schedulerName"] = scheduler
    return pod


def drive(app: SchedulerApp, profile: str = "sp") -> None:
    """Run every currently poppable pod of ``profile`` through one cycle and let binds/reports finish."""

    async def go() -> None:
        runtime = app.profiles[profile]
        while (qpod := runtime.queue.pop_nowait()) is not None:
            app.cycles.schedule_one(runtime, qpod)
        await app.drain()

    asyncio.run(go())


def apply_manifests(app: SchedulerApp, docs: list[dict[str, Any]]) -> None:
    """An example file's documents as the operator would see them applied: each SchedulerProfile applied (and
    Ready), each PodGroup and Pod as its watch's ADDED event (given a uid and a resourceVersion)."""
    for doc in docs:
        meta = doc["metadata"]
        meta.update(uid=f"uid-{meta['name']}", resourceVersion="1")
        if doc["kind"] == "SchedulerProfile":
            assert app.apply_profile(name=meta["name"], spec=doc["spec"], generation=1).ready
        elif doc["kind"] == "PodGroup":
            app.on_watch_event("PodGroup", "ADDED", doc)
        else:
            app.on_pod_event("ADDED", doc)
