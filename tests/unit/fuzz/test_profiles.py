"""Random SchedulerProfile specs, valid and invalid, applied to a running app: refused cleanly or served.

Generated (``profiles.py``): the default profile and valid variations, the conformance generator's specs of
every validation-error category, structured noise (any plugin or unknown name at any extension point, any
int32 weight, plugin args of right and wrong types, unknown fields, values that are not objects).

Invariants: ``apply_profile`` never raises; a refused spec says why (``InvalidProfile`` and a message) and the
previous pipeline keeps serving, the very same framework object; an accepted spec is served (a new framework)
and its status describes it (the status model accepts what ``pipeline_status`` writes, so the status patch is
valid against the CRD's schema), and what the pydantic model makes of a spec is stable (dumped and validated
again, the same model); whatever was applied, the app still schedules a plain pod with the serving pipeline
when that pipeline has a Bind plugin, no addedAffinity and no Filter or Score plugin without its PreFilter or
PreScore (those error on every pod, as upstream's), and nothing logs an error or swallows a Python exception.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

import pydantic
from hypothesis import given
from hypothesis import strategies as st

from kopf_scheduler.api.profile import SchedulerProfileSpec, SchedulerProfileStatus
from kopf_scheduler.framework.builder import resolve_profile
from kopf_scheduler.framework.extension_points import ExtensionPoint
from kopf_scheduler.framework.profile import ResolvedProfile
from kopf_scheduler.plugins.registry import default_registry
from tests.unit.factories import make_node
from tests.unit.fuzz.cluster import Cluster
from tests.unit.fuzz.conftest import scaled
from tests.unit.fuzz.profiles import profile_spec
from tests.unit.fuzz.strategies import fresh_name


def _pod(scheduler: str) -> dict[str, Any]:
    name = fresh_name()
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "default", "uid": f"uid-{name}"},
        "spec": {"schedulerName": scheduler, "containers": [{"name": "c", "image": "i"}]},
        "status": {"phase": "Pending"},
    }


def _applied(cluster: Cluster, spec: Any) -> None:
    app = cluster.app
    before = app.profiles.get("sp")
    serving = before.framework if before is not None else None
    outcome = app.apply_profile(name="sp", spec=spec, generation=2)
    after = app.profiles.get("sp")
    if not outcome.ready:
        assert outcome.reason == "InvalidProfile"
        assert outcome.message.strip()
        assert (after.framework if after is not None else None) is serving
        return
    assert after is not None
    assert after.framework is not serving
    status = SchedulerProfileStatus.model_validate(outcome.pipeline_status)
    assert status.effective_plugins.queue_sort, "a served profile sorts its queue"
    model = SchedulerProfileSpec.model_validate(spec or {})
    assert SchedulerProfileSpec.model_validate(model.to_api()) == model


def _still_schedules(cluster: Cluster) -> None:
    runtime = cluster.app.profiles.get("sp")
    if runtime is None or not runtime.resolved.enabled(ExtensionPoint.BIND):
        return
    if getattr(runtime.resolved.plugin_args.get("NodeAffinity"), "added_affinity", None):
        return  # an addedAffinity may keep every pod off the one node
    if _state_missing(runtime.resolved):
        return
    pod = _pod("sp")
    cluster.add_pod(pod)

    async def run() -> None:
        asyncio.get_running_loop().set_task_factory(cluster.task_factory)
        cluster.cycles("sp", 5)
        await cluster.app.drain()

    asyncio.run(run())
    assert pod["metadata"]["uid"] in cluster.api.bound_by_us, f"{runtime.resolved} did not bind a plain pod"


def _state_missing(resolved: ResolvedProfile) -> bool:
    """A plugin runs at Filter (Score) without its PreFilter (PreScore): it finds no cycle state and errors, as
    upstream's do ("reading ... from cycleState"); upstream accepts such a profile too."""
    default = resolve_profile("default", SchedulerProfileSpec(), default_registry())
    for first, then in (
        (ExtensionPoint.PRE_FILTER, ExtensionPoint.FILTER),
        (ExtensionPoint.PRE_SCORE, ExtensionPoint.SCORE),
    ):
        needed = {ref.name for ref in default.enabled(first)}
        present = {ref.name for ref in resolved.enabled(first)}
        if any(ref.name in needed and ref.name not in present for ref in resolved.enabled(then)):
            return True
    return False


@scaled(4)
@given(st.lists(profile_spec(), min_size=1, max_size=4))
def test_any_profile_spec_is_served_or_refused_with_the_previous_pipeline_kept(specs: list[Any]) -> None:
    cluster = Cluster()
    with cluster.errors.capturing():
        cluster.put_node(make_node("n1", labels={"disk": "a", "topology.kubernetes.io/zone": "z1"}))
        for spec in specs:
            _applied(cluster, spec)
            _still_schedules(cluster)
        problems = cluster.failures + cluster.errors.texts()
        assert not problems, "\n".join(problems)


@given(profile_spec())
def test_the_spec_model_refuses_with_pydantic_errors_only(spec: Any) -> None:
    """Validation of the spec model raises nothing but a ValidationError (which the app reports)."""
    with contextlib.suppress(pydantic.ValidationError):
        SchedulerProfileSpec.model_validate(spec or {})
