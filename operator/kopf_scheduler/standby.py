"""The warm standby: a paused replica keeps its cache current, so that a takeover schedules at once.

Upstream's standby kube-scheduler runs its informers all along; leader election gates only the scheduling
loop, so a new leader schedules from a cache that is already whole. kopf instead stops every watch of a
paused replica and lists each kind again at the resume, so a standby that only waited would take over cold: at
5000 nodes and 50000 pending pods, ≈ 5 s from the resume to the first bind would go to the reconciling LIST
alone (docs/benchmarks.md).

:class:`WarmStandby` follows kopf's pause (the replica's ``operator_paused`` toggles, which ``handlers.py``
hands over). Whenever kopf pauses the replica it invalidates the cache, rebuilds it from the reconciling LIST
and then watches every listed kind from that LIST's resourceVersion, applying each event through the same
:class:`EventHandlers` as kopf's watch events; a 410 Gone re-lists, any other failure watches again from
where each kind is. At the resume it stops its streams (:meth:`WarmStandby.hand_over`) before kopf's watchers
start, and each kopf watch starts where our stream stopped (``EventHandlers.version_for_watch``): no event is
missed or applied twice, and the profiles' loops find the cache reconciled.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Protocol

from kopf_scheduler.eventhandlers import EventHandlers
from kopf_scheduler.framework import APIError

logger = logging.getLogger("kopf_scheduler")

#: Seconds between attempts after a failed LIST or a broken watch (kopf's own backoff starts at 0.5 s).
RETRY_SECONDS = 1.0


class PauseToggle(Protocol):
    """What the standby awaits of the replica's pause state (kopf's ``operator_paused`` ToggleSet has it)."""

    async def wait_for(self, state: bool, /) -> None: ...


class WarmStandby:
    """Keeps the cache current while the replica is paused; hands over to kopf's watches at the resume."""

    def __init__(self, events: EventHandlers, *, follow: bool = True, retry_seconds: float = RETRY_SECONDS) -> None:
        """``follow=False`` is kube-scheduler's ``delayCacheUntilActive: true``: a pause only invalidates the
        cache, which is listed again when the replica resumes."""
        self._events = events
        self._follow_while_paused = follow
        self._retry_seconds = retry_seconds
        self._following: asyncio.Task[None] | None = None
        #: kopf peering has paused this replica (another one is active); False until a pause is seen.
        self.paused = False

    @property
    def following(self) -> bool:
        """The replica is paused and this standby follows the cluster."""
        return self._following is not None

    async def run(self, paused: PauseToggle) -> None:
        """For as long as the operator runs: follow the cluster during every pause, hand over at every resume."""
        try:
            while True:
                await paused.wait_for(True)
                self.paused = True
                self._events.invalidate()  # kopf's watches have stopped: from now on they miss what happens
                if self._follow_while_paused:
                    self._following = asyncio.create_task(self._follow())
                else:
                    logger.debug("paused: the cache is listed again when this replica resumes (delayCacheUntilActive)")
                await paused.wait_for(False)
                self.paused = False
                await self.hand_over()
        finally:
            await self.hand_over()

    async def hand_over(self) -> None:
        """Stop following (at the resume, before kopf's watches start from where ours stopped). A reconciling
        LIST in flight is not cut short: kopf's watches and the loops wait for it."""
        following, self._following = self._following, None
        if following is not None:
            following.cancel()
            await asyncio.wait([following])  # (a cancellation of the caller itself still propagates)

    async def _follow(self) -> None:
        announced = False  # every replica starts paused for a moment (mandatory peering): say it once it stands by
        while True:
            if not await asyncio.shield(self._reconcile()):
                await asyncio.sleep(self._retry_seconds)
                continue
            if not announced:
                logger.info("standby: the cache follows the cluster until this replica resumes")
                announced = True
            try:
                await self._events.follow()
            except Exception as error:
                if isinstance(error, APIError) and error.status == 410:  # a version too old to watch from
                    logger.info("standby: a watch expired (%s); listing again", error)
                    self._events.invalidate()
                    continue
                # A dropped connection, the API server restarting: watch again from where each kind is.
                logger.warning("standby: a watch failed (%s); watching again", error)
            await asyncio.sleep(self._retry_seconds)

    async def _reconcile(self) -> bool:
        """The reconciling LIST (done at once if the cache is whole); whether the cache is whole now (a failure
        is logged; before kopf's login there is no client yet)."""
        try:
            await self._events.ensure_reconciled()
        except Exception as error:  # the API server may be down for a while: retry
            logger.warning("the reconciling LIST failed (%s); retrying", error)
        return self._events.reconciled
