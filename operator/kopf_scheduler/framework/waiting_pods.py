"""Pods a Permit plugin asked to wait, until every waiting plugin allows them, one rejects or time runs out.

Restates upstream's ``waitingPod`` (``framework/runtime/waiting_pods_map.go``): one timer per waiting plugin,
allowed once all of them allow, rejected by the first rejection or the first timeout, with upstream's
timeout text. The framework keeps them by pod UID (upstream's ``waitingPodsMap``) and awaits :meth:`wait`
in the binding cycle.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING

from kopf_scheduler.framework.status import SUCCESS, Status
from kopf_scheduler.go_format import go_duration

if TYPE_CHECKING:
    from kopf_scheduler.state.pod_info import PodInfo


class WaitingPod:
    """A pod a Permit plugin asked to wait: bound once every waiting plugin allows, unless one rejects."""

    def __init__(self, pod: PodInfo, plugin_timeouts: Mapping[str, float]) -> None:
        self.pod = pod
        #: When the pod began to wait (wall clock, for ``/explain``).
        self.since = time.time()
        now = time.monotonic()
        self._timeouts = dict(plugin_timeouts)
        self._deadlines = {plugin: now + timeout for plugin, timeout in plugin_timeouts.items()}
        self._result: Status | None = None
        self._done = asyncio.Event()

    @property
    def pending_plugins(self) -> list[str]:
        return list(self._deadlines)

    @property
    def deadlines(self) -> dict[str, float]:
        """Each plugin still waited for, with the ``time.monotonic()`` at which its wait times out."""
        return dict(self._deadlines)

    def allow(self, plugin: str) -> None:
        self._deadlines.pop(plugin, None)
        if not self._deadlines:
            self._resolve(SUCCESS)

    def reject(self, plugin: str, message: str) -> None:
        self._resolve(Status.unschedulable(message, plugin=plugin))

    def preempt(self, plugin: str, message: str) -> bool:
        """Upstream ``Preempt``: stop waiting with an Error, not Unschedulable, so the pod is retried after backoff
        instead of parked; False when it was already allowed or rejected."""
        if self._result is not None:
            return False
        self._resolve(Status.as_error(RuntimeError(message), plugin=plugin))
        return True

    def _resolve(self, status: Status) -> None:
        if self._result is None:
            self._result = status
            self._done.set()

    async def wait(self) -> Status:
        while self._result is None:
            plugin, deadline = min(self._deadlines.items(), key=lambda item: item[1])
            try:
                await asyncio.wait_for(self._done.wait(), max(0.0, deadline - time.monotonic()))
            except TimeoutError:
                if self._result is None and plugin in self._deadlines:
                    waited = go_duration(self._timeouts[plugin])
                    self.reject(plugin, f"rejected due to timeout after waiting {waited} at plugin {plugin}")
        return self._result


__all__ = ["WaitingPod"]
