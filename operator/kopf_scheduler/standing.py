"""The renew deadline of kube-scheduler's leader election, over kopf's peering: no bind on a standing not confirmed.

kopf's peering is not a lock (``kopf/_core/engines/peering.py``: "There are NO per-object locks"): a replica that
is frozen (SIGSTOP, a paused VM, a long GC) or cut off from the API server keeps running its loops with the view
it had, the standby takes over once the silent replica's record is older than its lifetime, and when the first one
comes back kopf resumes it at once if its priority is higher, with its stale queue and cache, while the other
still binds. Upstream's leader election (client-go ``tools/leaderelection``, ``leaseDuration`` 15 s,
``renewDeadline`` 10 s, ``retryPeriod`` 2 s) avoids that: the leader renews its Lease every retry period, stops
leading (kube-scheduler exits) when it has not renewed within the renew deadline, and a candidate acquires the
Lease only once it went unrenewed for the lease duration, so the old leader has stopped before the new one starts.

This module gives the replica the same gate beside kopf's peering:

- :class:`PeeringRenewer` writes the replica's own record in the ClusterKopfPeering (its ``lastseen``, as kopf's
  keep-alive does) every retry period and reads the object back from the answer (:func:`judge_peering`: is this
  replica's record there, and no live peer of a priority as high?);
- :class:`Standing` is the state of that standing: binds are allowed (:meth:`Standing.may_bind`) only while the
  last confirmation started less than the renew deadline ago. The renew deadline must be shorter than the
  peering lifetime (the lease duration): a replica that went silent stops binding before any other replica can
  see its record expire and take over;
- a replica whose standing lapsed (the deadline passed, or a sleep of one retry period took far longer: the process
  or its event loop was paused) bumps its epoch: every binding cycle assumed before it is refused at Bind and its
  pod forgotten and queued again (upstream's assume cache forgets what it cannot confirm). Once it confirms its
  standing again, it waits one more renew deadline if another peer is alive (that one may have taken over and
  still bind until its own deadline passes, or it reads this replica's record and stops), then refreshes its view
  (a reconciling LIST: the other replica's binds are in it) before it binds again.

The one window a deadline cannot close (upstream has it too): a Binding written to the socket before the deadline
but delivered after another replica has taken over. The margin between the renew deadline and the lifetime covers
a request that is merely slow.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import logging
import math
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from kopf_scheduler.framework import StandingLostError

logger = logging.getLogger("kopf_scheduler")

#: kopf's default lifetime of a peer that publishes none (``Peer.__init__``).
KOPF_DEFAULT_LIFETIME = 60


@dataclass(frozen=True)
class Timings:
    """client-go's LeaderElectionConfig in seconds: the lease duration is the peering lifetime."""

    lease_duration: float = 15.0
    renew_deadline: float = 10.0
    retry_period: float = 2.0

    @property
    def pause_threshold(self) -> float:
        """A sleep of one retry period that overran by more than this was a pause (half the renew deadline)."""
        return self.renew_deadline / 2


@dataclass(frozen=True)
class PeeringView:
    """What one read of the peering object says about this replica."""

    #: This replica's record is there and no other live peer has a priority as high (kopf pauses on equal ones).
    leading: bool
    #: Some other peer's record is alive (its lastseen + lifetime is in the future).
    others_alive: bool


def judge_peering(status: Mapping[str, Any], *, identity: str, priority: int, now: datetime.datetime) -> PeeringView:
    """Read a ClusterKopfPeering's ``status`` ({identity: {priority, lifetime, lastseen}}) as kopf's peering does."""
    own = status.get(identity)
    alive = [
        entry
        for peer, entry in status.items()
        if peer != identity and isinstance(entry, Mapping) and _alive(entry, now)
    ]
    leading = isinstance(own, Mapping) and all(int(entry.get("priority") or 0) < priority for entry in alive)
    return PeeringView(leading=leading, others_alive=bool(alive))


def _alive(entry: Mapping[str, Any], now: datetime.datetime) -> bool:
    lastseen = entry.get("lastseen")
    if not lastseen:
        return True  # kopf takes a peer without lastseen as seen now
    try:
        seen = datetime.datetime.fromisoformat(str(lastseen))
    except ValueError:
        return True  # unreadable: count it, as the cautious reading
    if seen.tzinfo is None:
        seen = seen.replace(tzinfo=datetime.UTC)
    lifetime = entry.get("lifetime")
    lifetime = KOPF_DEFAULT_LIFETIME if lifetime is None else int(lifetime)
    return seen + datetime.timedelta(seconds=lifetime) > now


class Standing:
    """Whether this replica may bind now: its standing confirmed within the renew deadline, its view fresh.

    Time is the injected monotonic ``clock``; a disabled standing (no peering: ``--leader-elect=false``) always
    allows binds.
    """

    def __init__(self, timings: Timings, *, clock: Callable[[], float] = time.monotonic, enabled: bool = True) -> None:
        self.timings = timings
        self.enabled = enabled
        self._clock = clock
        #: Bumped whenever the standing lapses: binding cycles assumed under an older epoch are refused.
        self.epoch = 0
        self._leading = False
        #: When the last renewal that showed this replica leading started (the request may have waited after).
        self._confirmed_at = -math.inf
        #: The view must be refreshed (a reconciling LIST) before the next bind.
        self._needs_refresh = False
        #: No bind before this moment: another replica may still bind until its own renew deadline passes.
        self._not_before = -math.inf
        #: When the last renewal that wrote our record started, whatever it read.
        self._renewed_at = -math.inf
        #: The last renewal failed (its failure logged once per streak).
        self._failing = False
        #: Standing lapses so far (a figure for the logs and tests).
        self.lapses = 0

    # -- the gate ----------------------------------------------------------------------------------------
    def ticket(self) -> int:
        """The epoch a scheduling cycle assumes its pod under (checked again at Bind)."""
        return self.epoch

    def may_bind(self, ticket: int | None = None) -> bool:
        """Binds are allowed now (for a pod assumed under ``ticket``, if given)."""
        if not self.enabled:
            return True
        now = self._clock()
        self._check_deadline(now)
        return (
            self._leading
            and not self._needs_refresh
            and now >= self._not_before
            and (ticket is None or ticket == self.epoch)
        )

    def why_not(self) -> str:
        """Why :meth:`may_bind` says no, for the log."""
        now = self._clock()
        if not self._leading:
            return "its standing in the peering is not confirmed within the renew deadline"
        if now < self._not_before:
            return f"another replica may still bind for {self._not_before - now:.1f}s"
        if self._needs_refresh:
            return "its view is being refreshed after its standing lapsed"
        return "the pod was assumed before its standing lapsed"

    # -- what the renewer reports ------------------------------------------------------------------------
    def slept(self, expected: float, started: float) -> None:
        """A sleep of ``expected`` seconds that started at ``started`` is over: an overrun beyond the pause
        threshold means the process or its loop was paused (SIGSTOP, a stalled VM, a long GC)."""
        now = self._clock()
        overrun = now - started - expected
        if overrun > self.timings.pause_threshold and self._leading:
            self._lapse(f"it was paused for {overrun:.1f}s")
        self._check_deadline(now)

    def renewed(self, started: float, view: PeeringView) -> None:
        """A renewal that started at ``started`` (monotonic) wrote the record and read the object back."""
        now = self._clock()
        self._check_deadline(now)
        self._failing = False
        previous, self._renewed_at = self._renewed_at, max(self._renewed_at, started)
        if not view.leading:
            if self._leading:
                self._lapse("a live peer of a priority as high is in the peering")
            return
        if now - started >= self.timings.renew_deadline:
            return  # answered too late to confirm anything
        if not self._leading:
            self._leading = True
            if view.others_alive and (self._needs_refresh or not self._record_kept_alive(previous, started)):
                # Another replica may have led meanwhile (our record lapsed, or it led before our start-up) and
                # still bind until its own renew deadline passes, or until it reads our record: wait that long.
                self._not_before = now + self.timings.renew_deadline
                logger.info(
                    "standing confirmed in the peering; another live replica may still bind: binding again in %.0fs",
                    self.timings.renew_deadline,
                )
            else:
                logger.info("standing confirmed in the peering")
        self._confirmed_at = max(self._confirmed_at, started)

    def _record_kept_alive(self, previous: float, started: float) -> bool:
        """Our record stayed alive in every peer's eyes from the previous renewal to this one, so that no peer of a
        lower priority can have taken the lead meanwhile (the renew deadline is the allowance for clock skew)."""
        return started - previous < self.timings.lease_duration - self.timings.renew_deadline

    def failed(self, error: BaseException | str) -> None:
        """A renewal failed (the API server unreachable, the record missing): the deadline does the rest."""
        if not self._failing:
            logger.info("standing: renewing the peering record failed (%s); retrying", error or type(error).__name__)
        self._failing = True
        self._check_deadline(self._clock())

    def refresh_due(self) -> bool:
        """The view must be refreshed now (standing confirmed, the other replica's deadline passed)."""
        return self._leading and self._needs_refresh and self._clock() >= self._not_before

    def refreshed(self, epoch: int) -> None:
        """The view was refreshed by a refresh that started under ``epoch``."""
        if epoch == self.epoch and self._leading and self._needs_refresh:
            self._needs_refresh = False
            logger.info("standing: the view is refreshed; binding again")

    # -- internals -------------------------------------------------------------------------------------
    def _check_deadline(self, now: float) -> None:
        if self._leading and now - self._confirmed_at >= self.timings.renew_deadline:
            self._lapse(f"its standing was not confirmed for {now - self._confirmed_at:.1f}s")

    def _lapse(self, why: str) -> None:
        self._leading = False
        self._confirmed_at = -math.inf
        self._needs_refresh = True
        self.epoch += 1
        self.lapses += 1
        logger.warning(
            "standing lost: %s (renew deadline %.0fs); no binds until it is confirmed and the view refreshed",
            why,
            self.timings.renew_deadline,
        )


class PeeringClient(Protocol):
    """The one call the renewer makes (``kube.KubeClient``)."""

    async def renew_peering_record(self, *, name: str, identity: str, lastseen: str) -> dict[str, Any]:
        """Set ``status[identity].lastseen`` of ClusterKopfPeering ``name`` if the record is there (an error if
        not: kopf writes it first, and removes it at a graceful exit); the object after the write."""
        ...


class PeeringRenewer:
    """Every retry period: renew this replica's record, read the peering back, tell :class:`Standing`; refresh the
    view when the standing asks for it (``refresh``: the app's reconciling LIST)."""

    def __init__(
        self,
        standing: Standing,
        *,
        client: Callable[[], PeeringClient | None],
        name: str,
        identity: str,
        priority: int,
        refresh: Callable[[], Awaitable[None]],
        clock: Callable[[], float] = time.monotonic,
        wall: Callable[[], datetime.datetime] = lambda: datetime.datetime.now(datetime.UTC),
    ) -> None:
        self._standing = standing
        self._client = client
        self._name = name
        self._identity = identity
        self._priority = priority
        self._refresh = refresh
        self._clock = clock
        self._wall = wall
        self._nudged = asyncio.Event()

    def nudge(self) -> None:
        """Renew now rather than at the end of the retry period (kopf has just resumed the replica: a takeover)."""
        self._nudged.set()

    async def run(self) -> None:
        """For as long as the operator runs (cancel it before kopf leaves the peering)."""
        retry = self._standing.timings.retry_period
        while True:
            await self.renew_once()
            if self._standing.refresh_due():
                await self.refresh_once()
            started = self._clock()
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(retry):
                    await self._nudged.wait()
            self._nudged.clear()
            self._standing.slept(min(retry, self._clock() - started), started)

    async def renew_once(self) -> None:
        client = self._client()
        if client is None:
            return
        started, wall = self._clock(), self._wall()
        try:
            async with asyncio.timeout(self._standing.timings.renew_deadline):
                peering = await client.renew_peering_record(
                    name=self._name, identity=self._identity, lastseen=wall.isoformat()
                )
        except Exception as error:
            self._standing.failed(error)
            return
        view = judge_peering(peering.get("status") or {}, identity=self._identity, priority=self._priority, now=wall)
        self._standing.renewed(started, view)

    async def refresh_once(self) -> None:
        epoch = self._standing.epoch
        try:
            await self._refresh()
        except Exception as error:
            logger.warning("standing: refreshing the view failed (%s); retrying", error)
            return
        self._standing.refreshed(epoch)


__all__ = [
    "PeeringClient",
    "PeeringRenewer",
    "PeeringView",
    "Standing",
    "StandingLostError",
    "Timings",
    "judge_peering",
]
