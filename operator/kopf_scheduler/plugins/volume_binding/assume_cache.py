"""VolumeBinding's assume cache: assumed PVs and PVCs kept beside the watched ones (upstream
``plugins/volumebinding/passive_assume_cache.go``, what 1.36's VolumeBinding uses).

Reserve makes an assumed version the *latest* one of its object (a PV pre-bound to a claim, a claim with the
selected-node annotation) so that the next pods' cycles see it taken, while the API version stays what PreBind
checks against. An assumed version stands only while it carries the same resourceVersion as the watched object:
any watch event with another version supersedes it (an informer resync with the same version does not), a
deletion drops it. Unreserve restores the watched version. Assuming needs the watched object at the very
version assumed ("only objects yet to be sent to the API server").

Upstream's cache reads the informer's store; here the watched objects live in
:class:`~kopf_scheduler.state.objects.ClusterObjects` (``cache.objects``), fed by the watch handlers, so this
cache holds only the assumed versions, by key, and judges them against the store on every read (upstream
expires them on the informer's events; reading lazily gives the same answers without a second handler).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from kopf_scheduler.go_format import go_quote
from kopf_scheduler.state.objects import (
    KINDS,
    PERSISTENT_VOLUME,
    PERSISTENT_VOLUME_CLAIM,
    ClusterObjects,
    Key,
    object_key,
)

#: An API object as the store holds it (assumed versions are copies the binder made; never mutated here).
Obj = Mapping[str, Any]

#: The resource upstream's NotFound errors name (``persistentvolumes "pv1" not found``).
_RESOURCES = {PERSISTENT_VOLUME: "persistentvolumes", PERSISTENT_VOLUME_CLAIM: "persistentvolumeclaims"}


class AssumeCacheError(Exception):
    """An unknown object, or one assumed at another version than the watched one (upstream's texts)."""


class NotFoundError(AssumeCacheError):
    """The API server's NotFound text for an object the store does not hold."""


class AssumeCache:
    """Assumed versions of one kind (PersistentVolume or PersistentVolumeClaim) over the watched store."""

    __slots__ = ("_assumed", "_kind", "_resource", "_storage")

    def __init__(self, kind: str, storage: Callable[[], ClusterObjects]) -> None:
        self._kind = kind
        self._storage = storage
        self._resource = _RESOURCES[kind]
        self._assumed: dict[Key, Obj] = {}

    # -- reading --------------------------------------------------------------------------------------------
    def get(self, name: str, namespace: str = "") -> Obj | None:
        """The latest version: the assumed one while it stands, else the watched one (None if unknown)."""
        key = self._key(name, namespace)
        api = self._storage().get(self._kind, name, namespace)
        return None if api is None else self._latest(key, api)

    def get_api(self, name: str, namespace: str = "") -> Obj | None:
        """The watched version, ignoring any assumption (upstream ``GetAPIObj``)."""
        return self._storage().get(self._kind, name, namespace)

    def list(self, keep: Callable[[Obj], bool]) -> list[Obj]:
        """The latest version of every object whose *watched* version passes ``keep`` (upstream lists by an
        index computed on the informer's objects), in the store's order."""
        return [self._latest(self._key_of(obj), obj) for obj in self._storage().all(self._kind) if keep(obj)]

    def is_assumed(self, name: str, namespace: str = "") -> bool:
        latest = self.get(name, namespace)
        return latest is not None and latest is self._assumed.get(self._key(name, namespace))

    def __len__(self) -> int:
        return len(self._assumed)

    # -- writing --------------------------------------------------------------------------------------------
    def assume(self, obj: Obj) -> None:
        """Make ``obj`` the latest version of its object until restored or superseded; ``obj`` must carry
        the watched object's resourceVersion."""
        key = self._key_of(obj)
        printed = self._printed(key)
        api = self._storage().get(self._kind, key[1], key[0])
        if api is None:
            raise NotFoundError(f"{self._resource} {go_quote(printed)} not found")
        stored, assumed = _version(api), _version(obj)
        if stored != assumed:
            raise AssumeCacheError(f"{go_quote(printed)} is out of sync (stored: {stored}, assume: {assumed})")
        self._assumed[key] = obj

    def restore(self, obj: Obj) -> None:
        """Drop the assumption of ``obj``'s object if it is ``obj``'s version (upstream ``Restore``)."""
        key = self._key_of(obj)
        assumed = self._assumed.get(key)
        if assumed is not None and _version(assumed) == _version(obj):
            del self._assumed[key]

    def not_found(self, name: str, namespace: str = "") -> NotFoundError:
        """The NotFound error upstream's cache gives for this object."""
        return NotFoundError(f"{self._resource} {go_quote(self._printed(self._key(name, namespace)))} not found")

    # -- internals ------------------------------------------------------------------------------------------
    def _key(self, name: str, namespace: str) -> Key:
        return (namespace if KINDS[self._kind] else "", name)

    def _key_of(self, obj: Obj) -> Key:
        return object_key(self._kind, obj)

    @staticmethod
    def _printed(key: Key) -> str:
        return f"{key[0]}/{key[1]}" if key[0] else key[1]

    def _latest(self, key: Key, api: Obj) -> Obj:
        assumed = self._assumed.get(key) if self._assumed else None
        if assumed is None:
            return api
        if _version(assumed) != _version(api):
            del self._assumed[key]  # the watch brought another version: the assumption expired
            return api
        return assumed


def _version(obj: Obj) -> str:
    return (obj.get("metadata") or {}).get("resourceVersion") or ""
