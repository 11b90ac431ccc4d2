"""Which cluster events requeue a pod each plugin of a pipeline rejected: the plugins say so themselves.

Upstream builds its ``queueingHintMap`` (``scheduler.go`` ``buildQueueingHintMap``) by asking every plugin
of a profile that implements ``EnqueueExtensions`` for its ``EventsToRegister``. We do the same: each
plugin *instance* answers through :meth:`Plugin.events_to_register <kopf_scheduler.framework.interface.
Plugin.events_to_register>` (so it reads its own args), and this module only dispatches. It knows no
plugin by name: the hints live in the plugin modules.

The scheduling queue keeps a pod in ``unschedulablePods`` until an event arrives that one of the plugins
that rejected it registered, *and* that plugin's hint says ``Queue`` for this pod and this old/new object
pair. Only plugins enabled at a point that can reject a pod take part (upstream
``shouldHaveEnqueueExtensions``); a plugin that does not implement the hook is registered for every event
with an always-Queue hint (:data:`~kopf_scheduler.framework.events.ALL_EVENTS`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from kopf_scheduler.framework.events import ALL_EVENTS, ClusterEventWithHint
from kopf_scheduler.framework.extension_points import ALL_EXTENSION_POINTS, ExtensionPoint

if TYPE_CHECKING:
    from kopf_scheduler.framework.interface import Plugin
    from kopf_scheduler.framework.runtime import Framework

#: The extension points whose plugins can reject a pod and therefore register events.
REJECTING_EXTENSION_POINTS: frozenset[ExtensionPoint] = frozenset(
    {
        ExtensionPoint.PRE_ENQUEUE,
        ExtensionPoint.PRE_FILTER,
        ExtensionPoint.FILTER,
        ExtensionPoint.RESERVE,
        ExtensionPoint.PERMIT,
    }
)


def registrations_of(plugin: Plugin) -> list[ClusterEventWithHint]:
    """What one plugin registers: its own list, or every event (always Queue) if it declares none."""
    declared = plugin.events_to_register()
    return list(ALL_EVENTS) if declared is None else list(declared)


def events_for_framework(framework: Framework) -> dict[str, list[ClusterEventWithHint]]:
    """Registrations of every plugin a built pipeline enables where it can reject, ready for
    ``SchedulingQueue(plugin_events=...)``, keyed by plugin name."""
    result: dict[str, list[ClusterEventWithHint]] = {}
    for point in ALL_EXTENSION_POINTS:
        if point not in REJECTING_EXTENSION_POINTS:
            continue
        for ref in framework.profile.enabled(point):
            if ref.name not in result:
                result[ref.name] = registrations_of(framework.plugins[ref.name])
    return result


__all__ = ["REJECTING_EXTENSION_POINTS", "events_for_framework", "registrations_of"]
