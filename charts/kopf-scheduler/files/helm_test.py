"""The chart's `helm test` check, run by the test hook Pod (templates/tests/) in the operator's own image.

A release is healthy when (1) the chart's CRDs are Established, (2) every StatefulSet replica is Ready
(its readiness probe is the operator's /healthz), and (3) kopf peering has exactly one active replica:
each replica's pod name is a live peer in the ClusterKopfPeering's status, and the highest priority among
the live peers is held by one of them only (kopf pauses every peer that sees another live peer with a
higher priority, and all peers that share the top one). No upstream counterpart: kube-scheduler's chart
probes health only; peering is kopf's.

Standard library only (the image's Python): the API server is reached with the Pod's ServiceAccount token
and CA, as kopf's in-cluster login does. It retries until every check passes or --timeout runs out, then
prints each check's verdict; the exit status is 0 only when all pass.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import ssl
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from typing import Any

SERVICE_ACCOUNT = "/var/run/secrets/kubernetes.io/serviceaccount"
PEERING_PATH = "/apis/kopf.dev/v1/clusterkopfpeerings/{name}"
STATEFULSET_PATH = "/apis/apps/v1/namespaces/{namespace}/statefulsets/{name}"
CRD_PATH = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{name}"

Verdict = tuple[bool, str]
Getter = Callable[[str], Mapping[str, Any] | None]


def crd_verdict(name: str, crd: Mapping[str, Any] | None) -> Verdict:
    if crd is None:
        return False, f"CRD {name}: missing"
    conditions = crd.get("status", {}).get("conditions") or []
    established = any(c.get("type") == "Established" and c.get("status") == "True" for c in conditions)
    return established, f"CRD {name}: {'Established' if established else 'not Established'}"


def replicas_verdict(name: str, statefulset: Mapping[str, Any] | None) -> Verdict:
    if statefulset is None:
        return False, f"StatefulSet {name}: missing"
    wanted = statefulset.get("spec", {}).get("replicas", 1)
    ready = statefulset.get("status", {}).get("readyReplicas", 0)
    return ready == wanted, f"StatefulSet {name}: {ready}/{wanted} replicas Ready"


def live_peers(peering: Mapping[str, Any], now: datetime.datetime) -> dict[str, int]:
    """Peer identity → priority, for the peers whose lastseen + lifetime is still ahead of ``now``."""
    alive = {}
    for identity, peer in (peering.get("status") or {}).items():
        if not isinstance(peer, Mapping) or "lastseen" not in peer:
            continue  # kopf's own bookkeeping keys (none today), or a peer being removed
        lastseen = datetime.datetime.fromisoformat(peer["lastseen"])
        if lastseen.tzinfo is None:
            lastseen = lastseen.replace(tzinfo=datetime.UTC)
        if lastseen + datetime.timedelta(seconds=int(peer.get("lifetime", 60))) > now:
            alive[identity] = int(peer.get("priority", 0))
    return alive


def peering_verdict(
    name: str, peering: Mapping[str, Any] | None, replicas: Sequence[str], now: datetime.datetime
) -> Verdict:
    if peering is None:
        return False, f"ClusterKopfPeering {name}: missing"
    alive = live_peers(peering, now)
    absent = [replica for replica in replicas if replica not in alive]
    if absent:
        return False, f"ClusterKopfPeering {name}: no live peer for {', '.join(absent)} (live: {sorted(alive)})"
    top = max(alive.values())
    active = sorted(identity for identity, priority in alive.items() if priority == top)
    if len(active) != 1:
        return False, f"ClusterKopfPeering {name}: {len(active)} live peers share the top priority {top}: {active}"
    return True, f"ClusterKopfPeering {name}: one active peer, {active[0]} (priority {top}), of {len(alive)} live"


def verdicts(args: argparse.Namespace, get: Getter, now: datetime.datetime) -> list[Verdict]:
    results = [crd_verdict(crd, get(CRD_PATH.format(name=crd))) for crd in args.crd]
    statefulset = get(STATEFULSET_PATH.format(namespace=args.namespace, name=args.statefulset))
    results.append(replicas_verdict(args.statefulset, statefulset))
    count = (statefulset or {}).get("spec", {}).get("replicas", 1)
    replicas = [f"{args.statefulset}-{ordinal}" for ordinal in range(count)]
    results.append(peering_verdict(args.peering, get(PEERING_PATH.format(name=args.peering)), replicas, now))
    return results


def in_cluster_getter(timeout: float = 10) -> Getter:
    """GET of an API path with the Pod's ServiceAccount; None for 404."""
    host, port = os.environ["KUBERNETES_SERVICE_HOST"], os.environ["KUBERNETES_SERVICE_PORT"]
    server = f"https://[{host}]:{port}" if ":" in host else f"https://{host}:{port}"
    context = ssl.create_default_context(cafile=f"{SERVICE_ACCOUNT}/ca.crt")

    def get(path: str) -> Mapping[str, Any] | None:
        with open(f"{SERVICE_ACCOUNT}/token") as f:  # re-read: the kubelet rotates projected tokens
            token = f.read().strip()
        request = urllib.request.Request(server + path, headers={"Authorization": f"Bearer {token}"})
        try:
            with urllib.request.urlopen(request, timeout=timeout, context=context) as response:
                return json.loads(response.read())  # type: ignore[no-any-return]
        except urllib.error.HTTPError as e:
            if e.code == 404:
                return None
            raise

    return get


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="helm-test", description=__doc__.splitlines()[0])
    parser.add_argument("--namespace", required=True, help="the release's namespace")
    parser.add_argument("--statefulset", required=True, help="the chart's StatefulSet (its pods are the peers)")
    parser.add_argument("--peering", required=True, help="the ClusterKopfPeering name")
    parser.add_argument("--crd", action="append", default=[], help="a CRD that must be Established (repeatable)")
    parser.add_argument("--timeout", type=float, default=120, help="seconds to wait for every check to pass")
    parser.add_argument("--interval", type=float, default=2, help="seconds between attempts")
    return parser.parse_args(argv)


def _utcnow() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC)


def main(
    argv: Sequence[str] | None = None,
    get: Getter | None = None,
    clock: Callable[[], datetime.datetime] = _utcnow,
) -> int:
    args = parse_args(argv)
    get = get or in_cluster_getter()
    deadline = time.monotonic() + args.timeout
    while True:
        try:
            results = verdicts(args, get, clock())
        except (OSError, ValueError) as e:  # API unreachable, refused (403) or not JSON: retried, then reported
            results = [(False, f"API request failed: {e}")]
        if all(ok for ok, _ in results) or time.monotonic() >= deadline:
            break
        time.sleep(args.interval)
    for ok, message in results:
        print(f"{'ok  ' if ok else 'FAIL'} {message}")
    return 0 if all(ok for ok, _ in results) else 1


if __name__ == "__main__":
    sys.exit(main())
