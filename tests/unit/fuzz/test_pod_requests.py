"""A pod's requests as the scheduler counts them, against a plain restatement of upstream's rule.

Generated: pods of ``strategies.pod_spec`` (containers, init containers and sidecars, pod-level resources,
overhead, extended resources and hugepages, over the strategies' small vocabulary of quantities).

Invariant: ``PodInfo.requests`` equals component-helpers' ``PodRequests`` (v1.36, PodLevelResources on) written
out here independently in its plainest form: regular containers summed; init containers walked in order, a
restartable one (sidecar) adding to a running sidecar total and a plain one needing itself plus the sidecars
before it; the element-wise max of the two; pod-level requests replacing cpu and memory (and hugepages) when
set; overhead added. Everything the NodeResourcesFit check of ``cluster.py`` trusts rests on this.
"""

from __future__ import annotations

from collections import Counter
from fractions import Fraction
from typing import Any

from hypothesis import given

from kopf_scheduler.state.pod_info import PodInfo
from tests.unit.fuzz.conftest import scaled
from tests.unit.fuzz.strategies import pod_spec

_UNITS = {"m": Fraction(1, 1000), "Mi": Fraction(2**20), "Gi": Fraction(2**30), "": Fraction(1)}


def _quantity(value: Any) -> Fraction:
    text = str(value)
    for suffix in ("Mi", "Gi", "m"):
        if text.endswith(suffix):
            return Fraction(text[: -len(suffix)]) * _UNITS[suffix]
    return Fraction(text)


def _requests(container: dict[str, Any]) -> Counter[str]:
    found: Counter[str] = Counter()
    for name, value in (container.get("resources", {}).get("requests") or {}).items():
        found[name] += _quantity(value)
    return found


def _max(a: Counter[str], b: Counter[str]) -> Counter[str]:
    return Counter({name: max(a.get(name, 0), b.get(name, 0)) for name in {*a, *b}})


def expected_requests(spec: dict[str, Any]) -> dict[str, int]:
    regular: Counter[str] = Counter()
    for container in spec["containers"]:
        regular.update(_requests(container))
    sidecars: Counter[str] = Counter()
    init_peak: Counter[str] = Counter()
    for container in spec.get("initContainers", ()):
        own = _requests(container)
        if container.get("restartPolicy") == "Always":
            sidecars.update(own)
            init_peak = _max(init_peak, sidecars)
        else:
            init_peak = _max(init_peak, own + sidecars)
    total = _max(regular + sidecars, init_peak)
    pod_level = (spec.get("resources") or {}).get("requests") or {}
    for name, value in pod_level.items():
        if name in ("cpu", "memory") or name.startswith("hugepages-"):
            total[name] = _quantity(value)
    for name, value in (spec.get("overhead") or {}).items():
        total[name] = total.get(name, 0) + _quantity(value)
    # The scheduler's integers: millicores for cpu, whole units (rounded up) for everything else.
    as_ints = {name: -(-(value * 1000 if name == "cpu" else value) // 1) for name, value in total.items()}
    return {name: int(value) for name, value in as_ints.items() if value}


@scaled(10)
@given(pod_spec(scheduler="sp"))
def test_a_pods_requests_are_upstreams_pod_requests(spec: dict[str, Any]) -> None:
    pod = PodInfo.from_obj({"metadata": {"name": "p", "namespace": "default", "uid": "u"}, "spec": spec})
    got = {name: value for name, value in pod.requests.items() if value}
    assert got == expected_requests(spec)
