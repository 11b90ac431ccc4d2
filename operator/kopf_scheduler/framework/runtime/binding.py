"""The runners of the end of the scheduling cycle and of the binding cycle: Reserve (and Unreserve in reverse),
Permit with its waiting pods, PreBindPreFlight, PreBind, Bind by the first plugin that does not Skip, PostBind
(upstream ``RunReservePluginsReserve`` … ``RunPostBindPlugins`` and ``WaitOnPermit`` of
``framework/runtime/framework.go``; the waiting pods are :mod:`kopf_scheduler.framework.waiting_pods`).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from kopf_scheduler.framework.cycle_state import CycleState
from kopf_scheduler.framework.interface import BindPlugin, PermitPlugin, PostBindPlugin, PreBindPlugin, ReservePlugin
from kopf_scheduler.framework.runtime.common import PluginTimer, wrapped_error
from kopf_scheduler.framework.status import SUCCESS, Code, Status
from kopf_scheduler.framework.waiting_pods import WaitingPod
from kopf_scheduler.go_format import go_quote

if TYPE_CHECKING:
    from kopf_scheduler.state.pod_info import PodInfo

logger = logging.getLogger("kopf_scheduler.framework.runtime")

#: Upstream caps any Permit wait at 15 minutes.
MAX_PERMIT_TIMEOUT = 15 * 60.0
#: The reason upstream's RunPermitPlugins appends to a Wait status (v1.36: without the pod's name).
PERMIT_WAIT_REASON = "one or more plugins asked to wait and no plugin rejected pod"


class BindingRunner(PluginTimer):
    """Reserve, Permit and the binding cycle over one profile's plugins (a part of the Framework)."""

    reserve_plugins: tuple[tuple[str, ReservePlugin], ...]
    permit_plugins: tuple[tuple[str, PermitPlugin], ...]
    pre_bind_plugins: tuple[tuple[str, PreBindPlugin], ...]
    bind_plugins: tuple[tuple[str, BindPlugin], ...]
    post_bind_plugins: tuple[tuple[str, PostBindPlugin], ...]
    #: Pods a Permit plugin asked to wait, by uid (upstream ``waitingPodsMap``).
    waiting_pods: dict[str, WaitingPod]

    # -- Reserve / Permit ------------------------------------------------------------------------------
    def run_reserve_plugins_reserve(self, state: CycleState, pod: PodInfo, node_name: str) -> Status:
        for name, plugin in self.reserve_plugins:
            try:
                started = self._started(state)
                status = plugin.reserve(state, pod, node_name)
                self._observe(started, name, "Reserve", status)
            except Exception as exc:
                return wrapped_error(f"running Reserve plugin {go_quote(name)}", exc)
            if not status.is_success:
                if status.is_rejected:
                    return status.with_plugin(name)
                return wrapped_error(f"running Reserve plugin {go_quote(name)}", status)
        return SUCCESS

    def run_reserve_plugins_unreserve(self, state: CycleState, pod: PodInfo, node_name: str) -> None:
        """Every Reserve plugin's Unreserve, in reverse order; failures are logged, never raised."""
        for name, plugin in reversed(self.reserve_plugins):
            try:
                plugin.unreserve(state, pod, node_name)
            except Exception:
                logger.exception("Unreserve of plugin %s failed for pod %s", name, pod.key)

    def run_permit_plugins(self, state: CycleState, pod: PodInfo, node_name: str) -> Status:
        """Rejection or error stops at once; Wait from any plugin parks the pod as a :class:`WaitingPod`."""
        waits: dict[str, float] = {}
        wait_status = SUCCESS
        for name, plugin in self.permit_plugins:
            try:
                started = self._started(state)
                status, timeout = plugin.permit(state, pod, node_name)
                self._observe(started, name, "Permit", status)
            except Exception as exc:
                return wrapped_error(f"running Permit plugin {go_quote(name)}", exc).with_plugin(name)
            if status.is_success:
                continue
            if status.is_rejected:
                return status.with_plugin(name)
            if status.code is Code.WAIT:
                waits[name] = min(float(timeout), MAX_PERMIT_TIMEOUT)
                wait_status = status
                continue
            return wrapped_error(f"running Permit plugin {go_quote(name)}", status).with_plugin(name)
        if waits:
            self.waiting_pods[pod.uid] = WaitingPod(pod, waits)
            # Upstream returns the last waiting plugin's status with this reason appended (no pod name).
            return Status(Code.WAIT, (*wait_status.reasons, PERMIT_WAIT_REASON), wait_status.plugin, wait_status.error)
        return SUCCESS

    def will_wait_on_permit(self, pod: PodInfo) -> bool:
        return pod.uid in self.waiting_pods

    def reject_waiting_pod(self, uid: str, plugin: str = "", message: str = "removed") -> bool:
        waiting = self.waiting_pods.get(uid)
        if waiting is None:
            return False
        waiting.reject(plugin, message)
        return True

    def allow_waiting_pod(self, uid: str, plugin: str) -> bool:
        """Upstream ``GetWaitingPod(uid).Allow(plugin)``: ``plugin`` no longer holds the pod at Permit; its
        binding cycle goes on once no plugin holds it. True if it was waiting."""
        waiting = self.waiting_pods.get(uid)
        if waiting is None:
            return False
        waiting.allow(plugin)
        return True

    def preempt_waiting_pod(self, uid: str, plugin: str) -> bool:
        """Upstream's preemption of a pod waiting at Permit (``GetWaitingPod(uid).Preempt(plugin, "preempted")``):
        its binding cycle fails with an Error (``waiting on permit for pod: preempted``). True if it was waiting."""
        waiting = self.waiting_pods.get(uid)
        return waiting is not None and waiting.preempt(plugin, "preempted")

    async def wait_on_permit(self, pod: PodInfo) -> Status:
        waiting = self.waiting_pods.get(pod.uid)
        if waiting is None:
            return SUCCESS
        try:
            status = await waiting.wait()
        finally:
            self.waiting_pods.pop(pod.uid, None)
        if status.is_success or status.is_rejected:
            return status
        return wrapped_error("waiting on permit for pod", status).with_plugin(status.plugin)

    # -- binding cycle ---------------------------------------------------------------------------------
    def run_pre_bind_pre_flights(self, state: CycleState, pod: PodInfo, node_name: str) -> Status:
        """Ask every PreBind plugin whether it has work: Success if any has, Skip if none, else an Error.

        Upstream ``RunPreBindPreFlights``: the plugins that answer Skip are remembered in ``state`` and their
        PreBind is not run; any other answer than Success, Skip or Error is itself an error.
        """
        skipped: set[str] = set()
        verdict = Status.skip()
        for name, plugin in self.pre_bind_plugins:
            try:
                status = plugin.pre_bind_pre_flight(state, pod, node_name)
            except Exception as exc:
                return wrapped_error(f"running PreBindPreFlight {go_quote(name)}", exc)
            if status.code is Code.ERROR:
                return wrapped_error(f"running PreBindPreFlight {go_quote(name)}", status)
            if status.is_success:
                verdict = SUCCESS
            elif status.is_skip:
                skipped.add(name)
            else:
                text = (
                    f"PreBindPreFlight {name} returned {go_quote(status.code.label)}, which is unsupported. "
                    "It is supposed to return Success, Skip, or Error status"
                )
                return Status.as_error(RuntimeError(text))
        state.skip_pre_bind_plugins = skipped
        return verdict

    async def run_pre_bind_plugins(self, state: CycleState, pod: PodInfo, node_name: str) -> Status:
        for name, plugin in self.pre_bind_plugins:
            if name in state.skip_pre_bind_plugins:
                continue
            try:
                started = self._started(state)
                status = await plugin.pre_bind(state, pod, node_name)
                self._observe(started, name, "PreBind", status)
            except Exception as exc:
                return wrapped_error(f"running PreBind plugin {go_quote(name)}", exc)
            if not status.is_success:
                if status.is_rejected:
                    return status.with_plugin(name)
                return wrapped_error(f"running PreBind plugin {go_quote(name)}", status)
        return SUCCESS

    async def run_bind_plugins(self, state: CycleState, pod: PodInfo, node_name: str) -> Status:
        """Bind plugins in order until one does not Skip; its verdict is the result."""
        status = Status.skip()
        for name, plugin in self.bind_plugins:
            try:
                started = self._started(state)
                status = await plugin.bind(state, pod, node_name)
                self._observe(started, name, "Bind", status)
            except Exception as exc:
                return wrapped_error(f"running Bind plugin {go_quote(name)}", exc)
            if status.is_skip:
                continue
            if status.is_success:
                return status
            if status.is_rejected:
                return status.with_plugin(name)
            return wrapped_error(f"running Bind plugin {go_quote(name)}", status)
        return status

    def run_post_bind_plugins(self, state: CycleState, pod: PodInfo, node_name: str) -> None:
        for name, plugin in self.post_bind_plugins:
            try:
                plugin.post_bind(state, pod, node_name)
            except Exception:
                logger.exception("PostBind of plugin %s failed for pod %s", name, pod.key)


__all__ = ["MAX_PERMIT_TIMEOUT", "BindingRunner"]
