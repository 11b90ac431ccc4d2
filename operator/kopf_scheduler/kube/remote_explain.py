"""``kopf-scheduler explain`` through the API server: find the active replica, ask it via ``pods/proxy``.

Only the active replica schedules, so only it has the account of a pod's last attempt. Which one is active is
kopf's peering decision (``kopf/_core/engines/peering.py``), written down in the ClusterKopfPeering's
``status``: ``{<identity>: {priority, lifetime, lastseen}}``. A peer is alive until ``lastseen + lifetime``
(kopf's defaults for a missing field: priority 0, lifetime 60 s, lastseen now); the live peer with the
highest priority runs and every other pauses; two live peers sharing the top priority both pause (kopf does
that on purpose), so then nobody is active. The chart sets each replica's identity to its pod name
(``POD_ID``), so the active peer's identity is the pod to ask; an identity like ``user@host/…`` is kopf's
own for an operator run outside a pod (or ``kopf freeze``), which no proxy can reach.

The request goes to ``/api/v1/namespaces/<ns>/pods/https:<pod>:<port>/proxy/explain/<namespace>/<name>``
with the user's own credentials, so RBAC decides (``get`` on the peering object, on the pod and on
``pods/proxy``). The API server drops the ``Authorization`` header once it has authenticated the request
(``k8s.io/apiserver`` ``WithAuthentication``) and dials the pod without credentials of its own, so the
operator would see ``system:anonymous``; the CLI therefore repeats the user's bearer token in
:data:`FORWARDED_AUTHORIZATION_HEADER`, which the operator's delegated authentication reads when there is no
``Authorization`` header, and still authorizes ``get /explain/...`` for that user. A user who authenticates
with a client certificate has no token to forward, and the operator refuses the anonymous request. The
token goes to whichever pod the peering object names (in the operator's namespace only): whoever may write
that object's status or create pods there is trusted with it, as docs/operations.md says.

HTTP goes through :class:`APIServer` (``urllib``, synchronous: one CLI call is three requests), so the rest is
plain functions over JSON that unit tests drive with a fake.
"""

from __future__ import annotations

import datetime
import json
import re
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol
from urllib.parse import quote

from kopf_scheduler.kube.kubeconfig import Credentials

#: The user's ``Authorization`` value, repeated for the operator behind the API server's proxy.
FORWARDED_AUTHORIZATION_HEADER = "X-Kopf-Scheduler-Authorization"
PEERING_GROUP, PEERING_VERSION, PEERING_PLURAL = "kopf.dev", "v1", "clusterkopfpeerings"
#: Annotations on the peering object naming the operator's namespace: the chart's, then Helm's own.
NAMESPACE_ANNOTATIONS = ("kopf-scheduler.io/namespace", "meta.helm.sh/release-namespace")
#: The container port the chart names ``metrics`` (the HTTPS port of /metrics and /explain), else this.
METRICS_PORT_NAME = "metrics"
DEFAULT_METRICS_PORT = 10259
#: kopf's defaults for a peer record without them (``Peer.__init__``).
KOPF_DEFAULT_LIFETIME = 60
KOPF_DEFAULT_PRIORITY = 0
#: A pod name (DNS-1123 subdomain); kopf's generated identities (``user@host/ts/rnd``) are not.
_POD_NAME = re.compile(r"[a-z0-9]([-a-z0-9.]*[a-z0-9])?\Z")

RBAC_HINT = (
    "explain through the API server needs get on clusterkopfpeerings.kopf.dev {peering!r}, and get on the "
    "operator's pods and their pods/proxy in namespace {namespace!r} (the chart's <release>-metrics-reader "
    "ClusterRole and Role grant them, with get /explain/*: bind them with metrics.reader.subjects)"
)


class RemoteExplainError(Exception):
    """Explain cannot be answered through the API server; the message says why and what to do."""


@dataclass(frozen=True)
class Peer:
    identity: str
    priority: int
    lifetime: int
    lastseen: datetime.datetime

    @property
    def deadline(self) -> datetime.datetime:
        return self.lastseen + datetime.timedelta(seconds=self.lifetime)

    def alive_at(self, now: datetime.datetime) -> bool:
        return now < self.deadline  # kopf: dead when deadline <= now


def parse_peers(status: Mapping[str, Any] | None, now: datetime.datetime) -> list[Peer]:
    """The peer records of a peering object's ``status`` (kopf's field defaults; ``None`` entries are removals)."""
    peers = []
    for identity, record in (status or {}).items():
        if not isinstance(record, Mapping):
            continue
        seen = record.get("lastseen")
        lastseen = _parse_time(str(seen)) if seen is not None else now
        peers.append(
            Peer(
                identity=str(identity),
                priority=int(record.get("priority", KOPF_DEFAULT_PRIORITY)),
                lifetime=int(record.get("lifetime", KOPF_DEFAULT_LIFETIME)),
                lastseen=lastseen,
            )
        )
    return peers


def _parse_time(value: str) -> datetime.datetime:
    parsed = datetime.datetime.fromisoformat(str(value).replace("Z", "+00:00"))
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=datetime.UTC)


def active_peer(peers: Sequence[Peer], now: datetime.datetime, *, peering: str = "") -> Peer:
    """The live peer with the highest priority, alone at it; :class:`RemoteExplainError` when there is none."""
    where = f"ClusterKopfPeering {peering!r}" if peering else "the peering object"
    if not peers:
        raise RemoteExplainError(f"no replica has registered in {where}: is the operator running?")
    live = [p for p in peers if p.alive_at(now)]
    if not live:
        last = max(peers, key=lambda p: p.deadline)
        raise RemoteExplainError(
            f"no live replica in {where}: every peer record has expired (the latest, {last.identity!r}, "
            f"at {last.deadline.isoformat()}): the operator is down or cannot reach the API server"
        )
    top = max(p.priority for p in live)
    leaders = sorted(p.identity for p in live if p.priority == top)
    if len(leaders) > 1:
        raise RemoteExplainError(
            f"no active replica: live peers {', '.join(leaders)} share priority {top} in {where}, and kopf "
            "pauses every peer of a shared top priority"
        )
    return next(p for p in live if p.identity == leaders[0])


def pod_of_peer(identity: str) -> str:
    """The pod name behind a peer identity (the chart sets ``POD_ID`` to it)."""
    if not _POD_NAME.match(identity) or len(identity) > 253:
        raise RemoteExplainError(
            f"the active peer {identity!r} is not a pod (an operator run outside the cluster without POD_ID, or "
            "`kopf freeze`): reach it with --url"
        )
    return identity


def operator_namespace_of(peering: Mapping[str, Any]) -> str | None:
    annotations = (peering.get("metadata") or {}).get("annotations") or {}
    return next((annotations[a] for a in NAMESPACE_ANNOTATIONS if annotations.get(a)), None)


def metrics_port_of(pod: Mapping[str, Any]) -> int:
    """The container port named ``metrics`` (the chart's), else kube-scheduler's 10259."""
    for container in (pod.get("spec") or {}).get("containers") or []:
        for port in container.get("ports") or []:
            if port.get("name") == METRICS_PORT_NAME and port.get("containerPort"):
                return int(port["containerPort"])
    return DEFAULT_METRICS_PORT


def peering_path(name: str) -> str:
    return f"/apis/{PEERING_GROUP}/{PEERING_VERSION}/{PEERING_PLURAL}/{quote(name, safe='')}"


def pod_path(namespace: str, pod: str) -> str:
    return f"/api/v1/namespaces/{quote(namespace, safe='')}/pods/{quote(pod, safe='')}"


def explain_proxy_path(*, operator_namespace: str, operator_pod: str, port: int, namespace: str, name: str) -> str:
    """``pods/proxy`` to the replica's HTTPS metrics port, then the operator's ``/explain/<namespace>/<name>``."""
    target = quote(f"https:{operator_pod}:{port}", safe=":")
    explain = f"/explain/{quote(namespace, safe='')}/{quote(name, safe='')}"
    return f"/api/v1/namespaces/{quote(operator_namespace, safe='')}/pods/{target}/proxy{explain}"


class Transport(Protocol):
    def __call__(self, path: str, headers: Mapping[str, str]) -> tuple[int, bytes]: ...


class APIServer:
    """GETs against the API server with the kubeconfig's credentials; returns (status, body) for any status."""

    def __init__(self, credentials: Credentials, *, timeout: float = 15.0) -> None:
        self._credentials = credentials
        self._context = credentials.ssl_context()
        self._timeout = timeout

    def __call__(self, path: str, headers: Mapping[str, str]) -> tuple[int, bytes]:
        request = urllib.request.Request(
            self._credentials.server + path,
            headers={"Accept": "application/json", **self._credentials.auth_headers(), **headers},
        )
        try:
            with urllib.request.urlopen(request, timeout=self._timeout, context=self._context) as response:
                return response.status, response.read()
        except urllib.error.HTTPError as e:
            return e.code, e.read() or b""
        except OSError as e:
            raise RemoteExplainError(f"cannot reach the API server {self._credentials.server}: {e}") from e


def _message(body: bytes) -> str:
    """The ``message`` of a Status (the API server's or the operator's), else the raw text."""
    try:
        decoded = json.loads(body or b"{}")
    except ValueError:
        return body.decode(errors="replace").strip()
    return str(decoded.get("message") or "") if isinstance(decoded, dict) else str(decoded)


def _get_json(api: Transport, path: str, what: str, hint: str) -> dict[str, Any] | None:
    """The object at ``path``; None on 404; :class:`RemoteExplainError` naming the missing right on 401/403."""
    status, body = api(path, {})
    if status == 200:
        return dict(json.loads(body))
    if status == 404:
        return None
    if status in (401, 403):
        raise RemoteExplainError(f"reading {what}: {_message(body) or status}; {hint}")
    raise RemoteExplainError(f"reading {what}: HTTP {status}: {_message(body)}")


@dataclass(frozen=True)
class Target:
    """The replica explain asks (the active peer, its pod and port) and the ``pods/proxy`` path to it."""

    peer: Peer
    namespace: str
    pod: str
    port: int
    path: str


def find_target(
    api: Transport,
    *,
    peering_name: str,
    namespace: str,
    name: str,
    operator_namespace: str | None = None,
    fallback_namespace: str = "default",
    port: int | None = None,
    now: Callable[[], datetime.datetime] = lambda: datetime.datetime.now(datetime.UTC),
) -> Target:
    """The active replica and the ``pods/proxy`` path of its ``/explain`` for pod ``namespace/name``."""
    guess = operator_namespace or fallback_namespace
    peering = _get_json(
        api,
        peering_path(peering_name),
        f"ClusterKopfPeering {peering_name!r}",
        RBAC_HINT.format(peering=peering_name, namespace=guess),
    )
    if peering is None:
        raise RemoteExplainError(
            f"there is no ClusterKopfPeering {peering_name!r}: is kopf-scheduler installed, and under this "
            "peering name (--peering-name, the chart's peering.name)?"
        )
    moment = now()
    peer = active_peer(parse_peers(peering.get("status"), moment), moment, peering=peering_name)
    pod_name = pod_of_peer(peer.identity)
    operator_ns = operator_namespace or operator_namespace_of(peering) or fallback_namespace
    hint = RBAC_HINT.format(peering=peering_name, namespace=operator_ns)
    pod = _get_json(api, pod_path(operator_ns, pod_name), f"pod {operator_ns}/{pod_name}", hint)
    if pod is None:
        raise RemoteExplainError(
            f"the active peer {pod_name!r} is not a pod in namespace {operator_ns!r}: pass the operator's "
            "namespace with --operator-namespace"
        )
    chosen_port = port or metrics_port_of(pod)
    path = explain_proxy_path(
        operator_namespace=operator_ns, operator_pod=pod_name, port=chosen_port, namespace=namespace, name=name
    )
    return Target(peer=peer, namespace=operator_ns, pod=pod_name, port=chosen_port, path=path)


def fetch_explanation(
    api: Transport, target: Target, *, token: str | None, peering_name: str
) -> tuple[int, dict[str, Any]]:
    """GET the account through the proxy: (200, account) or (404, the operator's "nothing recorded" body).

    Refusals become :class:`RemoteExplainError` saying who refused (the API server or the operator) and why.
    """
    headers = {FORWARDED_AUTHORIZATION_HEADER: f"Bearer {token}"} if token else {}
    status, body = api(target.path, headers)
    try:
        decoded = json.loads(body or b"{}")
    except ValueError:
        decoded = None
    if status in (200, 404) and isinstance(decoded, dict) and (status == 200 or "pod" in decoded):
        return status, decoded
    message = _message(body)
    is_operator_status = isinstance(decoded, dict) and not (decoded.get("details") or {}).get("kind")
    if status == 403 and not is_operator_status:  # the API server: pods/proxy not granted
        hint = RBAC_HINT.format(peering=peering_name, namespace=target.namespace)
        raise RemoteExplainError(f"{message}; {hint}")
    if status in (401, 403):  # the operator's delegated authn/authz, behind the proxy
        refusal = f"replica {target.pod} refused: {message}"
        if not token:
            refusal += (
                "; the API server does not pass on who you are, and this kubeconfig user has no bearer token "
                "to forward (a client certificate): use a token user (--token)"
            )
        else:
            refusal += "; the caller needs get on /explain/* (the chart's <release>-metrics-reader ClusterRole)"
        raise RemoteExplainError(refusal)
    if status in (502, 503):  # the API server could not reach the pod
        lifetime = target.peer.lifetime
        raise RemoteExplainError(
            f"replica {target.pod}, the active peer (last seen {target.peer.lastseen.isoformat()}), does not "
            f"answer: {message}; if it just died, a standby takes over once its record expires (lifetime "
            f"{lifetime} s): try again"
        )
    raise RemoteExplainError(f"replica {target.pod} via {target.path}: HTTP {status}: {message}")
