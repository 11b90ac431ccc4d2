"""Queueing-hint evaluation: which events may help a rejected pod, upstream's ``queueingHintMap`` with
``isEventOfInterest`` and ``isPodWorthRequeuing`` (``pkg/scheduler/backend/queue/scheduling_queue.go``) and
``buildQueueingHintMap`` (``pkg/scheduler/scheduler.go``), v1.36 (QueueingHints GA since 1.34).

Each plugin that can reject a pod registers the cluster events that could make the pod schedulable, each
with an optional hint function (``QueueSkip`` / ``Queue``). Only the plugins that rejected a pod are asked
about it, Pending plugins first (their Queue skips the backoff). A plugin without registrations (or every
plugin, when the profile gives none) is taken to register every event with an always-Queue hint; one seen
for the first time widens the interest at once. A plugin registering ``Node/Add`` but not
``Node/UpdateNodeTaint`` also gets ``Node/UpdateNodeTaint`` with an always-Queue hint (upstream's mitigation
for issue 109437, still applied in 1.36).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping, Sequence
from enum import IntEnum
from typing import Any

from kopf_scheduler.framework.events import (
    ALL_EVENTS,
    ActionType,
    ClusterEvent,
    ClusterEventWithHint,
    EventResource,
    QueueingHint,
    object_uid,
)
from kopf_scheduler.queue.queued_pod import QueuedPodInfo

log = logging.getLogger(__name__)

PluginEvents = Mapping[str, Sequence[ClusterEventWithHint]]


class Strategy(IntEnum):
    """Upstream ``queueingStrategy``: what an event (or the in-flight replay) means for one pod."""

    SKIP = 0
    AFTER_BACKOFF = 1
    IMMEDIATELY = 2


class QueueingHints:
    """One profile's registrations (upstream's ``queueingHintMap``), and the questions the queue asks them."""

    __slots__ = ("_fallback_active", "_interest_cache", "_registrations", "_unknown_plugins")

    def __init__(self, plugin_events: PluginEvents | None) -> None:
        self._registrations: dict[str, list[ClusterEventWithHint]] = {}
        #: Rejector names without registrations: they fall back to ALL_EVENTS.
        self._unknown_plugins: set[str] = set()
        self._fallback_active = False
        self._interest_cache: dict[ClusterEvent, frozenset[str]] = {}
        self.replace(plugin_events)

    def replace(self, plugin_events: PluginEvents | None) -> None:
        """Take these registrations instead (a profile reload); None registers every event for every plugin."""
        self._registrations = {
            plugin: with_node_taint_mitigation(events) for plugin, events in (plugin_events or {}).items()
        }
        self._unknown_plugins = set()
        self._fallback_active = plugin_events is None
        self._interest_cache.clear()

    def note_plugins(self, plugins: Iterable[str]) -> None:
        """Rejectors met on a pod: those without registrations widen the interest to every event."""
        for plugin in plugins:
            if plugin not in self._registrations and plugin not in self._unknown_plugins:
                self._unknown_plugins.add(plugin)
                self._fallback_active = True
                self._interest_cache.clear()

    def registrations_of(self, plugin: str) -> Sequence[ClusterEventWithHint]:
        found = self._registrations.get(plugin)
        return ALL_EVENTS if found is None else found

    def interested_plugins(self, event: ClusterEvent) -> frozenset[str]:
        """Plugins (registered, or seen and unregistered) with a registration matching ``event``."""
        found = self._interest_cache.get(event)
        if found is None:
            names = {p for p, regs in self._registrations.items() if any(r.event.matches(event) for r in regs)}
            if any(r.event.matches(event) for r in ALL_EVENTS):
                names |= self._unknown_plugins
            found = self._interest_cache[event] = frozenset(names)
        return found

    def is_event_of_interest(self, event: ClusterEvent) -> bool:
        """Upstream ``isEventOfInterest``: uninteresting events are dropped (not even recorded in flight)."""
        if event.is_wildcard or self.interested_plugins(event):
            return True
        return self._fallback_active and any(r.event.matches(event) for r in ALL_EVENTS)

    def may_lift_gate(self, qpod: QueuedPodInfo, event: ClusterEvent) -> bool:
        """Only events the gating plugin registered can lift a PreEnqueue gate."""
        return any(r.event.matches(event) for r in self.registrations_of(qpod.gating_plugin))

    def worth_requeuing(self, qpod: QueuedPodInfo, event: ClusterEvent, old: Any, new: Any) -> Strategy:
        """Upstream ``isPodWorthRequeuing``: ask only the plugins that rejected this pod."""
        pending = qpod.pending_plugins
        if qpod.failed_with_error:
            return Strategy.AFTER_BACKOFF
        if event.is_wildcard:
            if new is not None and object_uid(new) != qpod.uid:
                return Strategy.SKIP  # a wildcard aimed at another pod
            return Strategy.AFTER_BACKOFF
        strategy = Strategy.SKIP
        # Pending plugins first: their Queue skips the backoff, the strongest answer.
        for plugin in (*sorted(pending), *sorted(qpod.unschedulable_plugins - pending)):
            for registration in self.registrations_of(plugin):
                if not registration.event.matches(event):
                    continue
                if _hint(plugin, registration, qpod, event, old, new) is QueueingHint.QUEUE_SKIP:
                    continue
                if plugin in pending:
                    return Strategy.IMMEDIATELY
                if not pending:
                    return Strategy.AFTER_BACKOFF
                strategy = Strategy.AFTER_BACKOFF
        return strategy


def _hint(
    plugin: str, registration: ClusterEventWithHint, qpod: QueuedPodInfo, event: ClusterEvent, old: Any, new: Any
) -> QueueingHint:
    if registration.hint is None:
        return QueueingHint.QUEUE
    try:
        return QueueingHint(registration.hint(qpod.pod, old, new))
    except Exception:
        # A failing hint must not strand the pod: count it as Queue (upstream does the same).
        log.warning("QueueingHint of %s failed for pod %s on %s", plugin, qpod.pod.key, event.label, exc_info=True)
        return QueueingHint.QUEUE


def with_node_taint_mitigation(events: Sequence[ClusterEventWithHint]) -> list[ClusterEventWithHint]:
    """Upstream ``buildQueueingHintMap``: a plugin that registers Node/Add but not Node/UpdateNodeTaint also
    gets Node/UpdateNodeTaint with an always-Queue hint (issue 109437; still done in 1.36)."""
    result = list(events)
    node_add = any(r.event.resource is EventResource.NODE and r.event.action_type & ActionType.ADD for r in result)
    node_taint = any(
        r.event.resource is EventResource.NODE and r.event.action_type & ActionType.UPDATE_NODE_TAINT for r in result
    )
    if node_add and not node_taint:
        result.append(ClusterEventWithHint(ClusterEvent(EventResource.NODE, ActionType.UPDATE_NODE_TAINT)))
    return result
