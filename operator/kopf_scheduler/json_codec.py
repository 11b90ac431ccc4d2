"""Compact JSON for the per-pod paths: orjson where it can, the standard library where it cannot.

Three things happen to JSON once or more per scheduled pod: the kept pod object is encoded compactly after
each of its watch events and decoded again when something reads it (``PodInfo.compact``/``obj``), the Binding
and the ``Scheduled`` event are encoded for their POSTs, and the reconciling LIST's pages are decoded at
start-up (10000s of pods). The standard library's encoder and decoder were ≈ 4% of the operator's CPU per
scheduled pod at 5000 nodes (py-spy, docs/benchmarks.md); orjson does the same work several times faster.

Both sides are the same JSON: compact (no spaces), UTF-8 and not ASCII-escaped. What orjson refuses (keys
that are not strings, integers beyond 64 bits, a missing orjson) goes through the standard library instead,
so callers see one behaviour: :func:`dumps` raises ``TypeError``/``ValueError`` as ``json.dumps`` does, and
:func:`loads` raises ``ValueError`` (``json.JSONDecodeError``) on text that is not JSON.

The reconciling LIST's pages of pods and nodes are decoded by :func:`loads_object_list`, which leaves each
item's ``metadata.managedFields`` out while it decodes (msgspec, typed): they are most of a listed pod's
objects and nothing reads them, so decoding them into dicts only to drop them was most of the LIST's cost.

kube-scheduler has no counterpart (Go's encoding/json, or protobuf to the API server; its informers drop
``managedFields`` after decoding). Pure functions, importable from every layer.
"""

from __future__ import annotations

import functools
import json
from typing import Any

try:
    import orjson
except ImportError:  # pragma: no cover - a dependency on every platform we ship; kept working without it
    orjson = None  # type: ignore[assignment]  # None: fall back to the standard library
try:
    import msgspec
except ImportError:  # pragma: no cover - a dependency on every platform we ship; kept working without it
    msgspec = None  # type: ignore[assignment]  # None: fall back to the standard library

_ENCODER = json.JSONEncoder(separators=(",", ":"), check_circular=False, ensure_ascii=False)


def dumps(value: Any) -> bytes:
    """``value`` as compact UTF-8 JSON bytes, in an allocation of its own size (they are kept: see below)."""
    if orjson is not None:
        try:
            # Kept for long, orjson's own result holds far more memory than its length: 50000 kept pods took
            # 214 MiB of peak RSS for 31 MiB of JSON, 52 MiB once copied (bench/json_memory.py); at 50000 pending
            # pods the operator peaked 135 MiB higher with orjson's results kept. The copy costs ≈ 0.1 µs per KB.
            return memoryview(orjson.dumps(value)).tobytes()
        except TypeError:  # orjson.JSONEncodeError: non-string keys, integers beyond 64 bits, ...
            pass
    return _ENCODER.encode(value).encode()


def loads(data: bytes | str) -> Any:
    """The value of the JSON text ``data``."""
    if orjson is not None:
        try:
            return orjson.loads(data)
        except ValueError:  # orjson.JSONDecodeError: let the standard library decide (and word the error)
            pass
    return json.loads(data)


def loads_object_list(data: bytes | str) -> dict[str, Any]:
    """A LIST response (``apiVersion``, ``kind``, ``metadata``, ``items``) whose items are made of ``apiVersion``,
    ``kind``, ``metadata``, ``spec`` and ``status`` alone (pods, nodes), each item's ``metadata.managedFields``
    left out.

    The same value as :func:`loads` followed by dropping ``managedFields`` from every item, decoded in one pass
    that skips them instead of building them (≈ 2× faster for a page of pods, with fewer objects to free;
    docs/benchmarks.md). An item keeps every ``ObjectMeta`` field of the Kubernetes API but ``managedFields``;
    a top-level field outside the five above is not kept, so kinds with other top-level fields (StorageClass,
    CSIStorageCapacity, ...) go through :func:`loads`.
    """
    if msgspec is not None:
        try:
            page = _object_list_decoder().decode(data)
        except ValueError:  # msgspec.DecodeError: let loads decide (and word the error)
            pass
        else:
            return {**_set_fields(page, _LIST_FIELDS), "items": [_item_dict(item) for item in page.items]}
    value = loads(data)
    items = value.get("items") if isinstance(value, dict) else None
    if isinstance(items, list):
        value["items"] = [without_managed_fields(item) for item in items]
    return value  # type: ignore[no-any-return]  # decoded JSON: the caller checks what it reads


def without_managed_fields(item: Any) -> Any:
    """``item`` without ``metadata.managedFields`` (itself when it has none): nothing reads them, and they are a
    large share of every pod's and node's size (kube-scheduler's informers drop them too). (Interning every key
    and short string of cached objects as well was measured: it saved ~40 MiB of Python heap at 10000 pods but
    cost ~8% of the operator's CPU in the e2e benchmark, and no measurable RSS.)"""
    meta = item.get("metadata") if isinstance(item, dict) else None
    if not isinstance(meta, dict) or "managedFields" not in meta:
        return item
    return {**item, "metadata": {key: value for key, value in meta.items() if key != "managedFields"}}


_LIST_FIELDS = ("apiVersion", "kind", "metadata")
_ITEM_FIELDS = (*_LIST_FIELDS, "spec", "status")


def _set_fields(struct: Any, names: tuple[str, ...]) -> dict[str, Any]:
    """The fields of a decoded struct that the JSON had."""
    unset = msgspec.UNSET
    return {name: value for name in names if (value := getattr(struct, name)) is not unset}


def _item_dict(item: Any) -> dict[str, Any]:
    """A decoded item as the dict :func:`loads` would give (the fields it had, metadata as a dict)."""
    out = _set_fields(item, _ITEM_FIELDS)
    if "metadata" in out:
        out["metadata"] = msgspec.to_builtins(out["metadata"])  # the fields it had (unset ones are left out)
    return out


@functools.cache
def _object_list_decoder() -> Any:
    """The typed decoder of :func:`loads_object_list`, built on first use (its classes need msgspec).

    Every field is typed ``Any`` (decoded as :func:`loads` would), so no value is ever refused for its type;
    only ``metadata.managedFields`` is undeclared, and msgspec skips undeclared fields without building them.
    A ``metadata`` that is not an object fails the decoding, and :func:`loads_object_list` falls back.
    """
    unset: Any = msgspec.UNSET
    meta = msgspec.defstruct("ObjectMeta", [(name, Any, unset) for name in _OBJECT_META_FIELDS], omit_defaults=True)
    item: Any = msgspec.defstruct("Item", [(name, meta if name == "metadata" else Any, unset) for name in _ITEM_FIELDS])
    page_fields = [*((name, Any, unset) for name in _LIST_FIELDS), ("items", list[item], [])]
    return msgspec.json.Decoder(msgspec.defstruct("ObjectList", page_fields))


#: ``ObjectMeta``'s fields in the Kubernetes API (v1.36) but ``managedFields``.
_OBJECT_META_FIELDS = (
    "name",
    "generateName",
    "namespace",
    "selfLink",
    "uid",
    "resourceVersion",
    "generation",
    "creationTimestamp",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
    "labels",
    "annotations",
    "ownerReferences",
    "finalizers",
)
