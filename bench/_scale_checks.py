"""The scale benchmark's pure parts (``bench/scale.py``): its sizes, the end-of-run check that nothing was lost,
and the extrapolation from a small run to the issue's size.

"Nothing lost" is judged from the API server, not from the scheduler under test: every pod the run created is
still there and bound, none was seen bound to a second node (the harness's watch), and no node holds more than
its allocatable. The requests of a pod are counted as upstream's ``resource.PodRequests`` does for the pods this
benchmark makes (the sum of the containers' requests, at least each init container's, plus the pod overhead);
the benchmark's pods are scheduler_perf's pod-default (one container, 100m / 500Mi), so the sum is what counts.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from fractions import Fraction
from typing import Any

from kopf_scheduler.state.quantity import parse_quantity

#: The issue's size: three times scheduler_perf's largest case (5000 nodes), ten pods a node.
DEFAULT_NODES, DEFAULT_PODS = 15000, 150000
#: The resources the check compares with a node's allocatable (``pods`` is the pod count).
CHECKED = ("cpu", "memory", "pods")
#: How many names or nodes a failed check quotes.
EXAMPLES = 5


def env_int(environ: Mapping[str, str], name: str, default: int, *, minimum: int = 0) -> int:
    """An integer setting; unset or empty = ``default``; anything else must be an integer ≥ ``minimum``."""
    raw = environ.get(name, "").strip().replace("_", "")
    if not raw:
        return default
    try:
        value = int(raw)
    except ValueError:
        raise SystemExit(f"{name}={environ[name]!r}: not an integer") from None
    if value < minimum:
        raise SystemExit(f"{name}={value}: must be at least {minimum}")
    return value


def env_size(environ: Mapping[str, str]) -> tuple[int, int]:
    """(nodes, pods) from ``BENCH_SCALE_NODES`` and ``BENCH_SCALE_PODS`` (default 15000 and 150000)."""
    return (
        env_int(environ, "BENCH_SCALE_NODES", DEFAULT_NODES, minimum=1),
        env_int(environ, "BENCH_SCALE_PODS", DEFAULT_PODS, minimum=1),
    )


def pod_requests(pod: Mapping[str, Any]) -> dict[str, Fraction]:
    """The pod's effective requests of cpu and memory (containers summed, init containers' maximum, overhead)
    and ``pods: 1``."""
    spec = pod.get("spec") or {}
    total: dict[str, Fraction] = {"cpu": Fraction(0), "memory": Fraction(0)}
    for container in spec.get("containers") or []:
        for name, value in ((container.get("resources") or {}).get("requests") or {}).items():
            if name in total:
                total[name] += parse_quantity(value)
    for container in spec.get("initContainers") or []:
        for name, value in ((container.get("resources") or {}).get("requests") or {}).items():
            if name in total:
                total[name] = max(total[name], parse_quantity(value))
    for name, value in (spec.get("overhead") or {}).items():
        if name in total:
            total[name] += parse_quantity(value)
    total["pods"] = Fraction(1)
    return total


def _allocatable(node: Mapping[str, Any]) -> dict[str, Fraction]:
    raw = (node.get("status") or {}).get("allocatable") or {}
    return {name: parse_quantity(raw[name]) for name in CHECKED if name in raw}


def _text(amount: Fraction) -> str:
    return str(amount.numerator) if amount.denominator == 1 else f"{float(amount):g}"


def check_placement(pods: Iterable[Mapping[str, Any]], nodes: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    """What the API server holds at the end of a run: how many pods, how many bound, on which nodes, and the
    nodes whose bound pods ask for more than their allocatable."""
    allocatable = {node["metadata"]["name"]: _allocatable(node) for node in nodes}
    used: dict[str, dict[str, Fraction]] = {}
    names: set[str] = set()
    listed, unbound, unknown, duplicates = 0, [], [], []
    for pod in pods:
        listed += 1
        name = pod["metadata"]["name"]
        if name in names:
            duplicates.append(name)
        names.add(name)
        node = (pod.get("spec") or {}).get("nodeName") or ""
        if not node:
            unbound.append(name)
            continue
        if node not in allocatable:
            unknown.append(name)
            continue
        totals = used.setdefault(node, {})
        for resource, amount in pod_requests(pod).items():
            totals[resource] = totals.get(resource, Fraction(0)) + amount
    over = sorted(
        f"{node}: {resource} {_text(amount)} > {_text(allocatable[node][resource])}"
        for node, totals in used.items()
        for resource, amount in totals.items()
        if resource in allocatable[node] and amount > allocatable[node][resource]
    )
    over_nodes = {line.split(":", 1)[0] for line in over}
    return {
        "listed": listed,
        "bound": listed - len(unbound) - len(unknown),
        "unbound": len(unbound),
        "unbound_examples": unbound[:EXAMPLES],
        "on_unknown_nodes": len(unknown),
        "duplicate_names": len(duplicates),
        "nodes_used": len(used),
        "nodes_over_allocatable": len(over_nodes),
        "over_examples": over[:EXAMPLES],
    }


def lost(check: Mapping[str, Any], expected: int, rebound: int) -> list[str]:
    """Why the run lost something (empty: nothing lost): pods missing or unbound, bound twice, over-commitment."""
    reasons = []
    if check["listed"] != expected:
        reasons.append(f"{check['listed']} pods listed, {expected} created")
    if check["unbound"]:
        reasons.append(f"{check['unbound']} pods unbound (e.g. {', '.join(check['unbound_examples'])})")
    if check["on_unknown_nodes"]:
        reasons.append(f"{check['on_unknown_nodes']} pods bound to nodes that do not exist")
    if check["duplicate_names"]:
        reasons.append(f"{check['duplicate_names']} pod names listed twice")
    if rebound:
        reasons.append(f"{rebound} pods seen bound to a second node")
    if check["nodes_over_allocatable"]:
        reasons.append(
            f"{check['nodes_over_allocatable']} nodes over their allocatable ({'; '.join(check['over_examples'])})"
        )
    return reasons


def slope_per_1000(points: Sequence[tuple[int, float]]) -> float:
    """The least-squares slope of (pods, MiB) points, in MiB per 1000 pods (0 when the pods do not vary)."""
    n = len(points)
    mean_x = sum(x for x, _ in points) / n
    mean_y = sum(y for _, y in points) / n
    spread = sum((x - mean_x) ** 2 for x, _ in points)
    if not spread:
        return 0.0
    return sum((x - mean_x) * (y - mean_y) for x, y in points) / spread * 1000


def extrapolate(result: Mapping[str, Any], nodes: int, pods: int) -> dict[str, Any]:
    """The wall time and memory of a run at ``nodes`` × ``pods``, from a measured (smaller) one.

    Linear in the pod count: creation, scheduling (first bind → last), the check and deletion, and the control
    plane's memory per 1000 pods (its growth from before the pods were created to all of them bound, over its size
    with the nodes only); the nodes linear in the nodes. Start-ups and the takeover's wait for the dead replica's
    peering entry are kept as measured. Things that grow faster make the time a lower bound: the per-pod cycle
    grows with the nodes it visits (both schedulers score a share of the nodes that shrinks as the cluster grows,
    so less than linearly), and the start-up LIST grows with the pods present. Each scheduler's RSS is its RSS a
    second after spawn plus its growth to the peak, scaled by the pods.
    """
    measured_pods = int(result["size"]["pods"])
    factor = pods / measured_pods
    phases: dict[str, float] = {"nodes": result["control_plane"]["nodes_created_s"] * nodes / result["size"]["nodes"]}
    rss: dict[str, float] = {}
    for row in result["rows"]:
        name = row["scheduler"]
        phases[f"{name} create"] = row["created_s"] * factor
        phases[f"{name} start-up"] = row["startup_s"]
        phases[f"{name} schedule"] = row["duration_s"] * factor
        phases[f"{name} cleanup"] = row["cleanup_s"] * factor
        base = row.get("rss_base_mb") or 0.0
        rss[name] = base + (row["peak_rss_mb"] - base) * factor
    takeover = result.get("takeover") or {}
    if takeover.get("pods") and takeover.get("standby_all_bound_s") is not None:
        tfactor = pods / takeover["pods"]
        phases["takeover create"] = takeover["created_s"] * tfactor
        phases["takeover start-up and wait"] = takeover["active_startup_s"] + takeover["takeover_s"]
        phases["takeover schedule"] = (takeover["standby_all_bound_s"] - takeover["takeover_s"]) * tfactor
    plane = result["control_plane"]
    base = plane["empty_mib"] + plane["nodes_mib"] * nodes / int(result["size"]["nodes"])
    total = sum(phases.values())
    return {
        "nodes": nodes,
        "pods": pods,
        "from": {"nodes": result["size"]["nodes"], "pods": measured_pods},
        "phases_s": {name: round(value, 1) for name, value in phases.items()},
        "total_min": round(total / 60, 1),
        "control_plane_mib": round(base + plane["pods_mib_per_1000"] * pods / 1000),
        "scheduler_peak_rss_mib": {name: round(value) for name, value in rss.items()},
    }
