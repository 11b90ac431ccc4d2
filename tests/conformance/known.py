"""Disagreements with upstream that are understood, and the findings the suite led to.

``KNOWN`` lists disagreements we keep on purpose or cannot fix locally, each with the reason (read from
the v1.36.3 source) and a predicate that recognises it in a :class:`PodResult`. The quick test in
``make test`` fails on any disagreement that no entry here explains; ``make conformance`` reports both.
``FIXED`` records what the suite found and how it was fixed, for docs/conformance.md.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from tests.conformance.generator import LIFECYCLE_ANNOTATION, SUCCEEDED, PendingPod, Scenario
from tests.conformance.preemptions import priority

if TYPE_CHECKING:
    from tests.conformance.runner import PodResult


@dataclass(frozen=True)
class Known:
    key: str
    summary: str
    reason: str
    matches: Callable[[PodResult], bool]
    #: A minimal reproducer (YAML) for docs/conformance.md.
    reproducer: str = ""


# -- upstream forgets a host port that another pod on the node still holds -----------------------------------
FREED_HOST_PORT = "freed-host-port"


def _port_keys(pod: dict[str, Any]) -> list[tuple[str, str, int]]:
    spec = pod["spec"]
    containers = [*(c for c in spec.get("initContainers", ()) if c.get("restartPolicy") == "Always")]
    containers += spec["containers"]
    return [
        (p.get("hostIP") or "0.0.0.0", p.get("protocol") or "TCP", int(p["hostPort"]))
        for c in containers
        for p in c.get("ports", ())
        if p.get("hostPort")
    ]


def freed_host_port_nodes(scenario: Scenario) -> set[str]:
    """Nodes where a finished existing pod shared a host port with a pod that stays (upstream frees it)."""
    holders: dict[tuple[str, tuple[str, str, int]], Counter[bool]] = {}
    for pod in scenario.existing_pods:
        finished = (pod["metadata"].get("annotations") or {}).get(LIFECYCLE_ANNOTATION) == SUCCEEDED
        for key in _port_keys(pod):
            holders.setdefault((pod["spec"]["nodeName"], key), Counter())[finished] += 1
    return {node for (node, _), count in holders.items() if count[True] and count[False]}


#: Hint of a node where running pods of different priorities share a host port: preemption's dry run frees it.
SHARED_HOST_PORT = "shared-host-port"


def shared_host_port_nodes(scenario: Scenario) -> dict[str, tuple[int, int]]:
    """Nodes where two running existing pods hold the same host port: node → (lowest, highest) priority of them.

    Preemption's dry run removes the lower-priority holder as a victim; upstream's ``HostPortInfo.Remove`` then
    forgets the port although the other holder keeps it (the same cause as :data:`FREED_HOST_PORT`)."""
    holders: dict[tuple[str, tuple[str, str, int]], list[int]] = {}
    for pod in scenario.existing_pods:
        if (pod["metadata"].get("annotations") or {}).get(LIFECYCLE_ANNOTATION) == SUCCEEDED:
            continue
        for key in _port_keys(pod):
            holders.setdefault((pod["spec"]["nodeName"], key), []).append(priority(pod))
    out: dict[str, tuple[int, int]] = {}
    for (node, _), priorities in holders.items():
        if len(priorities) > 1 and min(priorities) < max(priorities):
            low, high = out.get(node, (min(priorities), max(priorities)))
            out[node] = (min(low, *priorities), max(high, *priorities))
    return out


def scenario_hints(scenario: Scenario) -> list[str]:
    """Facts about a scenario that known disagreements depend on (recorded on every PodResult)."""
    hints = [f"{FREED_HOST_PORT}:{node}" for node in freed_host_port_nodes(scenario)]
    hints += [f"{SHARED_HOST_PORT}:{n}:{low}:{high}" for n, (low, high) in shared_host_port_nodes(scenario).items()]
    return sorted(hints)


_PORTS_REASON = re.compile(r"(\d+) node\(s\) didn't have free ports for the requested pod ports")


def _port_rejections(message: str | None) -> int:
    match = _PORTS_REASON.search(message or "")
    return int(match.group(1)) if match else 0


def _preemption_port_rejections(message: str | None) -> int:
    _, _, preemption = (message or "").partition("preemption: ")
    return _port_rejections(preemption)


def _victim_frees_shared_port(result: PodResult) -> bool:
    """Both unschedulable with the same main message; only preemption's part differs, where ours still counts
    port conflicts on nodes where a lower-priority holder of a shared host port was a dry-run victim."""
    upstream, ours = result.upstream, result.ours
    if "NodePorts" not in result.features or not (upstream.kind == ours.kind == "unschedulable"):
        return False
    main = (upstream.note or "").partition("preemption: ")[0]
    if main != (ours.note or "").partition("preemption: ")[0] or upstream.nominated or ours.nominated:
        return False
    pod_priority = int((result.manifest.get("spec") or {}).get("priority") or 0)
    nodes = 0
    for hint in result.hints:
        kind, _, rest = hint.partition(":")
        if kind == SHARED_HOST_PORT:
            _node, low, high = rest.rsplit(":", 2)
            nodes += int(low) < pod_priority <= int(high)
    extra = _preemption_port_rejections(ours.note) - _preemption_port_rejections(upstream.note)
    return 0 < extra <= nodes


def _freed_host_port(result: PodResult) -> bool:
    if _victim_frees_shared_port(result):
        return True
    freed = {hint.split(":", 1)[1] for hint in result.hints if hint.startswith(FREED_HOST_PORT + ":")}
    if not freed or "NodePorts" not in result.features:
        return False
    # Our model must have rejected one of those nodes for its ports (when the model ran at all).
    rejections = (result.model or {}).get("rejections")
    if rejections is not None and not any(str(rejections.get(n, "")).startswith("NodePorts") for n in freed):
        return False
    upstream, ours = result.upstream, result.ours
    if upstream.kind == "bound" and (upstream.node in freed or freed & set(result.upstream_scores)):
        # Upstream placed the pod where ours sees the port taken, or ranked such a node among the feasible ones
        # (only the in-process model's feasible set and scores differ then, not the outcome).
        return upstream.node in freed or not result.problems
    if upstream.kind == ours.kind == "unschedulable":
        extra = _port_rejections(ours.note) - _port_rejections(upstream.note)
        return 0 < extra <= len(freed)  # ours counts the freed nodes as port conflicts, upstream as something else
    return False


HOST_PORT_REPRODUCER = """\
# Two pods on one node hold the same host port (possible when pods bypass the scheduler: spec.nodeName).
apiVersion: v1
kind: Node
metadata: {name: n0}
status: {allocatable: {cpu: "4", memory: 8Gi, pods: "110"}}
---
apiVersion: v1
kind: Pod
metadata: {name: a}
spec:
  nodeName: n0
  containers: [{name: c, image: registry.k8s.io/pause:3.10, ports: [{containerPort: 8080, hostPort: 80}]}]
---
apiVersion: v1
kind: Pod
metadata: {name: b}          # then: its status.phase becomes Succeeded (or it is deleted)
spec:
  nodeName: n0
  containers: [{name: c, image: registry.k8s.io/pause:3.10, ports: [{containerPort: 8080, hostPort: 80}]}]
---
apiVersion: v1
kind: Pod
metadata: {name: p}          # pending
spec:
  containers: [{name: c, image: registry.k8s.io/pause:3.10, ports: [{containerPort: 8080, hostPort: 80}]}]
# upstream: binds p to n0 (a still holds port 80 there);
# ours: 0/1 nodes are available: 1 node(s) didn't have free ports for the requested pod ports.
#       preemption: 0/1 nodes are available: 1 No preemption victims found for incoming pod.
"""


def host_port_scenario() -> Scenario:
    """The reproducer above as a scenario, for the quick test that pins the difference."""

    def pod(name: str, **spec: Any) -> dict[str, Any]:
        container = {
            "name": "c",
            "image": "registry.k8s.io/pause:3.10",
            "ports": [{"containerPort": 8080, "hostPort": 80}],
        }
        return {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": name, "namespace": "known-ports"},
            "spec": {"terminationGracePeriodSeconds": 0, "containers": [container], **spec},
        }

    finished = pod("b", nodeName="known-n0")
    finished["metadata"]["annotations"] = {LIFECYCLE_ANNOTATION: SUCCEEDED}
    return Scenario(
        seed=0,
        size="small",
        namespaces=[{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "known-ports"}}],
        nodes=[
            {
                "apiVersion": "v1",
                "kind": "Node",
                "metadata": {"name": "known-n0", "labels": {"kubernetes.io/hostname": "known-n0"}},
                "status": {"allocatable": {"cpu": "4", "memory": "8Gi", "pods": "110"}},
            }
        ],
        existing_pods=[pod("a", nodeName="known-n0"), finished],
        pending=[PendingPod(0, pod("p"), ("NodePorts",))],
    )


#: Understood disagreements, kept on purpose (the fix would not be local to one plugin, or upstream is wrong).
KNOWN: tuple[Known, ...] = (
    Known(
        key=FREED_HOST_PORT,
        summary="Upstream frees a host port that another pod on the node still holds",
        reason="Upstream's `NodeInfo.UsedPorts` is a `HostPortInfo` (k8s.io/kube-scheduler v0.36.3 "
        "`framework/types.go`): a set of (ip, protocol, port) per node, not a count. Two pods can hold the same "
        "host port on one node only if they bypassed the scheduler (spec.nodeName, another scheduler); when one "
        "of them goes away (deleted, or Succeeded/Failed and so dropped by the scheduler's informer), "
        "`RemovePod` → `HostPortInfo.Remove` deletes the entry although the other pod still uses the port, and "
        "NodePorts then admits a conflicting pod there (for an unschedulable pod, that node is reported with its "
        "next failing plugin's reason instead). Our cache counts the holders of each port, so the port stays "
        "taken. Matching upstream would mean reproducing a real port conflict in the cache (state/cache.py, "
        "not one plugin), so it is listed rather than fixed. The same happens in preemption's dry run: "
        "`SelectVictimsOnNode` removes every lower-priority pod from a copy of the node, and when one of them "
        "shares a host port with a pod that stays, upstream's copy forgets the port and reports the node with "
        "its next failing plugin (preemption part of the message only; seed 728710, pinned in the quick test).",
        matches=_freed_host_port,
        reproducer=HOST_PORT_REPRODUCER,
    ),
)


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
    Finding(
        summary="A preemptor with an extender bound to another node than its nomination once its victim went "
        "(extenders, seed 690415, c690415-a/p25: nominated for n04 on both sides, ours bound to n44).",
        cause="Upstream's next attempt of a nominated pod tries its `status.nominatedNodeName` alone first "
        "(`evaluateNominatedNode`); its `handleSchedulingFailure` writes the nomination while the preemption "
        "goroutine is still on its first call, so the nomination is watched before any victim's deletion. Ours "
        "started the victims' writes at once over a pool of HTTP/1.1 connections, where a victim's DELETE could "
        "overtake the nomination patch; the preemptor came back without its nomination and the full search (the "
        "extender scoring n44 above n04) bound it elsewhere.",
        fix="The preemption executor evicts once the preemptor's pending status writes (its condition and "
        "nomination) are answered (`PreemptionExecutor.nomination_written`, `tests/unit/test_preemption_order.py`); "
        "on the way, an extender error on the nominated node now falls back to the full search as upstream's "
        "(commit 21941dc).",
    ),
)


def explain(result: PodResult) -> Known | None:
    """The known entry that explains this disagreement, if any."""
    for known in KNOWN:
        if known.matches(result):
            return known
    return None
