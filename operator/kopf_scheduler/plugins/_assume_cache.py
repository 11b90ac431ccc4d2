"""VolumeBinding's assume cache: assumed PVs and PVCs kept beside the watched ones (upstream ``assume_cache.go``).

Upstream wraps the PV and PVC informers in an ``AssumeCache``: every object has its API version and its
*latest* version, which Reserve may replace with an assumed one (a PV pre-bound to a claim, a claim with the
selected-node annotation) so that the next pods' cycles see it taken. Unreserve restores the API version; a
watch event carrying a *newer* resourceVersion supersedes the assumption (an equal one, an informer resync,
does not); a deletion drops both.

Here the watched objects already live in :class:`~kopf_scheduler.state.storage.StorageObjects`
(``cache.storage``), fed by the watch handlers, so this cache holds only the assumed versions, by key, and
judges them lazily against the store on every read: an assumption whose object is gone, or whose object the
store holds at a newer resourceVersion, is dropped then. That is upstream's behaviour without a second
copy of every PV and PVC.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from kopf_scheduler.go_format import go_quote
from kopf_scheduler.plugins._volumes import namespace_of, resource_version
from kopf_scheduler.state.storage import KINDS, PERSISTENT_VOLUME, Key, StorageObjects, object_key

Obj = dict[str, Any]

#: How upstream's two caches name their object type in errors.
_DESCRIPTIONS = {PERSISTENT_VOLUME: "v1.PersistentVolume"}


class AssumeCacheError(Exception):
    """Assuming an object that is unknown or older than the one held (upstream's texts)."""


class AssumeCache:
    """Assumed versions of one kind (PersistentVolume or PersistentVolumeClaim) over the watched store."""

    __slots__ = ("_assumed", "_description", "_kind", "_storage")

    def __init__(self, kind: str, storage: Callable[[], StorageObjects]) -> None:
        self._kind = kind
        self._storage = storage
        self._description = _DESCRIPTIONS.get(kind, f"v1.{kind}")
        self._assumed: dict[Key, Obj] = {}

    # -- reading --------------------------------------------------------------------------------------------
    def get(self, name: str, namespace: str = "") -> Obj | None:
        """The latest version: the assumed one while it stands, else the watched one (None if unknown)."""
        key = self._key(name, namespace)
        api = self._api(key)
        assumed = self._assumed.get(key)
        if assumed is None:
            return api
        if api is None or resource_version(api) > resource_version(assumed):
            del self._assumed[key]  # deleted, or superseded by a newer watched version
            return api
        return assumed

    def get_api(self, name: str, namespace: str = "") -> Obj | None:
        """The watched version, ignoring any assumption (upstream ``GetAPIObj``)."""
        return self._api(self._key(name, namespace))

    def list(self, keep: Callable[[Obj], bool]) -> list[Obj]:
        """The latest version of every object whose *watched* version passes ``keep`` (upstream lists by an
        index computed on the informer's objects), in the store's order."""
        return [self._latest(obj) for obj in self._watched() if keep(obj)]

    def is_assumed(self, name: str, namespace: str = "") -> bool:
        latest = self.get(name, namespace)
        return latest is not None and latest is self._assumed.get(self._key(name, namespace))

    def __len__(self) -> int:
        return len(self._assumed)

    # -- writing --------------------------------------------------------------------------------------------
    def assume(self, obj: Obj) -> None:
        """Make ``obj`` the latest version of its object until restored or superseded.

        Refused when the object is unknown, or when ``obj`` is older than the latest version held.
        """
        key = object_key(self._kind, obj)
        name = self._printed(key)
        current = self.get(key[1], key[0])
        if current is None:
            raise AssumeCacheError(f"could not find {self._description} {go_quote(name)}")
        stored, new = resource_version(current), resource_version(obj)
        if new < stored:
            raise AssumeCacheError(
                f"{self._description} {go_quote(name)} is out of sync (stored: {stored}, assume: {new})"
            )
        self._assumed[key] = obj

    def restore(self, name: str, namespace: str = "") -> None:
        """Drop the assumption: the watched version is the latest again (nothing to do if none)."""
        self._assumed.pop(self._key(name, namespace), None)

    # -- internals ------------------------------------------------------------------------------------------
    def _key(self, name: str, namespace: str) -> Key:
        return (namespace if KINDS[self._kind] else "", name)

    @staticmethod
    def _printed(key: Key) -> str:
        return f"{key[0]}/{key[1]}" if key[0] else key[1]

    def _api(self, key: Key) -> Obj | None:
        return self._storage().get(self._kind, key[1], key[0])

    def _watched(self) -> Iterator[Obj]:
        return self._storage().all(self._kind)

    def _latest(self, api: Obj) -> Obj:
        if not self._assumed:
            return api
        key = (namespace_of(api) if KINDS[self._kind] else "", (api.get("metadata") or {}).get("name") or "")
        assumed = self._assumed.get(key)
        if assumed is None:
            return api
        if resource_version(api) > resource_version(assumed):
            del self._assumed[key]
            return api
        return assumed
