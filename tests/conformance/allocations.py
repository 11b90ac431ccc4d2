"""What a bound pod was given besides its node: the PV each claim was bound to, and the record of the binding.

Why: the node alone does not say the two schedulers agree. VolumeBinding picks, for each unbound claim a
pod needs, one PersistentVolume among those that match on the chosen node (upstream ``volumebinding``
``findMatchingVolumes``: the smallest that fits, by the order of its index); DynamicResources picks devices
(compared by the runner from claims, devices.py). Upstream's writes are denied (volume_harness.py), so its
choice of volumes is read from its log: ``AssumePodVolumes: GetBindVolumeToClaim`` (``binder.go``, V(5), one
line per static binding at Reserve, the runner runs upstream with ``binder=5``), which names the PV and the
claim. Ours binds for real: its claims' ``spec.volumeName`` once bound. Claims provisioned dynamically have no
PV chosen by a scheduler (the provisioner makes one), so they are not compared.

The record of a binding: upstream's bind is denied, so its Scheduled event and PodScheduled condition are
restated from v1.36.3: ``schedule_one.go`` ``handleBindingCycleSuccess`` records event type ``Normal``,
reason ``Scheduled``, action ``Binding``, note ``Successfully assigned <ns>/<name> to <node>``, reported by
the profile's scheduler name (``profile.NewRecorderFactory``); the API server's Binding subresource sets
``PodScheduled=True`` with neither reason nor message (``registry/core/pod/storage`` ``setPodNodeAndMetadata``).
Ours is read back and compared with those.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from tests.conformance.oracle import parse_line

ASSUMED_BINDING = "AssumePodVolumes: GetBindVolumeToClaim"


def upstream_static_bindings(lines: Iterable[str], pod_key: str) -> dict[str, str]:
    """claim ``ns/name`` → PV name, from upstream's last Reserve of ``pod_key`` in ``lines``."""
    chosen: dict[str, str] = {}
    for parsed in map(parse_line, lines):
        if parsed is None or parsed[1] != ASSUMED_BINDING or parsed[2].get("pod") != pod_key:
            continue
        chosen[parsed[2]["PVC"]] = parsed[2]["PV"]
    return chosen


def expected_record(namespace: str, name: str, node: str, scheduler: str) -> dict[str, Any]:
    """Upstream's Scheduled event and PodScheduled condition for a pod bound to ``node``."""
    return {
        "event": {
            "type": "Normal",
            "reason": "Scheduled",
            "action": "Binding",
            "note": f"Successfully assigned {namespace}/{name} to {node}",
            "reportingController": scheduler,
        },
        "condition": {"status": "True", "reason": None, "message": None},
    }


def record_of(pod: Mapping[str, Any], events: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    """What a bound pod carries: its Scheduled event (core/v1 view) and its PodScheduled condition."""
    scheduled = [e for e in events if e.get("reason") == "Scheduled"]
    event = scheduled[0] if len(scheduled) == 1 else {"count": len(scheduled)}
    condition = next(
        (c for c in (pod.get("status") or {}).get("conditions") or () if c.get("type") == "PodScheduled"), {}
    )
    return {
        "event": {
            "type": event.get("type"),
            "reason": event.get("reason"),
            "action": event.get("action"),
            "note": event.get("message"),
            "reportingController": event.get("reportingComponent") or (event.get("source") or {}).get("component"),
        }
        if "count" not in event
        else event,
        "condition": {k: condition.get(k) for k in ("status", "reason", "message")},
    }


def record_problems(expected: Mapping[str, Any], actual: Mapping[str, Any]) -> list[str]:
    """Where ours's record of a binding differs from upstream's (one problem per part)."""
    return [
        f"binding record: {part} upstream {expected[part]}, ours {actual[part]}"
        for part in ("event", "condition")
        if expected[part] != actual[part]
    ]
