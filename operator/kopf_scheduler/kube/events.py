"""events.k8s.io/v1 Event bodies, as kube-scheduler's event recorder writes them.

kube-scheduler posts ``Scheduled`` (Normal, action Binding) and ``FailedScheduling`` (Warning, action
Scheduling) with reportingController = the profile's scheduler name and reportingInstance =
``<schedulerName>-<hostname>``; notes are cut to 1024 characters with the last 4 replaced by " ...".
"""

from __future__ import annotations

import datetime
import secrets
from typing import Any

MAX_NOTE_LENGTH = 1024


def truncate_note(note: str) -> str:
    """Upstream's event note limit: keep 1020 characters and mark the cut with " ..."."""
    if len(note) <= MAX_NOTE_LENGTH:
        return note
    return note[: MAX_NOTE_LENGTH - 4] + " ..."


def micro_time(now: datetime.datetime | None = None) -> str:
    """A metav1.MicroTime: RFC 3339 with microseconds, UTC."""
    now = now or datetime.datetime.now(datetime.UTC)
    return now.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def event_body(
    *,
    regarding: dict[str, Any],
    event_type: str,
    reason: str,
    action: str,
    note: str,
    reporting_controller: str,
    reporting_instance: str,
    related: dict[str, Any] | None = None,
    now: datetime.datetime | None = None,
) -> dict[str, Any]:
    """The body of one Event about ``regarding`` (a pod or a SchedulerProfile object); ``related`` is a second
    object it involves (a preemption's preemptor), referenced the same way."""
    meta = regarding.get("metadata") or {}
    body: dict[str, Any] = {
        "apiVersion": "events.k8s.io/v1",
        "kind": "Event",
        "metadata": {
            # Same naming as client-go's recorder: <object name>.<unique hex suffix>.
            "name": f"{meta.get('name')}.{secrets.token_hex(8)}",
            "namespace": meta.get("namespace") or "default",
        },
        "eventTime": micro_time(now),
        "reportingController": reporting_controller,
        "reportingInstance": reporting_instance,
        "action": action,
        "reason": reason,
        "regarding": object_reference(regarding),
        "note": truncate_note(note),
        "type": event_type,
    }
    if related is not None:
        body["related"] = object_reference(related)
    return body


def object_reference(obj: dict[str, Any]) -> dict[str, Any]:
    """An ObjectReference to ``obj`` (a Pod unless it says otherwise), without the fields it lacks."""
    meta = obj.get("metadata") or {}
    reference = {
        "apiVersion": obj.get("apiVersion", "v1"),
        "kind": obj.get("kind", "Pod"),
        "name": meta.get("name"),
        "namespace": meta.get("namespace"),
        "uid": meta.get("uid"),
        "resourceVersion": meta.get("resourceVersion"),
    }
    return {k: v for k, v in reference.items() if v is not None}
