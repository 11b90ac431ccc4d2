"""Disagreements with upstream that are understood, and the findings the suite led to.

``KNOWN`` lists disagreements we keep on purpose or cannot fix locally, each with the reason (read from
the v1.36.3 source) and a predicate that recognises it in a :class:`PodResult`. The quick test in
``make test`` fails on any disagreement that no entry here explains; ``make conformance`` reports both.
``FIXED`` records what the suite found and how it was fixed, for docs/conformance.md.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from tests.conformance.runner import PodResult


@dataclass(frozen=True)
class Known:
    key: str
    summary: str
    reason: str
    matches: Callable[[PodResult], bool]


#: Understood disagreements (none at the moment: every one found so far was fixed, see FIXED).
KNOWN: tuple[Known, ...] = ()


@dataclass(frozen=True)
class Finding:
    summary: str
    cause: str
    fix: str
    #: A minimal reproducer (YAML) and what each side scored/decided on it.
    reproducer: str = ""


FIXED: tuple[Finding, ...] = (
    Finding(
        summary="NodeResourcesFit scores differed for pods with pod-level requests (spec.resources.requests); "
        "our node was outside upstream's top set (seeds 11 and 34 of the first campaign).",
        cause="In v1.36 `NewFit` builds its scorer with `getScorer` and never sets the scorer's "
        "`enablePodLevelResources` (BalancedAllocation's constructor does), so `calculatePodResourceRequest` "
        "runs `PodRequests` with `SkipPodLevelResources: true`: the incoming pod is scored with its containers' "
        "aggregate (non-zero defaults, plus overhead), not its pod-level requests. We scored the pod-level values.",
        fix="NodeResourcesFit scores the containers' aggregate when pod-level requests are set "
        "(`scoring_requests_without_pod_level`), with a unit test beside the plugin (commit d6a17fb).",
        reproducer="""\
# One node; default profile (LeastAllocated on cpu and memory, weight 1 each).
apiVersion: v1
kind: Node
metadata: {name: n}
status: {allocatable: {cpu: 3500m, memory: 8Gi, pods: "110"}}
---
apiVersion: v1
kind: Pod
metadata: {name: p}
spec:
  resources: {requests: {cpu: "2", memory: 4Gi}}   # pod-level requests
  containers:
  - {name: main, image: registry.k8s.io/pause:3.10, resources: {requests: {cpu: 100m}}}
# NodeResourcesFit score of n: upstream 97 = (cpu (3500-100)*100/3500 = 97 + memory (8192-200)Mi*100/8192Mi = 97)/2,
# i.e. 100m and the 200Mi default; we scored 46 = (42 + 50)/2 from the pod-level 2 cpu / 4Gi.
""",
    ),
)


def explain(result: PodResult) -> Known | None:
    """The known entry that explains this disagreement, if any."""
    for known in KNOWN:
        if known.matches(result):
            return known
    return None
