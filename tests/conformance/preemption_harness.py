"""The harness's preemption half: upstream decides whom to preempt, and never preempts anyone.

Why: with DefaultPreemption on both sides, a pod that fits nowhere makes upstream pick a node and victims
(``framework/preemption/preemption.go`` ``Evaluator.Preempt``), nominate the pod there, and (asynchronous
preemption, beta and on in 1.36) have a goroutine of ``executor.go`` ``prepareCandidateAsync`` preempt
each victim: a ``pods/status`` patch that adds the ``DisruptionTarget`` condition, then a DELETE. Upstream
decides first on every pod and must leave the cluster as it found it, while we must still see whom it
chose. So:

- a validating admission *webhook* served by the harness (:class:`PreemptionWebhook`, matched by CEL
  ``matchConditions`` to upstream's ServiceAccount and to status updates that carry ``DisruptionTarget``)
  refuses each such patch with **404 NotFound**. That code matters: on NotFound ``PreemptPod`` logs
  ``"Victim Pod is already deleted"`` (victim, preemptor, node) and returns success, so the goroutine goes
  on to the next victim and ends without error. Any other refusal (a ValidatingAdmissionPolicy can only
  say 403/422) makes the executor cancel the other victims' calls and skip the last one, and activates the
  preemptor again at once, which would hide victims and loop. The webhook also records what it refused;
- a ValidatingAdmissionPolicy (:func:`no_pod_deletes_policy`) denies upstream's account every pod DELETE,
  should a victim's patch ever get through (then the run says so: upstream's log has ``"Tried to
  preempted pod"``);
- upstream's log at ``-v=2`` says the rest (oracle.py ``parse_cycle``): ``"the target node for the
  preemption is determined"``, the victims it skipped because they were already terminating, and when the
  goroutine finished. The preemptor's ``status.nominatedNodeName`` is patched together with its
  PodScheduled=False condition (``handleSchedulingFailure`` → ``updatePod``).

Our side preempts for real (victims deleted by the operator), which :class:`PodWatch` observes: every
pod's first nomination, first PodScheduled=False message, a ``DisruptionTarget`` condition and its
deletion, in order. The runner then compares both sides' decisions, made on the same state (runner.py).

A kubelet stand-in (:func:`start_time_patch`) gives every pod on a node a distinct ``status.startTime``:
upstream's tie-breaks between candidate nodes and between victims (``pickOneNodeForPreemption``'s last
criterion, ``MoreImportantPod``) read it, and a pod without one counts as started *now*, at each call,
which would make the choice depend on timing.
"""

from __future__ import annotations

import base64
import datetime
import json
import ssl
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from kubernetes import client, watch

NO_PREEMPTION_WEBHOOK = "conformance-upstream-never-preempts"
NO_POD_DELETES_POLICY = "conformance-upstream-never-deletes-pods"
PREEMPTION_REFUSED = "conformance: upstream may not preempt"
DELETE_DENIED = "conformance: upstream may not delete pods"
#: Start times the kubelet stand-in hands out: one second apart from here, in the order pods reach nodes.
START_EPOCH = datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC)

Obj = dict[str, Any]


# -- upstream never preempts ------------------------------------------------------------------------------
def review_response(review: Mapping[str, Any]) -> Obj:
    """The webhook's answer to one AdmissionReview: refused, as NotFound (see the module docstring)."""
    request = review.get("request") or {}
    meta = ((request.get("object") or {}).get("metadata")) or {}
    victim = f"{meta.get('namespace', request.get('namespace', ''))}/{meta.get('name', request.get('name', ''))}"
    return {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "response": {
            "uid": request.get("uid", ""),
            "allowed": False,
            "status": {"code": 404, "reason": "NotFound", "message": f"{PREEMPTION_REFUSED} {victim}"},
        },
    }


@dataclass(frozen=True)
class Refusal:
    """One DisruptionTarget patch the webhook refused."""

    uid: str
    victim: str  # namespace/name
    message: str  # the condition's message (names the preemptor's scheduler)


class PreemptionWebhook:
    """An HTTPS admission webhook on 127.0.0.1 (the API server's own serving certificate) that refuses."""

    def __init__(self, cert: Path, key: Path) -> None:
        self.cert = cert
        self.refused: list[Refusal] = []
        self._lock = threading.Lock()
        webhook = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                review = json.loads(self.rfile.read(length) or b"{}")
                webhook._record(review)
                body = json.dumps(review_response(review)).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: Any) -> None:
                return

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(str(cert), str(key))
        self._server.socket = context.wrap_socket(self._server.socket, server_side=True)
        self._thread = threading.Thread(target=self._server.serve_forever, name="preemption-webhook", daemon=True)

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self._server.server_address[1]}/refuse"

    def start(self) -> PreemptionWebhook:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=10)

    def refusals(self) -> list[Refusal]:
        with self._lock:
            return list(self.refused)

    def _record(self, review: Mapping[str, Any]) -> None:
        request = review.get("request") or {}
        obj = request.get("object") or {}
        meta = obj.get("metadata") or {}
        conditions = (obj.get("status") or {}).get("conditions") or ()
        message = next((c.get("message", "") for c in conditions if c.get("type") == "DisruptionTarget"), "")
        refusal = Refusal(str(meta.get("uid", "")), f"{meta.get('namespace')}/{meta.get('name')}", str(message))
        with self._lock:
            self.refused.append(refusal)

    def configuration(self, upstream_user: str) -> Obj:
        """The ValidatingWebhookConfiguration that sends upstream's DisruptionTarget patches here."""
        ca_bundle = base64.b64encode(self.cert.read_bytes()).decode()
        return {
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "ValidatingWebhookConfiguration",
            "metadata": {"name": NO_PREEMPTION_WEBHOOK},
            "webhooks": [
                {
                    "name": "never-preempts.conformance.kopf-scheduler.io",
                    "clientConfig": {"url": self.url, "caBundle": ca_bundle},
                    "rules": [
                        {
                            "apiGroups": [""],
                            "apiVersions": ["v1"],
                            "operations": ["UPDATE"],
                            "resources": ["pods/status"],
                        }
                    ],
                    "matchConditions": [
                        {"name": "upstream", "expression": f"request.userInfo.username == '{upstream_user}'"},
                        {
                            "name": "disruption-target",
                            "expression": "has(object.status.conditions) && "
                            "object.status.conditions.exists(c, c.type == 'DisruptionTarget')",
                        },
                    ],
                    "failurePolicy": "Fail",
                    "sideEffects": "None",
                    "admissionReviewVersions": ["v1"],
                    "timeoutSeconds": 5,
                }
            ],
        }


def no_pod_deletes_policy(upstream_user: str) -> tuple[Obj, Obj]:
    """The policy and its binding that deny ``upstream_user`` every pod DELETE (the safety net)."""
    policy = {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicy",
        "metadata": {"name": NO_POD_DELETES_POLICY},
        "spec": {
            "failurePolicy": "Fail",
            "matchConstraints": {
                "resourceRules": [
                    {"apiGroups": [""], "apiVersions": ["v1"], "operations": ["DELETE"], "resources": ["pods"]}
                ]
            },
            "validations": [
                {"expression": f"request.userInfo.username != '{upstream_user}'", "message": DELETE_DENIED}
            ],
        },
    }
    binding = {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicyBinding",
        "metadata": {"name": NO_POD_DELETES_POLICY},
        "spec": {"policyName": NO_POD_DELETES_POLICY, "validationActions": ["Deny"]},
    }
    return policy, binding


# -- the kubelet stand-in ---------------------------------------------------------------------------------
def start_time(sequence: int) -> str:
    """The ``status.startTime`` of the ``sequence``-th pod to start (RFC 3339, whole seconds, all distinct)."""
    moment = START_EPOCH + datetime.timedelta(seconds=sequence)
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


def start_time_patch(sequence: int) -> Obj:
    return {"status": {"startTime": start_time(sequence)}}


# -- what happens to pods ---------------------------------------------------------------------------------
@dataclass
class PodFacts:
    """What :class:`PodWatch` saw of one pod (by UID)."""

    key: str
    nominated: str | None = None
    #: The first PodScheduled=False message (the condition is overwritten once the pod binds).
    unschedulable: str | None = None
    disrupted: bool = False
    deleted: bool = False


@dataclass
class PodWatch:
    """Pod UID → :class:`PodFacts`, and the order of disruptions and deletions (a watch on its own thread)."""

    api: client.ApiClient
    facts: dict[str, PodFacts] = field(default_factory=dict)
    #: (sequence, uid) of every pod that got a DisruptionTarget condition or was deleted, in order seen.
    gone: list[tuple[int, str]] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.core = client.CoreV1Api(self.api)
        self._lock = threading.Lock()
        self._stopped = threading.Event()
        self._watch: watch.Watch | None = None
        self._sequence = 0
        self._thread = threading.Thread(target=self._run, name="pod-watch", daemon=True)

    def start(self) -> PodWatch:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stopped.set()
        if self._watch is not None:
            self._watch.stop()
        self._thread.join(timeout=10)

    def get(self, uid: str) -> PodFacts | None:
        with self._lock:
            return self.facts.get(uid)

    def nominated(self, uid: str) -> str | None:
        facts = self.get(uid)
        return facts.nominated if facts else None

    def mark(self) -> int:
        """A position in :attr:`gone`; :meth:`gone_since` lists what went after it."""
        with self._lock:
            return self._sequence

    def gone_since(self, mark: int) -> list[PodFacts]:
        """Pods disrupted or deleted after ``mark`` (each once, in the order first seen)."""
        with self._lock:
            uids = [uid for seq, uid in self.gone if seq > mark]
            return [self.facts[uid] for uid in dict.fromkeys(uids)]

    def observe(self, event_type: str, pod: Any) -> None:
        """Fold one watch event in (public for the unit tests)."""
        meta, status = pod.metadata, pod.status
        with self._lock:
            facts = self.facts.setdefault(meta.uid, PodFacts(f"{meta.namespace}/{meta.name}"))
            if status is not None and status.nominated_node_name and facts.nominated is None:
                facts.nominated = status.nominated_node_name
            for condition in (status.conditions if status is not None else None) or ():
                unschedulable = condition.status == "False" and condition.reason == "Unschedulable"
                if condition.type == "PodScheduled" and unschedulable and facts.unschedulable is None:
                    facts.unschedulable = condition.message or ""
                if condition.type == "DisruptionTarget" and condition.status == "True" and not facts.disrupted:
                    facts.disrupted = True
                    self._went(meta.uid)
            if (event_type == "DELETED" or meta.deletion_timestamp is not None) and not facts.deleted:
                facts.deleted = True
                self._went(meta.uid)

    def _went(self, uid: str) -> None:
        self._sequence += 1
        self.gone.append((self._sequence, uid))

    def _run(self) -> None:
        """Watch pods for ever; a restarted watch resumes where the last one ended.

        Resuming matters: a re-list shows only each pod's latest state, and a pod that failed twice in the gap
        would have its first PodScheduled message (the one compared) replaced by its second. Only when the
        API server has forgotten the version (410 Gone) does it start over with a list.
        """
        version: str | None = None
        while not self._stopped.is_set():
            self._watch = watch.Watch()
            resume = {"resource_version": version} if version else {}
            try:
                for event in self._watch.stream(self.core.list_pod_for_all_namespaces, timeout_seconds=60, **resume):
                    self.observe(str(event["type"]), event["object"])
                    version = self._watch.resource_version
                    if self._stopped.is_set():
                        return
            except client.ApiException as e:
                if e.status == 410:
                    version = None
            except Exception:  # a dropped connection: resume from the last version seen
                pass
