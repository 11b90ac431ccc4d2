"""What every extension point's runner shares: the plugin timer and upstream's error wrapping.

Upstream's ``frameworkImpl`` (``framework/runtime/framework.go``) times plugins through ``metricsRecorder`` in
sampled cycles and wraps a plugin's error as ``fmt.Errorf("running <plugin>: %w", err)``; the runners of this
package (:mod:`.filtering`, :mod:`.scoring`, :mod:`.binding`) and the framework itself (:mod:`.framework`) do
both through :class:`PluginTimer` and :func:`wrapped_error`.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from kopf_scheduler.framework.cycle_state import CycleState
from kopf_scheduler.framework.status import Code, Status

#: ``scheduler_plugin_execution_duration_seconds``: (plugin, extension point, status code, seconds).
ObservePlugin = Callable[[str, str, str, float], None]


def error_text(error: BaseException) -> str:
    return str(error) or type(error).__name__


def wrapped_error(prefix: str, status_or_error: Status | BaseException) -> Status:
    """Upstream's ``AsStatus(fmt.Errorf("<prefix>: %w", err))``: an Error status with a prefixed message.

    Like Go's ``%w``, the original exception stays reachable: it is the status's ``error`` (so a caller can
    still see, say, the HTTP code of an ``APIError`` raised by a Bind plugin).
    """
    cause: BaseException | None
    if isinstance(status_or_error, BaseException):
        message, cause = error_text(status_or_error), status_or_error
    else:
        message, cause = status_or_error.message, status_or_error.error
    text = f"{prefix}: {message}"
    return Status(Code.ERROR, (text,), "", cause if cause is not None else RuntimeError(text))


class PluginTimer:
    """Plugin durations of the sampled cycles (upstream samples 10% of cycles), for every runner."""

    #: Called in sampled cycles only (``CycleState.record_plugin_metrics``); None records nothing.
    observe_plugin: ObservePlugin | None

    def _started(self, state: CycleState) -> float | None:
        """A start time when this cycle's plugin durations are recorded."""
        return time.perf_counter() if state.record_plugin_metrics and self.observe_plugin is not None else None

    def _observe(self, started: float | None, plugin: str, point: str, status: Status) -> None:
        if started is not None and self.observe_plugin is not None:
            self.observe_plugin(plugin, point, status.code.label, time.perf_counter() - started)


__all__ = ["ObservePlugin", "PluginTimer", "error_text", "wrapped_error"]
