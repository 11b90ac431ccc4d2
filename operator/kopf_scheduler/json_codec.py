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

kube-scheduler has no counterpart (Go's encoding/json, or protobuf to the API server). Pure functions,
importable from every layer.
"""

from __future__ import annotations

import json
from typing import Any

try:
    import orjson
except ImportError:  # pragma: no cover - a dependency on every platform we ship; kept working without it
    orjson = None  # type: ignore[assignment]

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
