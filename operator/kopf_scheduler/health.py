"""The health endpoints' checks and answers: ``/healthz``, ``/livez`` and ``/readyz`` as kube-scheduler serves them.

kube-scheduler installs k8s.io/apiserver's ``server/healthz`` handlers on its secure port: ``/livez`` with the
``ping`` check only, ``/readyz`` with ``leaderElection`` (its lease watchdog), ``shutdown`` and
``sched-handler-sync`` (the informers' initial lists delivered to its handlers), ``/healthz`` (deprecated) with
``leaderElection``. Each path answers ``ok``, or, with ``?verbose``, one ``[+]name ok`` line per check and
``<path> check passed``; a failing check makes it a 500 that lists every check (``[-]name failed: reason
withheld``: the paths are open to anonymous callers, so the reason only goes to the log) and ends ``<path>
check failed``; ``?exclude=name`` skips a check; ``/<path>/<name>`` runs one check and, failing, says why.

This module is the I/O-free half (the checks and the text of every answer); ``web/`` serves it, the app
(``SchedulerApp.health_checks``) says what each check looks at. kopf peering has no lease watchdog, so where
kube-scheduler checks its lease we check what the lease protects: that an active replica's scheduling loops
keep turning (``scheduling-loops``). A passing check may carry a detail for the verbose answer:
``peering`` says whether this replica is the active one or a standby.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass

logger = logging.getLogger(__name__)

#: The health paths, as kube-scheduler's (``/healthz`` is deprecated upstream, kept for old probes).
HEALTH_PATHS = ("healthz", "livez", "readyz")


@dataclass(frozen=True)
class Health:
    """One check's outcome: healthy or not, and what it saw (the log's reason, or a passing check's detail)."""

    ok: bool
    detail: str = ""


HEALTHY = Health(True)


@dataclass(frozen=True)
class HealthCheck:
    name: str
    check: Callable[[], Health]


def ping() -> Health:
    """k8s.io/apiserver's ``PingHealthz``: always healthy (the process answers)."""
    return HEALTHY


PING = HealthCheck("ping", ping)

HealthChecks = Mapping[str, Sequence[HealthCheck]]


@dataclass(frozen=True)
class Answer:
    status: int
    body: str


def answer_root(path: str, checks: Sequence[HealthCheck], *, excluded: Collection[str], verbose: bool) -> Answer:
    """The answer of ``/<path>`` (upstream ``handleRootHealth``)."""
    lines: list[str] = []
    failed: list[str] = []
    unknown = set(excluded) - {check.name for check in checks}
    for check in checks:
        if check.name in excluded:
            lines.append(f"[+]{check.name} excluded: ok\n")
            continue
        health = check.check()
        if health.ok:
            lines.append(f"[+]{check.name} ok" + (f": {health.detail}" if health.detail else "") + "\n")
        else:
            lines.append(f"[-]{check.name} failed: reason withheld\n")
            failed.append(check.name)
            logger.info("%s check failed: %s: %s", path, check.name, health.detail)
    if unknown:
        quoted = ",".join(f'"{name}"' for name in sorted(unknown))
        lines.append(f"warn: some health checks cannot be excluded: no matches for {quoted}\n")
    if failed:
        return Answer(500, "".join(lines) + f"{path} check failed\n")  # http.Error ends the body with a newline
    return Answer(200, "".join(lines) + f"{path} check passed\n" if verbose else "ok")


def answer_check(check: HealthCheck) -> Answer:
    """The answer of ``/<path>/<name>`` (upstream ``adaptCheckToHandler``): the reason is given here."""
    health = check.check()
    if health.ok:
        return Answer(200, "ok")
    return Answer(500, f"internal server error: {health.detail}\n")
