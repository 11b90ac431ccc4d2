"""The chart's hooks, run by the operator's own image (its Python, standard library only) as ``python3 -c``.

``test`` (`helm test`, templates/tests/): a release is healthy when (1) the chart's CRDs are Established,
(2) every StatefulSet replica is Ready, (3) kopf peering has exactly one active replica: each replica's pod
name is a live peer in the ClusterKopfPeering's status, and the highest priority among the live peers is held
by one of them only (kopf pauses every peer that sees another live peer with a higher priority, and all peers
that share the top one), and (4) the scheduler schedules: a probe pod whose ``schedulerName`` is the test's
own SchedulerProfile (``spec: {}``, kube-scheduler's default profile) gets bound to a node. It retries (1)-(3)
until they pass or --timeout runs out, then sends the probe with what time is left, prints each verdict
(`helm test --logs`) and deletes the probe pod; the exit status is 0 only when all pass.

``pre-delete`` (`helm uninstall`, templates/pre-delete-hook.yaml): the operator puts its finalizer
(kopf-scheduler.io/profile-cleanup) on every SchedulerProfile, because kopf holds a finalizer on every object
that has a daemon (a profile's scheduling loop) so as to stop the daemon before the object goes. Once the
release's replicas are gone nothing would remove it: ``kubectl delete sp`` would hang, and so would deleting
the CRD. So, before Helm deletes anything: scale the StatefulSet to zero, wait until no replica is a live peer
any more (kopf removes its own entry when it exits; a killed one expires after its lifetime) and no replica pod
is left, then remove that finalizer (only that one) from every SchedulerProfile. Removing it earlier would not
do: a running replica puts it back at the next event of the profile. A profile being deleted then goes at once.

Then, with --delete-crd (``crds.keep: false``), it deletes the SchedulerProfile CRD, which Helm never deletes.

``apply-crds`` (`helm upgrade`, templates/crd-upgrade-hook.yaml): Helm installs a chart's crds/ on the first
install only and never upgrades them. This server-side applies the chart's SchedulerProfile CRD (field manager
kopf-scheduler-chart, taking over fields other managers set) and waits until it is Established: a pre-upgrade
hook, so the API serves the new CRD before Helm touches anything else, the StatefulSet whose new operator needs it
included.

No upstream counterpart: kube-scheduler's chart probes health only, and has no objects with finalizers. The
API server is reached with the Pod's ServiceAccount token and CA, as kopf's in-cluster login does.
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
import urllib.parse
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from typing import Any

SERVICE_ACCOUNT = "/var/run/secrets/kubernetes.io/serviceaccount"
PEERING_PATH = "/apis/kopf.dev/v1/clusterkopfpeerings/{name}"
STATEFULSET_PATH = "/apis/apps/v1/namespaces/{namespace}/statefulsets/{name}"
SCALE_PATH = STATEFULSET_PATH + "/scale"
PODS_PATH = "/api/v1/namespaces/{namespace}/pods"
POD_PATH = PODS_PATH + "/{name}"
CRD_PATH = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{name}"
PROFILES_PATH = "/apis/kopf-scheduler.io/v1alpha1/schedulerprofiles"
PROFILE_PATH = PROFILES_PATH + "/{name}"
MERGE_PATCH = "application/merge-patch+json"
APPLY_PATCH = "application/apply-patch+yaml"  # JSON is YAML
FIELD_MANAGER = "kopf-scheduler-chart"

Verdict = tuple[bool, str]
Getter = Callable[[str], Mapping[str, Any] | None]
#: (method, path, body, content type) → the response object; None for 404.
Requester = Callable[[str, str, Any, str], Mapping[str, Any] | None]
Clock = Callable[[], datetime.datetime]


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


# ---- the probe pod ------------------------------------------------------------------------------------------


def is_ready(obj: Mapping[str, Any] | None) -> bool:
    """A SchedulerProfile whose Ready condition is True (the operator built its pipeline)."""
    conditions = ((obj or {}).get("status") or {}).get("conditions") or []
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)


def pod_scheduled_message(pod: Mapping[str, Any] | None) -> str:
    """Why a pod is not bound yet, as its scheduler wrote it in the PodScheduled condition."""
    conditions = ((pod or {}).get("status") or {}).get("conditions") or []
    for condition in conditions:
        if condition.get("type") == "PodScheduled":
            return f"{condition.get('reason', '')}: {condition.get('message', '')}".strip(": ")
    return "no PodScheduled condition yet (no scheduler has tried it)"


class Waiter:
    """Polls for at most ``seconds`` (from now) with a fixed interval; ``sleep`` is injectable for tests."""

    def __init__(self, seconds: float, interval: float, sleep: Callable[[float], None] = time.sleep) -> None:
        self.deadline, self.interval, self._sleep = time.monotonic() + seconds, interval, sleep

    def again(self, seconds: float) -> Waiter:
        """A waiter of the same pace for another ``seconds``."""
        return Waiter(seconds, self.interval, self._sleep)

    def until(self, done: Callable[[], Any]) -> Any:
        """``done()`` until it is truthy or the deadline passes; its last value."""
        while True:
            value = done()
            if value or time.monotonic() >= self.deadline:
                return value
            self._sleep(self.interval)


def probe_verdict(args: argparse.Namespace, request: Requester, waiter: Waiter) -> Verdict:
    """Send the probe pod (``--probe-pod``, rendered by the chart) to the test's profile; ok once it is bound."""
    pod = json.loads(args.probe_pod)
    name, scheduler = pod["metadata"]["name"], pod["spec"]["schedulerName"]
    profile = waiter.until(lambda: is_ready(request("GET", PROFILE_PATH.format(name=scheduler), None, "")))
    if not profile:
        return False, f"probe: SchedulerProfile {scheduler} not Ready"
    path = POD_PATH.format(namespace=args.namespace, name=name)
    delete_pod(request, path)  # a probe a failed run left behind
    waiter.until(lambda: request("GET", path, None, "") is None)
    started = time.monotonic()
    request("POST", PODS_PATH.format(namespace=args.namespace), pod, "application/json")
    try:
        last: dict[str, Any] = {}

        def bound() -> str:
            last["pod"] = request("GET", path, None, "")
            return str(((last["pod"] or {}).get("spec") or {}).get("nodeName") or "")

        node = waiter.until(bound)
        if not node:
            return False, f"probe: pod {name} not bound by {scheduler}: {pod_scheduled_message(last.get('pod'))}"
        elapsed = time.monotonic() - started
        return True, f"probe: pod {name} bound to {node} by {scheduler} in {elapsed:.1f}s"
    finally:
        delete_pod(request, path)


def delete_pod(request: Requester, path: str) -> None:
    request("DELETE", path, {"gracePeriodSeconds": 0}, "application/json")


# ---- pre-delete: the operator's finalizer -------------------------------------------------------------------


def stop_replicas(args: argparse.Namespace, request: Requester, waiter: Waiter, clock: Clock) -> list[Verdict]:
    """Scale the StatefulSet to zero; wait until no replica is a live peer and no replica pod is left."""
    scale = SCALE_PATH.format(namespace=args.namespace, name=args.statefulset)
    scaled = request("PATCH", scale, {"spec": {"replicas": 0}}, MERGE_PATCH)
    results = [(True, f"StatefulSet {args.statefulset}: {'scaled to 0' if scaled else 'missing'}")]
    selector = urllib.parse.quote(args.selector)
    pods_path = PODS_PATH.format(namespace=args.namespace) + f"?labelSelector={selector}"

    def peers() -> list[str]:
        return sorted(live_peers(request("GET", PEERING_PATH.format(name=args.peering), None, "") or {}, clock()))

    def pods() -> list[str]:  # the StatefulSet's own (the selector matches the chart's hook pods, this one too)
        items = (request("GET", pods_path, None, "") or {}).get("items") or []
        return sorted(pod["metadata"]["name"] for pod in items if owned_by(pod, "StatefulSet", args.statefulset))

    waiter.until(lambda: not peers())
    alive = peers()
    results.append((not alive, f"ClusterKopfPeering {args.peering}: live peers: {', '.join(alive) or 'none'}"))
    if alive:
        return results
    waiter.until(lambda: not pods())
    # A pod stuck Terminating (its node gone) runs no operator once no peer is live: reported, not fatal.
    results.append((True, f"replica pods left: {', '.join(pods()) or 'none'}"))
    return results


def owned_by(obj: Mapping[str, Any], kind: str, name: str) -> bool:
    owners = (obj.get("metadata") or {}).get("ownerReferences") or []
    return any(owner.get("kind") == kind and owner.get("name") == name for owner in owners)


def release_finalizers(args: argparse.Namespace, request: Requester, waiter: Waiter) -> Verdict:
    """Remove ``--finalizer`` from every SchedulerProfile (a merge patch with the resourceVersion it was read at:
    a concurrent change makes it a conflict, and the profile is read again)."""
    released: list[str] = []

    def remaining() -> list[str]:
        left = []
        for profile in (request("GET", PROFILES_PATH, None, "") or {}).get("items") or []:
            meta = profile["metadata"]
            finalizers = meta.get("finalizers") or []
            if args.finalizer not in finalizers:
                continue
            kept = [f for f in finalizers if f != args.finalizer]
            patch = {"metadata": {"finalizers": kept or None, "resourceVersion": meta["resourceVersion"]}}
            try:
                request("PATCH", PROFILE_PATH.format(name=meta["name"]), patch, MERGE_PATCH)
                released.append(meta["name"])
            except urllib.error.HTTPError as e:
                if e.code != 409:
                    raise
                left.append(meta["name"])
        return left

    waiter.until(lambda: not remaining())
    left = remaining()
    if left:
        return False, f"SchedulerProfiles still holding {args.finalizer}: {', '.join(left)}"
    return True, f"{args.finalizer} removed from {len(released)} SchedulerProfile(s): {', '.join(released) or '-'}"


# ---- apply-crds: the chart's CRD on upgrade ----------------------------------------------------------------


def apply_crd(manifest: Mapping[str, Any], request: Requester, waiter: Waiter) -> Verdict:
    """Server-side apply one CRD (forcing: the chart's file is the truth) and wait until it is Established."""
    name = manifest["metadata"]["name"]
    path = CRD_PATH.format(name=name)
    applied = request("PATCH", f"{path}?fieldManager={FIELD_MANAGER}&force=true", manifest, APPLY_PATCH)
    if applied is None:
        return False, f"CRD {name}: missing (installed with --skip-crds? apply the chart's crds/ first)"
    ok = waiter.until(lambda: crd_verdict(name, request("GET", path, None, ""))[0])
    version = applied.get("metadata", {}).get("resourceVersion", "?")
    return bool(ok), f"CRD {name}: applied (resourceVersion {version}), {'Established' if ok else 'not Established'}"


def run_apply_crds(args: argparse.Namespace, request: Requester, clock: Clock, waiter: Waiter) -> list[Verdict]:
    results = []
    for text in args.crd_json:
        try:
            results.append(apply_crd(json.loads(text), request, waiter))
        except (OSError, ValueError) as e:
            results.append((False, f"API request failed: {e}"))
    return results


# ---- the API and the command line ---------------------------------------------------------------------------


def in_cluster_requester(timeout: float = 10) -> Requester:
    """Requests with the Pod's ServiceAccount; None for 404."""
    host, port = os.environ["KUBERNETES_SERVICE_HOST"], os.environ["KUBERNETES_SERVICE_PORT"]
    server = f"https://[{host}]:{port}" if ":" in host else f"https://{host}:{port}"
    context = ssl.create_default_context(cafile=f"{SERVICE_ACCOUNT}/ca.crt")

    def request(method: str, path: str, body: Any, content_type: str) -> Mapping[str, Any] | None:
        with open(f"{SERVICE_ACCOUNT}/token") as f:  # re-read: the kubelet rotates projected tokens
            token = f.read().strip()
        headers = {"Authorization": f"Bearer {token}", "Accept": "application/json"}
        data = None
        if body is not None:
            data, headers["Content-Type"] = json.dumps(body).encode(), content_type
        call = urllib.request.Request(server + path, data=data, headers=headers, method=method)
        try:
            with urllib.request.urlopen(call, timeout=timeout, context=context) as response:
                return json.loads(response.read())  # type: ignore[no-any-return]
        except urllib.error.HTTPError as e:
            if e.code == 404:
                return None
            raise

    return request


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="kopf-scheduler-hooks", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    test = sub.add_parser("test", help="`helm test`: the release is healthy and schedules a probe pod")
    test.add_argument("--crd", action="append", default=[], help="a CRD that must be Established (repeatable)")
    test.add_argument("--probe-pod", default="", help="the probe pod's manifest (JSON); empty: no probe")
    test.add_argument("--probe-timeout", type=float, default=60, help="seconds for the probe pod to be bound")
    delete = sub.add_parser("pre-delete", help="`helm uninstall`: stop the replicas, then release the finalizer")
    delete.add_argument("--selector", required=True, help="label selector of the StatefulSet's pods")
    delete.add_argument("--finalizer", required=True, help="the operator's finalizer on SchedulerProfiles")
    delete.add_argument("--delete-profile", default="", help="a SchedulerProfile of the chart's hooks to delete")
    delete.add_argument("--delete-crd", default="", help="a CRD to delete once no profile holds the finalizer")
    crds = sub.add_parser("apply-crds", help="`helm upgrade`: server-side apply the chart's CRDs")
    crds.add_argument("--crd-json", action="append", default=[], help="a CRD manifest as JSON (repeatable)")
    crds.add_argument("--timeout", type=float, default=60, help="seconds to wait for each CRD to be Established")
    crds.add_argument("--interval", type=float, default=1, help="seconds between attempts")
    for command in (test, delete):
        command.add_argument("--namespace", required=True, help="the release's namespace")
        command.add_argument("--statefulset", required=True, help="the chart's StatefulSet (its pods are the peers)")
        command.add_argument("--peering", required=True, help="the ClusterKopfPeering name")
        command.add_argument("--timeout", type=float, default=120, help="seconds to wait for every check to pass")
        command.add_argument("--interval", type=float, default=2, help="seconds between attempts")
    return parser.parse_args(argv)


def _utcnow() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC)


def run_test(args: argparse.Namespace, request: Requester, clock: Clock, waiter: Waiter) -> list[Verdict]:
    get: Getter = lambda path: request("GET", path, None, "")  # noqa: E731

    def health() -> list[Verdict]:
        try:
            return verdicts(args, get, clock())
        except (OSError, ValueError) as e:  # API unreachable, refused (403) or not JSON: retried, then reported
            return [(False, f"API request failed: {e}")]

    last: dict[str, list[Verdict]] = {}

    def healthy() -> bool:
        last["results"] = health()
        return all(ok for ok, _ in last["results"])

    waiter.until(healthy)
    results = last["results"]
    if args.probe_pod and all(ok for ok, _ in results):
        try:
            results.append(probe_verdict(args, request, waiter.again(args.probe_timeout)))
        except (OSError, ValueError) as e:
            results.append((False, f"probe: API request failed: {e}"))
    return results


def run_pre_delete(args: argparse.Namespace, request: Requester, clock: Clock, waiter: Waiter) -> list[Verdict]:
    try:
        results = stop_replicas(args, request, waiter, clock)
        if all(ok for ok, _ in results):
            results.append(release_finalizers(args, request, waiter.again(args.timeout)))
        if args.delete_profile and all(ok for ok, _ in results):
            gone = request("DELETE", PROFILE_PATH.format(name=args.delete_profile), None, "") is None
            results.append((True, f"SchedulerProfile {args.delete_profile}: {'none' if gone else 'deleted'}"))
        if args.delete_crd and all(ok for ok, _ in results):
            gone = request("DELETE", CRD_PATH.format(name=args.delete_crd), None, "") is None
            results.append((True, f"CRD {args.delete_crd}: {'none' if gone else 'deleted (crds.keep: false)'}"))
    except (OSError, ValueError) as e:
        results = [(False, f"API request failed: {e}")]
    return results


def main(
    argv: Sequence[str] | None = None,
    request: Requester | None = None,
    clock: Clock = _utcnow,
    sleep: Callable[[float], None] = time.sleep,
) -> int:
    args = parse_args(argv)
    request = request or in_cluster_requester()
    waiter = Waiter(args.timeout, args.interval, sleep)
    run = {"test": run_test, "pre-delete": run_pre_delete, "apply-crds": run_apply_crds}[args.command]
    results = run(args, request, clock, waiter)
    for ok, message in results:
        print(f"{'ok  ' if ok else 'FAIL'} {message}", flush=True)
    return 0 if all(ok for ok, _ in results) else 1


if __name__ == "__main__":
    sys.exit(main())
