"""What a scheduling attempt tells the user: events, the PodScheduled condition, and ``/explain``.

Upstream splits this between the event recorder (``Scheduled`` after a successful bind, ``FailedScheduling``
in ``handleSchedulingFailure``) and ``updatePod``, which patches ``PodScheduled=False`` only when the condition
would change. What is ours: a FailedScheduling event is posted once per distinct message, and again only after
the maximum pod backoff (upstream relies on the recorder's aggregation), and each FitError's node-by-node
account is kept for ``/explain`` with the pod's recent attempts (any failure), and a bound pod's scores when its
profile keeps them (see ``explain.py``).

The binding cycle also publishes ``status.nominatedNodeName`` through :meth:`Reporter.nominate` before a
PreBind that has work (upstream's NominatedNodeNameForExpectation). A failure sets it in the same patch as the
condition (upstream ``updatePod`` with a NominatingInfo of mode Override): to the node a preemption
nominated, or to nothing when the failure clears the nomination. Plugins' events (DefaultPreemption's
``Preempted``) go out through :meth:`Reporter.record_event`, the Handle's recorder.

Everything here is best effort: a failed event post or status patch is logged and never changes a scheduling
decision. The posts run as tasks (``spawn``) so the scheduling cycle never waits for the API server. A pod's
status patches still go out one after the other, and its binding cycle waits for the last one
(:meth:`Reporter.status_settled`), as upstream's API dispatcher keeps one call per object in flight: a late
PodScheduled=False patch would otherwise overwrite the PodScheduled=True that the Binding sets.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from kopf_scheduler.algorithm import FitError
from kopf_scheduler.client import ClientRef
from kopf_scheduler.decisions import failure_annotations, success_annotations, unchanged, with_stale_cleared
from kopf_scheduler.explain import Explanations, ScoreCapture, explain_fit_error
from kopf_scheduler.framework import BINDING_ANNOTATIONS, APIError, CycleState, PostFilterResult, nominated_node_name
from kopf_scheduler.kube.events import event_body
from kopf_scheduler.state.pod_info import PodInfo

logger = logging.getLogger("kopf_scheduler")

#: Runs a coroutine as a background task the app keeps (and drains on shutdown).
Spawn = Callable[[Awaitable[Any]], None]


class Reporter:
    """Posts a pod's Scheduled/FailedScheduling events, patches its PodScheduled condition, keeps explanations."""

    def __init__(
        self,
        *,
        client: ClientRef,
        hostname: str,
        clock: Callable[[], float],
        repeat_after: float,
        spawn: Spawn,
        explanations: Explanations | None = None,
    ) -> None:
        self._client = client
        self._hostname = hostname
        self._clock = clock
        #: An unchanged FailedScheduling message is posted again only this long after the last post.
        self._repeat_after = repeat_after
        self._spawn = spawn
        self._last_failure: dict[str, tuple[str, float]] = {}
        #: The latest failed attempt of each pending pod, node by node (``/explain``).
        self.explanations = explanations or Explanations()
        #: The pod whose failure :meth:`explain` just recorded in full, with that account (``failed`` then records
        #: nothing more).
        self._explained: tuple[str, dict[str, Any]] | None = None
        #: Pod UID → set when its last spawned status patch has finished (absent: none in flight).
        self._status_patches: dict[str, asyncio.Event] = {}

    # -- outcomes of an attempt ----------------------------------------------------------------------
    async def scheduled(self, pod: PodInfo, profile: str, node: str, scores: ScoreCapture | None = None) -> None:
        """The Scheduled event; with ``scores`` (the profile keeps success accounts) the account for /explain."""
        if scores is not None:
            self.explanations.record_success(pod.key, profile, scores)
        await self.post_event(
            pod, profile, "Normal", "Scheduled", "Binding", f"Successfully assigned {pod.key} to {node}"
        )

    def failed(
        self,
        pod: PodInfo,
        profile: str,
        *,
        reason: str,
        message: str,
        nominated_node: str | None = None,
        annotate: bool = False,
    ) -> None:
        """FailedScheduling (deduplicated by message) and the PodScheduled condition (only if it changes).

        ``nominated_node`` is upstream's NominatingInfo: None leaves ``status.nominatedNodeName`` as it is
        (Noop); a name sets it (a preemption's nomination), "" removes it (``clearNominatedNode``), each in
        the same patch as the condition and only if it changes the field. With ``annotate`` (the profile's
        ``spec.explain.annotations``) the attempt's account also goes onto the pod (:meth:`_annotate_failure`).
        """
        account = self._remember_failure(pod, profile, reason, message)
        now = self._clock()
        last = self._last_failure.get(pod.uid)
        if last is None or last[0] != message or now - last[1] >= self._repeat_after:
            self._last_failure[pod.uid] = (message, now)
            self._spawn(self.post_event(pod, profile, "Warning", "FailedScheduling", "Scheduling", message))
        condition = _needs_condition_patch(pod.obj, reason, message)
        nominate = nominated_node is not None and nominated_node != nominated_node_name(pod)
        if condition or nominate:
            patch = self.patch_condition(
                pod, reason, message, condition=condition, nominated_node=nominated_node if nominate else None
            )
            self._spawn(self._in_order(pod.uid, patch))
        if annotate:
            self._annotate_failure(pod, account)

    def _annotate_failure(self, pod: PodInfo, account: dict[str, Any]) -> None:
        """One merge patch of the pod's annotations with this failure's account, unless the pod carries it already
        (the same result, message and nodes: an unchanged failure is not written again, so a pod that keeps
        failing alike costs one write). It goes in order with the status patches: the binding cycle waits for it,
        so it never lands after a Binding's annotations."""
        try:
            annotations = failure_annotations(account)
        except Exception:  # an explanation must never cost a scheduling decision
            logger.exception("could not write the explain annotations of %s", pod.key)
            return
        if unchanged(annotations, (pod.obj.get("metadata") or {}).get("annotations") or {}):
            return
        self._spawn(self._in_order(pod.uid, self._patch_annotations(pod, annotations)))

    def annotate_binding(self, state: CycleState, pod: PodInfo, profile: str, scores: ScoreCapture) -> None:
        """The success account as annotations the Binding carries (DefaultBinder sends them): no write of its own."""
        try:
            current = (pod.obj.get("metadata") or {}).get("annotations") or {}
            state.write(BINDING_ANNOTATIONS, with_stale_cleared(success_annotations(profile, scores), current))
        except Exception:  # an explanation must never cost a scheduling decision
            logger.exception("could not build the explain annotations of %s", pod.key)

    async def _patch_annotations(self, pod: PodInfo, annotations: dict[str, str]) -> None:
        client = self._client()
        if client is None:
            return
        try:
            await client.patch_pod_annotations(namespace=pod.namespace, name=pod.name, annotations=annotations)
        except APIError as e:
            if e.status != 404:
                logger.warning("could not annotate %s: %s", pod.key, e)
        except Exception as e:
            logger.warning("could not annotate %s: %s", pod.key, e)

    async def status_settled(self, uid: str) -> None:
        """Return once the pod's spawned status patches have gone out (the binding cycle waits for them)."""
        pending = self._status_patches.get(uid)
        if pending is not None:
            await pending.wait()

    def _in_order(self, uid: str, patch: Awaitable[None]) -> Awaitable[None]:
        """``patch`` to be run after the pod's earlier status patches, tracked for :meth:`status_settled`."""
        earlier = self._status_patches.get(uid)
        done = self._status_patches[uid] = asyncio.Event()

        async def run() -> None:
            try:
                if earlier is not None:
                    await earlier.wait()
                await patch
            finally:
                done.set()
                if self._status_patches.get(uid) is done:
                    del self._status_patches[uid]

        return run()

    async def nominate(self, pod: PodInfo, node: str) -> None:
        """Set ``status.nominatedNodeName`` to ``node`` unless the pod has it already (upstream ``updatePod``).

        The binding cycle awaits this before a PreBind that will take a while, so that other components (the
        cluster autoscaler) know the pod is about to land there. A failure is logged, never fatal.
        """
        if nominated_node_name(pod) == node:
            return
        await self._patch_status(pod, {"nominatedNodeName": node}, "nominatedNodeName")

    def record_event(
        self,
        pod: PodInfo,
        profile: str,
        event_type: str,
        reason: str,
        action: str,
        note: str,
        related: PodInfo | Mapping[str, Any] | None = None,
    ) -> None:
        """A plugin's event about a pod (the Handle's ``record_event``), posted in the background."""
        self._spawn(self.post_event(pod, profile, event_type, reason, action, note, related))

    def pod_group_status(self, namespace: str, name: str, patch: dict[str, Any]) -> None:
        """Patch a PodGroup's status (its PodGroupScheduled condition, upstream ``updatePodGroupCondition``), in
        the background and best effort: a failure is logged, as upstream's."""
        self._spawn(self._patch_pod_group_status(namespace, name, patch))

    async def _patch_pod_group_status(self, namespace: str, name: str, patch: dict[str, Any]) -> None:
        client = self._client()
        if client is None:
            return
        try:
            await client.patch_pod_group_status(namespace=namespace, name=name, patch=patch)
        except Exception as e:
            logger.warning("Failed to update PodGroup status: podGroup=%s/%s: %s", namespace, name, e)

    def explain(self, profile: str, fit: FitError, post_filter: PostFilterResult | None = None) -> None:
        """Keep the per-node account of this failure (read within the cycle: node names are live), with
        what PostFilter (preemption) found on each node; :meth:`failed` follows for the same attempt."""
        try:
            account = explain_fit_error(fit, profile=profile, at=now_rfc3339(), post_filter=post_filter)
            self.explanations.record(fit.pod.key, account)
            self._explained = (fit.pod.key, account)
        except Exception:  # an explanation must never cost a scheduling decision
            logger.exception("could not explain the failure of %s", fit.pod.key)

    def _remember_failure(self, pod: PodInfo, profile: str, reason: str, message: str) -> dict[str, Any]:
        """A failure :meth:`explain` did not account for (a scheduling error, a binding failure, a Permit
        rejection while waiting) still joins the pod's history, with its reason and message; returns the
        attempt's account (:meth:`explain`'s when it made one)."""
        explained, self._explained = self._explained, None
        if explained is not None and explained[0] == pod.key:
            return explained[1]
        account = {"pod": pod.key, "profile": profile, "time": now_rfc3339(), "result": reason, "message": message}
        self.explanations.record(pod.key, account)
        return account

    def forget(self, uid: str, key: str) -> None:
        """The pod is bound or gone: nothing about its failures is worth keeping."""
        self._last_failure.pop(uid, None)
        self.explanations.forget(key)

    # -- the API calls -------------------------------------------------------------------------------
    async def post_event(
        self,
        pod: PodInfo,
        profile: str,
        event_type: str,
        reason: str,
        action: str,
        note: str,
        related: PodInfo | Mapping[str, Any] | None = None,
    ) -> None:
        client = self._client()
        if client is None:
            return
        body = event_body(
            regarding=pod.obj,
            event_type=event_type,
            reason=reason,
            action=action,
            note=note,
            reporting_controller=profile,
            reporting_instance=f"{profile}-{self._hostname}"[:128],
            related=related.obj if isinstance(related, PodInfo) else None if related is None else dict(related),
        )
        try:
            await client.create_event(namespace=pod.namespace, body=body)
        except Exception as e:  # events are best effort, as client-go's recorder
            logger.warning("could not post %s event for %s: %s", reason, pod.key, e)

    async def patch_condition(
        self, pod: PodInfo, reason: str, message: str, *, condition: bool = True, nominated_node: str | None = None
    ) -> None:
        """Patch PodScheduled=False (if ``condition``) and set nominatedNodeName (if ``nominated_node`` is not
        None; "" removes it)."""
        status: dict[str, Any] = {}
        if condition:
            status["conditions"] = [
                {
                    "type": "PodScheduled",
                    "status": "False",
                    "reason": reason,
                    "message": message,
                    "lastProbeTime": None,
                    "lastTransitionTime": now_rfc3339(),
                }
            ]
        if nominated_node is not None:
            status["nominatedNodeName"] = nominated_node or None  # null deletes the field in a strategic merge patch
        await self._patch_status(pod, status, "PodScheduled")

    async def _patch_status(self, pod: PodInfo, status: dict[str, Any], what: str) -> None:
        """One best-effort ``pods/status`` patch, retried as upstream's ``util.PatchPodStatus`` retries it (its
        ``Retriable`` errors, :data:`PATCH_RETRY_DELAYS`); a pod gone meanwhile (404) is not worth a warning."""
        client = self._client()
        if client is None:
            return
        try:
            for delay in (*PATCH_RETRY_DELAYS, None):
                try:
                    await client.patch_pod_status(namespace=pod.namespace, name=pod.name, patch={"status": status})
                    return
                except Exception as e:
                    if delay is None or not _retriable(e):
                        raise
                await asyncio.sleep(delay)
        except APIError as e:
            if e.status != 404:
                logger.warning("could not patch %s of %s: %s", what, pod.key, e)
        except Exception as e:
            logger.warning("could not patch %s of %s: %s", what, pod.key, e)


#: The waits between the attempts of a status patch: client-go's ``retry.DefaultBackoff`` (4 steps from 10 ms, factor
#: 5; without its 10 % jitter), which upstream's ``util.PatchPodStatus`` retries with.
PATCH_RETRY_DELAYS = (0.01, 0.05, 0.25)


def _retriable(error: Exception) -> bool:
    """Upstream ``util.Retriable``: an internal error (500), service unavailable (503), a conflict (409), or a
    refused connection. Ours beyond it: any lost connection (a reset, an abort, a broken pipe; the patch sets the
    same condition again, so sending it twice does no harm). Upstream's HTTP/2 connection is rarely reset under one
    request; ours are HTTP/1.1 connections, one per request in flight, and a patch lost so left a pending pod without
    a reason until its next attempt, up to five minutes later (tests/e2e/test_operator_faults.py, connection
    resets)."""
    return getattr(error, "status", None) in (500, 503, 409) or isinstance(error, ConnectionError)


def _needs_condition_patch(obj: dict[str, Any], reason: str, message: str) -> bool:
    """Upstream patches only when the PodScheduled condition would change (ignoring timestamps)."""
    for condition in (obj.get("status") or {}).get("conditions") or ():
        if condition.get("type") == "PodScheduled":
            return not (
                condition.get("status") == "False"
                and condition.get("reason") == reason
                and condition.get("message") == message
            )
    return True


def now_rfc3339() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
