"""The structured allocator restates upstream's incubating allocator (structured/internal/incubating): pools and
their order, selectors, counts, All, constraints, prioritized lists, admin access, taints, partitionable devices,
consumable capacity and the configs of the result. CEL is a fake that knows a few fixed expressions."""

from __future__ import annotations

import re
import time
from collections.abc import Mapping, Sequence
from typing import Any

import pytest

from kopf_scheduler.plugins.dynamic_resources.allocator import (
    AllocatedState,
    AllocationError,
    AllocationTimeout,
    Allocator,
    Features,
    NodeAllocationError,
    SliceIndex,
    allocated_state,
    gather_pools,
)
from kopf_scheduler.state.quantity import parse_quantity

DRIVER = "gpu.example.com"
NODE = {"metadata": {"name": "node-1", "labels": {"zone": "a"}}}
PINNED = {"nodeSelectorTerms": [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["node-1"]}]}]}


# --- a tiny CEL stand-in ---


class CelError(Exception):
    pass


_DRIVER_IS = re.compile(r'^device\.driver == "([^"]+)"$')
_ATTRIBUTE_IS = re.compile(r'^device\.attributes\["([^"]+)"\]\.(\w+) == "([^"]+)"$')
_BOOL_ATTRIBUTE = re.compile(r'^device\.attributes\["([^"]+)"\]\.(\w+)$')
_CAPACITY_AT_LEAST = re.compile(r'^device\.capacity\["([^"]+)"\]\.(\w+)\.compareTo\(quantity\("([^"]+)"\)\) >= 0$')


class _Compiled:
    def __init__(self, expression: str) -> None:
        self.expression = expression

    def matches(self, driver: str, device: Mapping[str, Any]) -> bool:
        if " || " in self.expression:
            return any(_Compiled(part).matches(driver, device) for part in self.expression.split(" || "))
        if self.expression == "true":
            return True
        if self.expression == "boom":
            raise CelError("no such key: model")
        if found := _DRIVER_IS.match(self.expression):
            return driver == found.group(1)
        if found := _CAPACITY_AT_LEAST.match(self.expression):
            capacity = (device.get("capacity") or {}).get(found.group(2))
            if capacity is None:
                raise CelError(f"no such key: {found.group(2)}")
            return parse_quantity(capacity["value"]) >= parse_quantity(found.group(3))
        if found := _BOOL_ATTRIBUTE.match(self.expression):
            return _attribute(driver, device, *found.groups()).get("bool") is True
        found = _ATTRIBUTE_IS.match(self.expression)
        assert found, self.expression
        return _attribute(driver, device, *found.groups()[:2]).get("string") == found.group(3)


def _attribute(driver: str, device: Mapping[str, Any], domain: str, name: str) -> Mapping[str, Any]:
    """CEL's ``device.attributes[domain].name``: a missing attribute is a runtime error."""
    attributes = device.get("attributes") or {}
    value = attributes.get(f"{domain}/{name}") or (attributes.get(name) if domain == driver else None)
    if value is None:
        raise CelError(f"no such key: {name}")
    return value


class FakeCel:
    def __init__(self) -> None:
        self.compiled: list[str] = []

    def compile(self, expression: str) -> _Compiled:
        self.compiled.append(expression)
        if expression.startswith("syntax"):
            raise CelError("Syntax error: mismatched input")
        return _Compiled(expression)


# --- object builders ---


def device(name: str, **fields: Any) -> dict[str, Any]:
    model = fields.pop("model", None)
    attributes = dict(fields.pop("attributes", {}))
    if model is not None:
        attributes["model"] = {"string": model}
    out: dict[str, Any] = {"name": name, **fields}
    if attributes:
        out["attributes"] = attributes
    return out


def rslice(
    name: str,
    devices: Sequence[Mapping[str, Any]] = (),
    *,
    pool: str = "pool-1",
    driver: str = DRIVER,
    node: str | None = "node-1",
    generation: int = 1,
    count: int = 1,
    **spec: Any,
) -> dict[str, Any]:
    body: dict[str, Any] = {
        "driver": driver,
        "pool": {"name": pool, "generation": generation, "resourceSliceCount": count},
        **spec,
    }
    if devices:
        body["devices"] = list(devices)
    if node is not None:
        body["nodeName"] = node
    elif not spec:
        body["allNodes"] = True
    return {"metadata": {"name": name}, "spec": body}


def dclass(name: str, *selectors: str, config: Sequence[Mapping[str, Any]] = ()) -> dict[str, Any]:
    spec: dict[str, Any] = {"selectors": [{"cel": {"expression": e}} for e in selectors]}
    if config:
        spec["config"] = list(config)
    return {"metadata": {"name": name}, "spec": spec}


def exactly(name: str, device_class: str = "gpu", *selectors: str, **fields: Any) -> dict[str, Any]:
    spec: dict[str, Any] = {"deviceClassName": device_class, **fields}
    if selectors:
        spec["selectors"] = [{"cel": {"expression": e}} for e in selectors]
    return {"name": name, "exactly": spec}


def first_available(name: str, *subrequests: Mapping[str, Any]) -> dict[str, Any]:
    return {"name": name, "firstAvailable": list(subrequests)}


def sub(name: str, device_class: str = "gpu", *selectors: str, **fields: Any) -> dict[str, Any]:
    out: dict[str, Any] = {"name": name, "deviceClassName": device_class, **fields}
    if selectors:
        out["selectors"] = [{"cel": {"expression": e}} for e in selectors]
    return out


def claim(name: str, *requests: Mapping[str, Any], **devices: Any) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "namespace": "ns"},
        "spec": {"devices": {"requests": list(requests), **devices}},
    }


def allocated(c: Mapping[str, Any], *results: tuple[str, str, str] | Mapping[str, Any]) -> dict[str, Any]:
    rows = [
        r if isinstance(r, Mapping) else {"request": "r", "driver": r[0], "pool": r[1], "device": r[2]} for r in results
    ]
    return {**c, "status": {"allocation": {"devices": {"results": rows}}}}


DEFAULTS = Features()

CLASSES = {
    "gpu": dclass("gpu", f'device.driver == "{DRIVER}"'),
    "a100": dclass("a100", f'device.driver == "{DRIVER}"', f'device.attributes["{DRIVER}"].model == "a100"'),
    "h100": dclass("h100", f'device.driver == "{DRIVER}"', f'device.attributes["{DRIVER}"].model == "h100"'),
    "any": dclass("any"),
}


def allocate(
    slices: Sequence[Mapping[str, Any]],
    *claims: Mapping[str, Any],
    state: AllocatedState | None = None,
    classes: Mapping[str, Mapping[str, Any]] = CLASSES,
    features: Features = DEFAULTS,
    node: Mapping[str, Any] = NODE,
) -> list[dict[str, Any]] | None:
    allocator = Allocator(
        features=features,
        allocated=state or AllocatedState(),
        classes=classes,
        slices=slices,
        cel=FakeCel(),
        new_share_id=lambda: "share-1",
    )
    return allocator.allocate(node, claims)


def picked(results: list[dict[str, Any]] | None) -> list[list[tuple[str, str]]] | None:
    """(request, device) per claim: what the conformance suite compares."""
    if results is None:
        return None
    return [[(r["request"], r["device"]) for r in result["devices"]["results"]] for result in results]


GPUS = [device("gpu-0", model="h100"), device("gpu-1", model="a100"), device("gpu-2", model="a100")]


# --- 1. pools ---


@pytest.mark.parametrize(
    ("slices", "expected"),
    [
        pytest.param([rslice("s", GPUS)], [[("r", "gpu-0")]], id="node-local"),
        pytest.param([rslice("s", GPUS, node="node-2")], None, id="other-node"),
        pytest.param([rslice("s", GPUS, node=None)], [[("r", "gpu-0")]], id="all-nodes"),
        pytest.param(
            [
                rslice(
                    "s",
                    GPUS,
                    node=None,
                    nodeSelector={
                        "nodeSelectorTerms": [
                            {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["b"]}]}
                        ]
                    },
                )
            ],
            None,
            id="node-selector-mismatch",
        ),
        pytest.param(
            [rslice("s", [device("old")], generation=1), rslice("t", [device("new")], generation=2)],
            [[("r", "new")]],
            id="newest-generation-only",
        ),
        pytest.param([rslice("s", GPUS, count=2)], None, id="incomplete-pool"),
        pytest.param(
            [rslice("s", [device("b0")], pool="b"), rslice("s2", [device("a0")], pool="a")],
            [[("r", "a0")]],
            id="pools-sorted-by-name",
        ),
        pytest.param(
            [rslice("s2", [device("from-s2")], count=2), rslice("s1", [device("from-s1")], count=2)],
            [[("r", "from-s1")]],
            id="slices-sorted-by-name",
        ),
        pytest.param(
            [
                rslice("s", [device("x")], pool="p", count=2),
                rslice("t", [device("y")], pool="p", count=2, node="node-2"),
            ],
            [[("r", "x")]],
            id="pool-spanning-nodes-is-complete",
        ),
        pytest.param(
            [
                rslice(
                    "s",
                    [device("elsewhere", nodeName="node-2"), device("here", nodeName="node-1")],
                    node=None,
                    perDeviceNodeSelection=True,
                )
            ],
            [[("r", "here")]],
            id="per-device-node-selection",
        ),
        pytest.param(
            [rslice("s", [device("dup"), device("dup")], pool="bad"), rslice("t", [device("ok")], pool="good")],
            [[("r", "ok")]],
            id="invalid-pool-skipped",
        ),
    ],
)
def test_pools_decide_which_devices_a_node_sees(slices: list[dict[str, Any]], expected: Any) -> None:
    assert picked(allocate(slices, claim("c", exactly("r", "any")))) == expected


def test_only_invalid_pools_fail_on_the_node_with_upstreams_message() -> None:
    with pytest.raises(NodeAllocationError, match=r"^invalid resource pools were encountered$"):
        allocate([rslice("s", [device("dup"), device("dup")])], claim("c", exactly("r", "any")))


def test_all_mode_refuses_an_incomplete_pool() -> None:
    with pytest.raises(
        AllocationError,
        match=r"asks for all devices, but resource pool gpu\.example\.com/pool-1 is currently being updated$",
    ):
        allocate([rslice("s", GPUS, count=2)], claim("c", exactly("r", "any", allocationMode="All")))


def test_pools_with_binding_conditions_come_last() -> None:
    slices = [
        rslice("a", [device("bound", bindingConditions=["ready"])], pool="a"),
        rslice("b", [device("plain")], pool="b"),
    ]
    pools = gather_pools(slices, NODE, Features(), slices)
    assert [p.name for p in pools] == ["b", "a"]
    # With the feature off, such devices are not selectable at all.
    result = allocate(slices, claim("c", exactly("r", "any", count=2)))
    assert result is None


@pytest.mark.parametrize(
    ("slice_spec", "node_selector"),
    [
        pytest.param({"nodeName": "node-1"}, PINNED, id="node-local-pins-the-node"),
        pytest.param({"allNodes": True}, None, id="all-nodes-anywhere"),
        pytest.param(
            {
                "nodeSelector": {
                    "nodeSelectorTerms": [{"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]}]
                }
            },
            {"nodeSelectorTerms": [{"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]}]},
            id="slice-node-selector",
        ),
    ],
)
def test_the_result_node_selector_follows_the_slice(slice_spec: dict[str, Any], node_selector: Any) -> None:
    slices = [rslice("s", GPUS, node=None, **slice_spec)]
    (result,) = allocate(slices, claim("c", exactly("r", "any"))) or [{}]
    assert result.get("nodeSelector") == node_selector


# --- 2. requests ---


@pytest.mark.parametrize(
    ("requests", "expected"),
    [
        pytest.param([exactly("r", "a100")], [("r", "gpu-1")], id="class-selectors"),
        pytest.param(
            [exactly("r", "gpu", f'device.attributes["{DRIVER}"].model == "h100"')],
            [("r", "gpu-0")],
            id="request-selector",
        ),
        pytest.param(
            [exactly("r", "a100", f'device.attributes["{DRIVER}"].model == "h100"')], None, id="class-and-request-anded"
        ),
        pytest.param([exactly("r", "gpu", count=2)], [("r", "gpu-0"), ("r", "gpu-1")], id="count-in-order"),
        pytest.param([exactly("r", "gpu", count=4)], None, id="count-too-high"),
        pytest.param([exactly("r", "a100", allocationMode="All")], [("r", "gpu-1"), ("r", "gpu-2")], id="all-matching"),
        pytest.param([exactly("r", "gpu", 'device.driver == "other"', allocationMode="All")], None, id="all-none"),
        pytest.param(
            [exactly("x", "gpu"), exactly("y", "a100")], [("x", "gpu-0"), ("y", "gpu-1")], id="two-requests-no-reuse"
        ),
        pytest.param(
            [exactly("x", "gpu", count=2), exactly("y", "h100")],
            [("x", "gpu-1"), ("x", "gpu-2"), ("y", "gpu-0")],
            id="backtracking-within-a-request",
        ),
        pytest.param(
            [exactly("x", "gpu", count=3), exactly("y", "gpu")],
            None,
            id="not-enough-devices",
        ),
    ],
)
def test_requests_pick_devices_in_upstream_order(requests: list[dict[str, Any]], expected: Any) -> None:
    result = picked(allocate([rslice("s", GPUS)], claim("c", *requests)))
    assert result == (None if expected is None else [expected])


def test_allocated_and_in_flight_devices_are_skipped_and_claims_do_not_share() -> None:
    state = allocated_state([allocated(claim("old"), (DRIVER, "pool-1", "gpu-1"))])
    result = allocate(
        [rslice("s", GPUS)], claim("c1", exactly("r", "gpu")), claim("c2", exactly("r", "gpu")), state=state
    )
    assert picked(result) == [[("r", "gpu-0")], [("r", "gpu-2")]]
    assert result is not None
    assert result[0]["nodeSelector"] == PINNED


def test_a_later_claim_makes_an_earlier_one_backtrack() -> None:
    result = allocate([rslice("s", GPUS)], claim("c1", exactly("r", "gpu")), claim("c2", exactly("r", "h100")))
    assert picked(result) == [[("r", "gpu-1")], [("r", "gpu-0")]]


@pytest.mark.parametrize(
    ("classes", "request_", "message"),
    [
        pytest.param(
            {"gpu": dclass("gpu", "boom")},
            exactly("r", "gpu"),
            "^class gpu: selector #0: CEL runtime error: no such key: model$",
            id="class-runtime-error",
        ),
        pytest.param(
            CLASSES,
            exactly("r", "gpu", "true", "boom"),
            "^claim ns/c: selector #1: CEL runtime error: no such key: model$",
            id="claim-runtime-error",
        ),
        pytest.param(
            {"gpu": dclass("gpu", "syntax (")},
            exactly("r", "gpu"),
            "^class gpu: selector #0: CEL compile error: Syntax error: mismatched input$",
            id="compile-error",
        ),
        pytest.param(
            CLASSES,
            exactly("r", "missing"),
            '^claim ns/c, request r: could not retrieve device class missing: deviceclass.resource.k8s.io "missing" '
            "not found$",
            id="missing-class",
        ),
        pytest.param(
            CLASSES,
            exactly("r", "gpu", count=33),
            "^claim ns/c: number of requested devices 33 exceeds the claim limit of 32$",
            id="too-many-devices",
        ),
        pytest.param(
            CLASSES,
            {"name": "r", "exactly": {"deviceClassName": "gpu", "selectors": [{}]}},
            r"^claim ns/c, request r, selector #0: CEL expression empty \(unsupported selector type\?\)$",
            id="empty-selector",
        ),
        pytest.param(
            CLASSES,
            exactly("r", "gpu", allocationMode="Some"),
            "^claim ns/c, request r: unsupported count mode Some$",
            id="unknown-mode",
        ),
    ],
)
def test_claim_and_class_errors_abort_with_upstreams_text(
    classes: dict[str, Any], request_: dict[str, Any], message: str
) -> None:
    with pytest.raises(AllocationError, match=message):
        allocate([rslice("s", GPUS)], claim("c", request_), classes=classes)


def test_selector_results_and_compilations_are_cached() -> None:
    cel = FakeCel()
    allocator = Allocator(
        features=Features(), allocated=AllocatedState(), classes=CLASSES, slices=[rslice("s", GPUS)], cel=cel
    )
    allocator.allocate(NODE, [claim("c", exactly("r", "a100", count=2))])
    allocator.allocate(NODE, [claim("c", exactly("r", "a100"))])
    assert sorted(cel.compiled) == sorted(set(cel.compiled))


# --- 3. constraints ---

NUMA = [
    device("d0", attributes={"numa": {"int": 0}}),
    device("d1", attributes={"numa": {"int": 1}}),
    device("d2", attributes={"numa": {"int": 1}}),
    device("d3"),
]


@pytest.mark.parametrize(
    ("requests", "constraints", "expected"),
    [
        pytest.param(
            [exactly("r", "any", count=2)],
            [{"matchAttribute": f"{DRIVER}/numa"}],
            [("r", "d1"), ("r", "d2")],
            id="match-within-request",
        ),
        pytest.param(
            [exactly("x", "any"), exactly("y", "any")],
            [{"requests": ["x", "y"], "matchAttribute": f"{DRIVER}/numa"}],
            [("x", "d1"), ("y", "d2")],
            id="match-across-requests",
        ),
        pytest.param(
            [exactly("x", "any"), exactly("y", "any")],
            [{"requests": ["x"], "matchAttribute": f"{DRIVER}/numa"}],
            [("x", "d0"), ("y", "d1")],
            id="constraint-only-for-named-requests",
        ),
        pytest.param(
            [exactly("r", "any", count=2)],
            [{"matchAttribute": "other.example.com/numa"}],
            None,
            id="foreign-domain-attribute-missing",
        ),
        pytest.param(
            [exactly("x", "any"), exactly("y", "any")],
            [{"distinctAttribute": f"{DRIVER}/numa"}],
            [("x", "d0"), ("y", "d1")],
            id="distinct",
        ),
        pytest.param(
            [exactly("r", "any", count=3)],
            [{"matchAttribute": f"{DRIVER}/numa"}],
            None,
            id="match-impossible",
        ),
    ],
)
def test_claim_constraints(requests: list[dict[str, Any]], constraints: list[dict[str, Any]], expected: Any) -> None:
    result = picked(allocate([rslice("s", NUMA)], claim("c", *requests, constraints=constraints)))
    assert result == (None if expected is None else [expected])


def test_a_constraint_that_all_mode_cannot_meet_is_an_error() -> None:
    bad = claim("c", exactly("r", "any", allocationMode="All"), constraints=[{"matchAttribute": f"{DRIVER}/numa"}])
    with pytest.raises(
        AllocationError,
        match=r"^claim ns/c, request r: cannot add device gpu\.example\.com/pool-1/d1 because a claim constraint",
    ):
        allocate([rslice("s", NUMA)], bad)


# --- 4. prioritized lists ---


@pytest.mark.parametrize(
    ("request_", "expected"),
    [
        pytest.param(
            first_available("r", sub("big", "a100", count=3), sub("small", "a100", count=2)),
            [("r/small", "gpu-1"), ("r/small", "gpu-2")],
            id="second-subrequest",
        ),
        pytest.param(
            first_available("r", sub("h", "gpu", f'device.attributes["{DRIVER}"].model == "h100"'), sub("any", "gpu")),
            [("r/h", "gpu-0")],
            id="first-subrequest-wins",
        ),
        pytest.param(first_available("r", sub("none", "gpu", 'device.driver == "x"')), None, id="no-subrequest-fits"),
    ],
)
def test_first_available(request_: dict[str, Any], expected: Any) -> None:
    result = picked(allocate([rslice("s", GPUS)], claim("c", request_)))
    assert result == (None if expected is None else [expected])


def test_subrequests_need_the_feature() -> None:
    with pytest.raises(AllocationError, match="has subrequests, but the DRAPrioritizedList feature is disabled"):
        allocate(
            [rslice("s", GPUS)],
            claim("c", first_available("r", sub("a"))),
            features=Features(prioritized_list=False),
        )


def test_a_subrequest_backtracks_for_a_later_request() -> None:
    result = allocate([rslice("s", GPUS)], claim("c", first_available("r", sub("one", "gpu")), exactly("y", "h100")))
    assert picked(result) == [[("r/one", "gpu-1"), ("y", "gpu-0")]]


# --- 5. admin access, taints, partitions, capacity ---


def test_admin_access_uses_allocated_devices_and_does_not_count_as_allocated() -> None:
    state = allocated_state([allocated(claim("old"), (DRIVER, "pool-1", "gpu-0"))])
    result = allocate([rslice("s", GPUS)], claim("c", exactly("r", "gpu", adminAccess=True)), state=state)
    assert result is not None
    assert result[0]["devices"]["results"] == [
        {"request": "r", "driver": DRIVER, "pool": "pool-1", "device": "gpu-0", "adminAccess": True}
    ]
    admin_claim = allocated(claim("adm"), {**result[0]["devices"]["results"][0]})
    assert allocated_state([admin_claim]).devices == set()


def test_admin_access_needs_the_feature() -> None:
    with pytest.raises(
        AllocationError, match=r"^claim ns/c, request r: admin access is requested, but the feature is disabled$"
    ):
        allocate(
            [rslice("s", GPUS)],
            claim("c", exactly("r", "gpu", adminAccess=True)),
            features=Features(admin_access=False),
        )


TAINTED = [
    device("t0", taints=[{"key": "broken", "value": "yes", "effect": "NoSchedule"}]),
    device("t1", taints=[{"key": "maint", "effect": "NoExecute"}]),
    device("t2", taints=[{"key": "info", "effect": "None"}]),
]


@pytest.mark.parametrize(
    ("tolerations", "features", "expected"),
    [
        pytest.param(None, Features(), "t2", id="untolerated-skipped-effect-none-ignored"),
        pytest.param([{"key": "broken", "operator": "Exists"}], Features(), "t0", id="exists"),
        pytest.param([{"key": "broken", "value": "no"}], Features(), "t2", id="equal-wrong-value"),
        pytest.param([{"operator": "Exists", "effect": "NoExecute"}], Features(), "t1", id="effect-only"),
        pytest.param(None, Features(device_taints=False), "t0", id="feature-off"),
    ],
)
def test_device_taints(tolerations: Any, features: Features, expected: str) -> None:
    fields = {"tolerations": tolerations} if tolerations else {}
    result = allocate([rslice("s", TAINTED)], claim("c", exactly("r", "any", **fields)), features=features)
    assert result is not None
    (row,) = result[0]["devices"]["results"]
    assert row["device"] == expected
    assert row.get("tolerations") == tolerations


def _partitioned(*extra: Mapping[str, Any]) -> list[dict[str, Any]]:
    counters = [{"name": "gpu-0-set", "counters": {"memory": {"value": "8Gi"}}}]

    def part(name: str, memory: str) -> dict[str, Any]:
        return device(name, consumesCounters=[{"counterSet": "gpu-0-set", "counters": {"memory": {"value": memory}}}])

    devices = [part("whole", "8Gi"), part("half-0", "4Gi"), part("half-1", "4Gi"), part("quarter", "2Gi"), *extra]
    return [
        rslice("counters", node="node-1", count=2, sharedCounters=counters),
        rslice("devices", devices, count=2),
    ]


@pytest.mark.parametrize(
    ("count", "taken", "expected"),
    [
        pytest.param(1, None, ["whole"], id="whole-first"),
        pytest.param(2, None, ["whole", "spare"], id="exhausted-counters-skip-partitions"),
        pytest.param(3, None, ["half-0", "half-1", "spare"], id="backtrack-to-halves"),
        pytest.param(1, "half-0", ["half-1"], id="allocated-partition-consumes"),
        pytest.param(2, "whole", None, id="allocated-whole-blocks-partitions"),
    ],
)
def test_partitionable_devices_share_counters(count: int, taken: str | None, expected: Any) -> None:
    slices = _partitioned(device("spare"))
    state = allocated_state([allocated(claim("old"), (DRIVER, "pool-1", taken))]) if taken else None
    result = allocate(slices, claim("c", exactly("r", "any", count=count)), state=state)
    assert picked(result) == (None if expected is None else [[("r", d) for d in expected]])


def test_counter_consumption_of_unknown_counter_set_invalidates_the_pool() -> None:
    bad = [
        rslice("counters", node="node-1", count=2, sharedCounters=[{"name": "x", "counters": {"m": {"value": "1"}}}]),
        rslice(
            "devices", [device("d", consumesCounters=[{"counterSet": "y", "counters": {"m": {"value": "1"}}}])], count=2
        ),
    ]
    pools = gather_pools(bad, NODE, Features(), bad)
    assert [(p.invalid, p.invalid_reason) for p in pools] == [(True, "counter set y not found")]


def _shared_device(**policy: Any) -> dict[str, Any]:
    capacity = {"memory": {"value": "10Gi", **({"requestPolicy": policy} if policy else {})}}
    return device("shared", allowMultipleAllocations=True, capacity=capacity)


def test_consumable_capacity_shares_a_device() -> None:
    slices = [rslice("s", [_shared_device()])]
    c = claim(
        "c",
        exactly("a", "any", capacity={"requests": {"memory": "4Gi"}}),
        exactly("b", "any", capacity={"requests": {"memory": "4Gi"}}),
    )
    result = allocate(slices, c)
    assert result is not None
    rows = result[0]["devices"]["results"]
    assert [(r["device"], r["shareID"], r["consumedCapacity"]) for r in rows] == [
        ("shared", "share-1", {"memory": "4Gi"}),
        ("shared", "share-1", {"memory": "4Gi"}),
    ]
    used = allocated_state(
        [allocated(claim("old"), {**rows[0], "shareID": "old-share", "consumedCapacity": {"memory": "8Gi"}})]
    )
    assert used.shared_devices == {(DRIVER, "pool-1", "shared", "old-share")}
    assert (
        allocate(slices, claim("c", exactly("a", "any", capacity={"requests": {"memory": "4Gi"}})), state=used) is None
    )
    assert allocate(slices, claim("c", exactly("a", "any", capacity={"requests": {"memory": "2Gi"}})), state=used)


@pytest.mark.parametrize(
    ("policy", "requested", "consumed"),
    [
        pytest.param({"default": "1Gi", "validRange": {"min": "1Gi", "step": "1Gi"}}, None, "1Gi", id="default"),
        pytest.param({"default": "1Gi", "validRange": {"min": "1Gi", "step": "1Gi"}}, "1500Mi", "2Gi", id="step-up"),
        pytest.param({"default": "1Gi", "validValues": ["1Gi", "5Gi"]}, "3Gi", "5Gi", id="valid-values"),
        pytest.param({"default": "1Gi", "validRange": {"min": "1Gi", "max": "4Gi"}}, "6Gi", None, id="over-max"),
    ],
)
def test_capacity_request_policies(policy: dict[str, Any], requested: str | None, consumed: str | None) -> None:
    fields = {"capacity": {"requests": {"memory": requested}}} if requested else {}
    result = allocate([rslice("s", [_shared_device(**policy)])], claim("c", exactly("r", "any", **fields)))
    if consumed is None:
        assert result is None
    else:
        assert result is not None
        assert result[0]["devices"]["results"][0]["consumedCapacity"] == {"memory": consumed}


def test_a_capacity_the_device_lacks_skips_it() -> None:
    slices = [rslice("s", [device("plain"), _shared_device()])]
    result = allocate(slices, claim("c", exactly("r", "any", capacity={"requests": {"memory": "1Gi"}})))
    assert picked(result) == [[("r", "shared")]]


# --- 6. configs ---


def test_class_and_claim_configs_are_carried_into_the_result() -> None:
    opaque = {"opaque": {"driver": DRIVER, "parameters": {"mode": "fast"}}}
    classes = {**CLASSES, "gpu": dclass("gpu", f'device.driver == "{DRIVER}"', config=[opaque])}
    c = claim(
        "c",
        exactly("x", "gpu"),
        exactly("y", "gpu"),
        first_available("z", sub("s", "gpu")),
        config=[
            {"opaque": {"driver": DRIVER, "parameters": {"all": True}}},
            {"requests": ["y"], "opaque": {"driver": DRIVER, "parameters": {"only": "y"}}},
            {"requests": ["z/s"], "opaque": {"driver": DRIVER, "parameters": {"only": "z/s"}}},
        ],
    )
    result = allocate([rslice("s", GPUS)], c, classes=classes)
    assert result is not None
    assert result[0]["devices"]["config"] == [
        {"source": "FromClass", "requests": ["x", "y", "z/s"], **opaque},
        {"source": "FromClaim", "opaque": {"driver": DRIVER, "parameters": {"all": True}}},
        {"source": "FromClaim", "requests": ["y"], "opaque": {"driver": DRIVER, "parameters": {"only": "y"}}},
        {"source": "FromClaim", "requests": ["z/s"], "opaque": {"driver": DRIVER, "parameters": {"only": "z/s"}}},
    ]


def test_allocated_state_counts_dedicated_and_shared_results() -> None:
    rows = [
        {"request": "a", "driver": DRIVER, "pool": "p", "device": "d0"},
        {"request": "b", "driver": DRIVER, "pool": "p", "device": "d1", "adminAccess": True},
        {
            "request": "c",
            "driver": DRIVER,
            "pool": "p",
            "device": "d2",
            "shareID": "u1",
            "consumedCapacity": {"m": "1Gi"},
        },
    ]
    state = allocated_state([allocated(claim("x"), *rows), claim("unallocated", exactly("r"))])
    assert state.devices == {(DRIVER, "p", "d0")}
    assert state.shared_devices == {(DRIVER, "p", "d2", "u1")}
    assert state.capacity == {(DRIVER, "p", "d2"): {"m": 2**30}}
    legacy = allocated_state([allocated(claim("x"), *rows)], consumable_capacity=False)
    assert legacy.devices == {(DRIVER, "p", "d0"), (DRIVER, "p", "d2")}


# --- cases restated from upstream's allocatortesting/allocator_testing.go (same names) ---

A = "driver-a"
CLASS_A = {
    "class-a": dclass("class-a", f'device.driver == "{A}"'),
    "class-b": dclass("class-b", 'device.driver == "b"'),
}


def memory(name: str, size: str, **fields: Any) -> dict[str, Any]:
    return device(name, capacity={"memory": {"value": size}}, **fields)


def at_least(size: str) -> str:
    return f'device.capacity["{A}"].memory.compareTo(quantity("{size}")) >= 0'


def typed(name: str, kind: str, **fields: Any) -> dict[str, Any]:
    return device(name, attributes={"type": {"string": kind}}, **fields)


def type_is(kind: str) -> str:
    return f'device.attributes["{A}"].type == "{kind}"'


def consumes(amount: str, counter: str = "memory", counter_set: str = "counter-set-1") -> list[dict[str, Any]]:
    return [{"counterSet": counter_set, "counters": {counter: {"value": amount}}}]


def counters(amount: str, counter: str = "memory") -> list[dict[str, Any]]:
    return [{"name": "counter-set-1", "counters": {counter: {"value": amount}}}]


def upstream(
    slices: Sequence[Mapping[str, Any]], *claims: Mapping[str, Any], taken: Sequence[str] = (), pool: str = "pool-1"
) -> list[list[tuple[str, str, str]]] | None:
    state = AllocatedState(devices={(A, pool, name) for name in taken})
    result = allocate(slices, *claims, state=state, classes=CLASS_A)
    if result is None:
        return None
    return [[(r["request"], r["pool"], r["device"]) for r in res["devices"]["results"]] for res in result]


def test_small_and_large_backtrack_claims() -> None:
    slices = [rslice("slice-1", [memory("device-2", "2Gi"), memory("device-1", "1Gi")], driver=A)]
    result = upstream(
        slices,
        claim("claim-0", exactly("req-0", "class-a", at_least("1Gi"))),
        claim("claim-1", exactly("req-1", "class-a", at_least("2Gi"))),
    )
    assert result == [[("req-0", "pool-1", "device-1")], [("req-1", "pool-1", "device-2")]]


def test_prioritized_list_with_backtracking() -> None:
    slices = [
        rslice("slice-1", [memory("device-1", "8Gi")], driver=A, pool="pool-1"),
        rslice("slice-2", [memory("device-2", "4Gi")], driver=A, pool="pool-2"),
    ]
    c = claim(
        "claim-0",
        first_available(
            "req-0", sub("subReq-0", "class-a", at_least("8Gi")), sub("subReq-1", "class-a", at_least("4Gi"))
        ),
        exactly("req-1", "class-a", at_least("8Gi")),
    )
    assert upstream(slices, c) == [[("req-0/subReq-1", "pool-2", "device-2"), ("req-1", "pool-1", "device-1")]]


def test_prioritized_list_too_many_in_first_subrequest() -> None:
    c = claim("claim-0", first_available("req-0", sub("subReq-0", "class-b", count=500), sub("subReq-1", "class-a")))
    assert upstream([rslice("slice-1", [device("device-1")], driver=A)], c) == [
        [("req-0/subReq-1", "pool-1", "device-1")]
    ]


def test_check_combinations_with_prioritized_list() -> None:
    slices = [rslice("slice-1", [typed("device-1", "X"), typed("device-2", "Y"), typed("device-3", "Y")], driver=A)]
    c = claim(
        "claim-0",
        first_available(
            "req-1", sub("subReq-0", "class-a", type_is("Y"), count=3), sub("subReq-1", "class-a", count=2)
        ),
        first_available("req-2", sub("subReq-0", "class-a", count=2), sub("subReq-1", "class-a", type_is("X"))),
    )
    assert upstream(slices, c) == [
        [
            ("req-1/subReq-1", "pool-1", "device-2"),
            ("req-1/subReq-1", "pool-1", "device-3"),
            ("req-2/subReq-1", "pool-1", "device-1"),
        ]
    ]


def test_check_combinations_with_backtracking_across_slices_and_pools() -> None:
    # Upstream runs this one with DeviceBindingAndStatus so that pool-2 (binding conditions) comes last.
    slices = [
        rslice("slice-1", [typed("device-1", "X")], driver=A, count=2),
        rslice("slice-2", [typed("device-2", "Y")], driver=A, count=2),
        rslice("slice-3", [typed("device-3", "Y", bindingConditions=["IsPrepare"])], driver=A, pool="pool-2"),
    ]
    c = claim("claim-0", exactly("req-1", "class-a", count=2), exactly("req-2", "class-a", type_is("X")))
    allocator = Allocator(
        features=Features(device_binding_and_status=True),
        allocated=AllocatedState(),
        classes=CLASS_A,
        slices=slices,
        cel=FakeCel(),
    )
    result = allocator.allocate(NODE, [c])
    assert result is not None
    assert result[0]["devices"]["results"] == [
        {"request": "req-1", "driver": A, "pool": "pool-1", "device": "device-2"},
        {"request": "req-1", "driver": A, "pool": "pool-2", "device": "device-3", "bindingConditions": ["IsPrepare"]},
        {"request": "req-2", "driver": A, "pool": "pool-1", "device": "device-1"},
    ]


def _admin(request: dict[str, Any], **fields: Any) -> dict[str, Any]:
    request["exactly"].update(adminAccess=True, **fields)
    return request


TWO = [rslice("slice-1", [device("device-1"), device("device-2")], driver=A)]


@pytest.mark.parametrize(
    ("claims", "taken", "expected"),
    [
        pytest.param(
            [claim("claim-0", _admin(exactly("req-0", "class-a"), allocationMode="All"))],
            ["device-1"],
            [[("req-0", "pool-1", "device-1"), ("req-0", "pool-1", "device-2")]],
            id="all-devices-some-allocated-admin-access",
        ),
        pytest.param(
            [
                claim(
                    "claim-0",
                    _admin(exactly("req-0", "class-a")),
                    _admin(exactly("req-1", "class-a"), allocationMode="All"),
                )
            ],
            [],
            None,
            id="all-devices-some-allocating-admin-access",
        ),
        pytest.param(
            [claim("claim-0", exactly("req-0", "class-a")), claim("claim-1", _admin(exactly("req-0", "class-a")))],
            [],
            [[("req-0", "pool-1", "device-1")], [("req-0", "pool-1", "device-1")]],
            id="admin-access-claims-device-allocating-for-non-admin-access",
        ),
        pytest.param(
            [claim("claim-0", _admin(exactly("req-0", "class-a"), count=2))],
            ["device-1"],
            [[("req-0", "pool-1", "device-1"), ("req-0", "pool-1", "device-2")]],
            id="count-devices-some-allocated-admin-access",
        ),
    ],
)
def test_admin_access_cases(claims: list[dict[str, Any]], taken: list[str], expected: Any) -> None:
    assert upstream(TWO, *claims, taken=taken) == expected


def test_tainted_admin_access() -> None:
    slices = [
        rslice("slice-1", [device("device-1", taints=[{"key": "k", "value": "v", "effect": "NoSchedule"}])], driver=A)
    ]
    c = claim("claim-0", _admin(exactly("req-0", "class-a")))
    assert upstream(slices, c, taken=["device-1", "device-2"]) is None


def _pool_slice(name: str, node: str, generation: int, *devices: str) -> dict[str, Any]:
    return rslice(name, [device(d) for d in devices], driver=A, node=node, generation=generation, count=2)


@pytest.mark.parametrize(
    ("slices", "mode", "expected"),
    [
        pytest.param(
            [_pool_slice("slice-1", "node-1", 1, "device-1"), _pool_slice("slice-2", "node-2", 1, "device-2")],
            "All",
            [[("req-0", "pool-1", "device-1")]],
            id="allocation-mode-all-with-multi-host-resource-pool",
        ),
        pytest.param(
            [_pool_slice("slice-1", "node-1", 1, "device-1"), _pool_slice("slice-2", "node-2", 2, "device-2")],
            "ExactCount",
            None,
            id="multi-host-resource-pool-with-stale-slice-for-current-node",
        ),
        pytest.param(
            [
                _pool_slice("slice-1", "node-1", 1, "device-1"),
                _pool_slice("slice-1", "node-1", 1, "device-2"),
                _pool_slice("slice-2", "node-2", 2, "device-1"),
                _pool_slice("slice-2", "node-2", 2, "device-2"),
            ],
            "ExactCount",
            [[("req-0", "pool-1", "device-1")]],
            id="multi-host-resource-pool-complete-update-from-node-1-to-node-2",
        ),
        pytest.param(
            [
                _pool_slice("slice-1", "node-2", 1, "device-1"),
                _pool_slice("slice-1", "node-2", 1, "device-2"),
                _pool_slice("slice-2", "node-1", 2, "device-1"),
            ],
            "ExactCount",
            None,
            id="multi-host-resource-pool-incomplete-update-from-node-2-to-node-1",
        ),
    ],
)
def test_multi_host_pools(slices: list[dict[str, Any]], mode: str, expected: Any) -> None:
    assert upstream(slices, claim("claim-0", exactly("req-0", "class-a", allocationMode=mode))) == expected


def test_partitionable_devices_on_different_nodes_consume_same_counter_set() -> None:
    slices = [
        rslice("slice-1", driver=A, count=3, sharedCounters=counters("8Gi")),
        rslice(
            "slice-2",
            [
                memory("device-1", "6Gi", consumesCounters=consumes("6Gi")),
                memory("device-2", "2Gi", consumesCounters=consumes("2Gi")),
            ],
            driver=A,
            count=3,
        ),
        rslice("slice-3", [device("device-3", consumesCounters=consumes("6Gi"))], driver=A, count=3, node="node-2"),
    ]
    c = claim(
        "claim-0",
        first_available(
            "req-0", sub("subReq-0", "class-a", at_least("6Gi")), sub("subReq-1", "class-a", at_least("2Gi"))
        ),
    )
    assert upstream(slices, c, taken=["device-3"]) == [[("req-0/subReq-1", "pool-1", "device-2")]]
    assert upstream(slices, c) == [[("req-0/subReq-0", "pool-1", "device-1")]]


def test_partitionable_devices_taint_releases_counter() -> None:
    taint = [{"key": "k", "value": "v", "effect": "NoSchedule"}]
    slices = [
        rslice(
            "slice-1",
            [
                device("device-1", taints=taint, consumesCounters=consumes("1", "c")),
                device("device-2", consumesCounters=consumes("1", "c")),
            ],
            driver=A,
            count=2,
        ),
        rslice("slice-2", driver=A, count=2, sharedCounters=counters("1", "c")),
    ]
    assert upstream(slices, claim("claim-0", exactly("req-0", "class-a"))) == [[("req-0", "pool-1", "device-2")]]


def _colored(name: str, color: str, **fields: Any) -> dict[str, Any]:
    return device(name, attributes={"stringAttribute": {"string": color}}, **fields)


def test_partitionable_devices_constraint_releases_counter() -> None:
    slices = [
        rslice(
            "slice-1",
            [
                _colored(f"device-{i}", color, consumesCounters=consumes("1", "c"))
                for i, color in ((1, "red"), (2, "blue"), (3, "blue"))
            ],
            driver=A,
            count=2,
        ),
        rslice("slice-2", driver=A, count=2, sharedCounters=counters("2", "c")),
    ]
    c = claim("claim-0", exactly("req-0", "class-a", count=2), constraints=[{"matchAttribute": f"{A}/stringAttribute"}])
    assert upstream(slices, c) == [[("req-0", "pool-1", "device-2"), ("req-0", "pool-1", "device-3")]]


def test_partitionable_empty_capacity_multiple_share_backtrack_keeps_counter_ownership() -> None:
    def kind(name: str, value: str, color: str, **fields: Any) -> dict[str, Any]:
        attributes = {"kind": {"string": value}, "stringAttribute": {"string": color}}
        return device(name, attributes=attributes, **fields)

    def kind_is(*values: str) -> str:
        return " || ".join(f'device.attributes["{A}"].kind == "{v}"' for v in values)

    slices = [
        rslice(
            "slice-1",
            [
                kind("device-1", "shared", "red", allowMultipleAllocations=True, consumesCounters=consumes("1", "c")),
                kind("device-2", "fallback", "blue"),
                kind("device-3", "gate", "blue"),
            ],
            driver=A,
            count=2,
        ),
        rslice("slice-2", driver=A, count=2, sharedCounters=counters("1", "c")),
    ]
    claims = [
        claim("claim-0", exactly("req-0", "class-a", kind_is("shared"))),
        claim(
            "claim-1",
            exactly("req-1", "class-a", kind_is("shared", "fallback")),
            exactly("req-2", "class-a", kind_is("gate")),
            exactly("req-3", "class-a", kind_is("shared")),
            constraints=[{"matchAttribute": f"{A}/stringAttribute", "requests": ["req-1", "req-2"]}],
        ),
    ]
    result = allocate(slices, *claims, classes=CLASS_A)
    assert result is not None
    assert [res["devices"]["results"] for res in result] == [
        [{"request": "req-0", "driver": A, "pool": "pool-1", "device": "device-1", "shareID": "share-1"}],
        [
            {"request": "req-1", "driver": A, "pool": "pool-1", "device": "device-2"},
            {"request": "req-2", "driver": A, "pool": "pool-1", "device": "device-3"},
            {"request": "req-3", "driver": A, "pool": "pool-1", "device": "device-1", "shareID": "share-1"},
        ],
    ]


def test_with_class_device_config_with_multiple_request_and_configs() -> None:
    def config(driver: str, attribute: str) -> dict[str, Any]:
        return {"opaque": {"driver": driver, "parameters": {attribute: attribute + "Value"}}}

    classes = {
        "class-a": dclass("class-a", f'device.driver == "{A}"', config=[config(A, "classAttribute-A")]),
        "class-b": dclass("class-b", 'device.driver == "driver-b"', config=[config("driver-b", "classAttribute-B")]),
    }
    slices = [
        rslice("slice-1", [device("device-0"), device("device-1")], driver=A),
        rslice("slice-2", [device("device-1")], driver="driver-b"),
    ]
    c = claim("claim-0", exactly("req-0", "class-a"), exactly("req-1", "class-a"), exactly("req-2", "class-b"))
    result = allocate(slices, c, classes=classes)
    assert result is not None
    assert [(r["request"], r["driver"], r["device"]) for r in result[0]["devices"]["results"]] == [
        ("req-0", A, "device-0"),
        ("req-1", A, "device-1"),
        ("req-2", "driver-b", "device-1"),
    ]
    assert result[0]["devices"]["config"] == [
        {"source": "FromClass", "requests": ["req-0", "req-1"], **config(A, "classAttribute-A")},
        {"source": "FromClass", "requests": ["req-2"], **config("driver-b", "classAttribute-B")},
    ]


def test_older_slices_of_a_pool_elsewhere_do_not_count_towards_completeness() -> None:
    slices = [
        rslice("s", [device("x")], pool="p", count=2),
        rslice("t", [device("y")], pool="p", count=2, node="node-2"),
        rslice("u", [device("z")], pool="p", count=2, node="node-3", generation=0),
    ]
    assert picked(allocate(slices, claim("c", exactly("r", "any", allocationMode="All")))) == [[("r", "x")]]
    incomplete = [slices[0], slices[2]]
    assert allocate(incomplete, claim("c", exactly("r", "any"))) is None


def _ranged(name: str, size: str) -> dict[str, Any]:
    policy = {"default": "2", "validRange": {"min": "2", "step": "2", "max": "4"}}
    capacity = {"capacity-0": {"value": size, "requestPolicy": policy}}
    return device(name, allowMultipleAllocations=True, capacity=capacity)


@pytest.mark.parametrize(
    ("devices", "requested", "in_use", "expected"),
    [
        pytest.param([_ranged("device-1", "4")], "3", {}, ("device-1", "4"), id="with-range-policy-step"),
        pytest.param(
            [_ranged("device-1", "2"), _ranged("device-2", "2")],
            "2",
            {"device-1": "2"},
            ("device-2", "2"),
            id="with-allocated-capacity-next-device",
        ),
        pytest.param([_ranged("device-1", "4")], "5", {}, None, id="with-request-over-max"),
    ],
)
def test_consumable_capacity_cases(
    devices: list[dict[str, Any]], requested: str, in_use: dict[str, str], expected: tuple[str, str] | None
) -> None:
    state = AllocatedState(capacity={(A, "pool-1", d): {"capacity-0": parse_quantity(v)} for d, v in in_use.items()})
    c = claim("claim-0", exactly("req-0", "class-a", capacity={"requests": {"capacity-0": requested}}))
    result = allocate([rslice("slice-1", devices, driver=A)], c, state=state, classes=CLASS_A)
    if expected is None:
        assert result is None
        return
    assert result is not None
    (row,) = result[0]["devices"]["results"]
    assert (row["device"], row["consumedCapacity"]["capacity-0"]) == expected
    assert row["shareID"] == "share-1"


def test_with_distinct_constraints_with_subrequests() -> None:
    def flag(name: str, value: bool) -> dict[str, Any]:
        return device(name, attributes={"boolAttribute": {"bool": value}}, allowMultipleAllocations=True)

    preferring = [
        first_available(
            r, sub("subReq-0", "class-a", f'device.attributes["{A}"].boolAttribute'), sub("subReq-1", "class-a")
        )
        for r in ("req-0", "req-1", "req-2")
    ]
    c = claim(
        "claim-0",
        *preferring,
        constraints=[{"distinctAttribute": f"{A}/boolAttribute", "requests": ["req-0", "req-1"]}],
    )
    result = upstream([rslice("slice-1", [flag("device-1", True), flag("device-2", False)], driver=A)], c)
    assert result == [
        [
            ("req-0/subReq-0", "pool-1", "device-1"),
            ("req-1/subReq-1", "pool-1", "device-2"),
            ("req-2/subReq-0", "pool-1", "device-1"),
        ]
    ]


def test_prioritized_list_subrequests_with_constraints_ref_sub_request() -> None:
    def versioned(name: str, size: str, version: str) -> dict[str, Any]:
        return memory(name, size, attributes={"driverVersion": {"version": version}})

    slices = [
        rslice("slice-1", [versioned("device-1", "8Gi", "1.0.0")], driver=A, pool="pool-1"),
        rslice("slice-2", [versioned("device-2", "2Gi", "2.0.0")], driver=A, pool="pool-2"),
    ]
    c = claim(
        "claim-0",
        exactly("req-0", "class-a", at_least("8Gi")),
        first_available(
            "req-1", sub("subReq-0", "class-a", at_least("2Gi")), sub("subReq-1", "class-a", at_least("1Gi"))
        ),
        constraints=[{"requests": ["req-0", "req-1/subReq-0"], "matchAttribute": f"{A}/driverVersion"}],
    )
    assert upstream(slices, c) == [[("req-0", "pool-1", "device-1"), ("req-1/subReq-1", "pool-2", "device-2")]]


def test_a_search_past_its_deadline_stops_with_a_timeout() -> None:
    allocator = Allocator(
        features=DEFAULTS, allocated=AllocatedState(), classes=CLASSES, slices=[rslice("s", GPUS)], cel=FakeCel()
    )
    with pytest.raises(AllocationTimeout, match=r"^filter operation aborted: context deadline exceeded$"):
        allocator.allocate(NODE, [claim("c", exactly("r", "gpu"))], deadline=time.monotonic() - 1)
    assert allocator.allocate(NODE, [claim("c", exactly("r", "gpu"))], deadline=time.monotonic() + 60) is not None


REGION_1 = {"nodeSelectorTerms": [{"matchExpressions": [{"key": "region", "operator": "In", "values": ["region-1"]}]}]}
UPSTREAM_NODE = {"metadata": {"name": "node-1", "labels": {"region": "region-1", "planet": "earth"}}}


def test_duplicate_slice() -> None:
    one = rslice("slice-1", [device("device-1")], driver=A, count=2)
    two = {**one, "metadata": {"name": "slice-1-2"}}
    with pytest.raises(NodeAllocationError, match="invalid resource pools were encountered"):
        upstream([one, two], claim("claim-0", exactly("req-0", "class-a")))


def test_empty_class() -> None:
    unnamespaced = {**claim("claim-0", exactly("req-0", "")), "metadata": {"name": "claim-0"}}
    with pytest.raises(
        AllocationError, match=r"^claim claim-0, request req-0: missing device class name \(unsupported"
    ):
        upstream([rslice("slice-1", [device("device-1")], driver=A)], unnamespaced)


def test_network_attached_device() -> None:
    slices = [rslice("slice-1", [device("device-1")], driver=A, node=None, nodeSelector=REGION_1)]
    result = allocate(slices, claim("claim-0", exactly("req-0", "class-a")), classes=CLASS_A, node=UPSTREAM_NODE)
    assert result == [
        {
            "devices": {"results": [{"request": "req-0", "driver": A, "pool": "pool-1", "device": "device-1"}]},
            "nodeSelector": REGION_1,
        }
    ]


def test_invalid_pool_is_error_if_no_other_device_can_be_allocated() -> None:
    slices = [
        rslice("slice-1", [device("device-1")], driver=A, count=2),
        rslice("slice-2", [device("device-1")], driver=A, count=2),
        rslice("slice-3", [device("device-2")], driver=A, pool="pool-2"),
    ]
    c = claim("claim-0", exactly("req-0", "class-a"))
    with pytest.raises(NodeAllocationError, match="invalid resource pools were encountered"):
        upstream(slices, c, taken=["device-2"], pool="pool-2")
    assert upstream(slices, c) == [[("req-0", "pool-2", "device-2")]]


def test_node_restriction() -> None:
    planet = {"nodeSelectorTerms": [{"matchExpressions": [{"key": "planet", "operator": "In", "values": ["earth"]}]}]}
    slices = [rslice("slice-1", [device("device-1", bindsToNode=True)], driver=A, node=None, nodeSelector=planet)]
    allocator = Allocator(
        features=Features(device_binding_and_status=True),
        allocated=AllocatedState(),
        classes=CLASS_A,
        slices=slices,
        cel=FakeCel(),
    )
    result = allocator.allocate(UPSTREAM_NODE, [claim("claim-0", exactly("req-0", "class-a"))])
    assert result is not None
    assert result[0]["nodeSelector"] == PINNED


def test_results_share_no_structure_with_the_cluster_objects() -> None:
    toleration = {"key": "k", "operator": "Exists"}
    c = claim(
        "c", exactly("r", "any", tolerations=[toleration]), config=[{"opaque": {"driver": DRIVER, "parameters": {}}}]
    )
    result = allocate([rslice("s", GPUS)], c)
    assert result is not None
    result[0]["devices"]["results"][0]["tolerations"][0]["key"] = "changed"
    result[0]["devices"]["config"][0]["opaque"]["driver"] = "changed"
    result[0]["nodeSelector"]["nodeSelectorTerms"][0]["matchFields"][0]["values"].append("x")
    assert toleration["key"] == "k"
    assert c["spec"]["devices"]["config"][0]["opaque"]["driver"] == DRIVER


def test_many_claims_of_many_devices_do_not_exhaust_the_python_stack() -> None:
    slices = [rslice("s", [device(f"d-{i:03}") for i in range(16 * 32)])]
    claims = [claim(f"c{k}", exactly("r", "any", count=32)) for k in range(16)]
    result = allocate(slices, *claims)
    assert result is not None
    assert [len(r["devices"]["results"]) for r in result] == [32] * 16
    assert result[15]["devices"]["results"][-1]["device"] == "d-511"


# --- the slice index kept between cycles ---


class CountingCel(FakeCel):
    """Counts evaluations by (expression, device name)."""

    def __init__(self) -> None:
        super().__init__()
        self.evaluations: list[tuple[str, str]] = []

    def compile(self, expression: str) -> _Compiled:
        compiled = super().compile(expression)
        evaluations = self.evaluations

        class _Counting(_Compiled):
            def matches(self, driver: str, device: Mapping[str, Any]) -> bool:
                evaluations.append((self.expression, device.get("name", "")))
                return super().matches(driver, device)

        return _Counting(compiled.expression)


def _allocator_over(index: SliceIndex, cel: FakeCel, state: AllocatedState | None = None) -> Allocator:
    return Allocator(
        features=DEFAULTS, allocated=state or AllocatedState(), classes=CLASSES, slices=(), cel=cel, index=index
    )


def test_index_keeps_a_nodes_pools_between_allocators() -> None:
    index = SliceIndex([rslice("s", GPUS)], DEFAULTS)
    first = index.node_devices(NODE)
    assert index.node_devices(NODE) is first
    assert [pool.name for pool in first[0]] == ["pool-1"]
    assert [c.id[2] for c in first[1][0][0]] == [d["name"] for d in GPUS]


def test_index_rebuilds_a_node_whose_labels_changed() -> None:
    selected = {"nodeSelectorTerms": [{"matchExpressions": [{"key": "zone", "operator": "In", "values": ["b"]}]}]}
    index = SliceIndex([rslice("s", GPUS, node=None, nodeSelector=selected)], DEFAULTS)
    assert index.node_devices(NODE)[0] == []
    moved = {"metadata": {"name": "node-1", "labels": {"zone": "b"}}}
    assert [pool.name for pool in index.node_devices(moved)[0]] == ["pool-1"]
    assert index.node_devices(NODE)[0] == []


def test_selectors_are_evaluated_once_per_device_across_pods() -> None:
    index, cel = SliceIndex([rslice("s", GPUS)], DEFAULTS), CountingCel()
    taken = AllocatedState()
    chosen = []
    for number, device_class in enumerate(("a100", "a100", "gpu")):
        result = _allocator_over(index, cel, taken).allocate(NODE, [claim(f"c{number}", exactly("r", device_class))])
        chosen.append(picked(result))
        assert result is not None
        taken.add_claim({"status": {"allocation": result[0]}})
    assert chosen == [[[("r", "gpu-1")]], [[("r", "gpu-2")]], [[("r", "gpu-0")]]]
    # Each device was judged by each selector once, although later pods saw the first devices again.
    assert sorted(cel.evaluations) == sorted(set(cel.evaluations))
    assert (f'device.driver == "{DRIVER}"', "gpu-0") in cel.evaluations


def test_a_kept_runtime_error_is_reported_with_each_owner() -> None:
    index = SliceIndex([rslice("s", GPUS)], DEFAULTS)
    cel = FakeCel()
    with pytest.raises(AllocationError, match=r"^claim ns/a: selector #1: CEL runtime error: no such key: model$"):
        _allocator_over(index, cel).allocate(NODE, [claim("a", exactly("r", "gpu", "true", "boom"))])
    with pytest.raises(AllocationError, match=r"^claim ns/b: selector #0: CEL runtime error: no such key: model$"):
        _allocator_over(index, cel).allocate(NODE, [claim("b", exactly("r", "gpu", "boom"))])


def test_a_kept_compile_error_stays_a_compile_error() -> None:
    index = SliceIndex([rslice("s", GPUS)], DEFAULTS)
    for name in ("a", "b"):
        with pytest.raises(AllocationError, match=rf"^claim ns/{name}: selector #0: CEL compile error: Syntax error"):
            _allocator_over(index, FakeCel()).allocate(NODE, [claim(name, exactly("r", "gpu", "syntax ("))])


def _searches(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    from kopf_scheduler.plugins.dynamic_resources.allocator import allocation as module

    ran: list[str] = []
    original = module.Allocation.run

    def run(self: Any) -> Any:
        ran.append(self.claims[0]["metadata"]["name"])
        return original(self)

    monkeypatch.setattr(module.Allocation, "run", run)
    return ran


def test_a_kept_search_answers_equal_claims_while_the_nodes_devices_in_use_are_the_same(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    ran = _searches(monkeypatch)
    index, cel = SliceIndex([rslice("s", GPUS)], DEFAULTS), FakeCel()
    config = [{"opaque": {"driver": DRIVER, "parameters": {"a": 1}}}]
    first = _allocator_over(index, cel).allocate(NODE, [claim("c1", exactly("r", "a100"), config=config)])
    again = _allocator_over(index, cel).allocate(NODE, [claim("c2", exactly("r", "a100"), config=config)])
    assert ran == ["c1"]
    assert first is not None
    assert again == first
    assert again is not None
    assert again[0] is not first[0]
    assert again[0]["devices"]["config"] is not first[0]["devices"]["config"]
    # Another request is another search; so is the same one once a device of the node is in use.
    _allocator_over(index, cel).allocate(NODE, [claim("c3", exactly("r", "h100"))])
    taken = AllocatedState()
    taken.add_claim({"status": {"allocation": first[0]}})
    after = _allocator_over(index, cel, taken).allocate(NODE, [claim("c4", exactly("r", "a100"), config=config)])
    assert ran == ["c1", "c3", "c4"]
    assert picked(after) == [[("r", "gpu-2")]]
    # Claims that do not fit are kept too.
    taken.add_claim({"status": {"allocation": after[0] if after else {}}})
    assert _allocator_over(index, cel, taken).allocate(NODE, [claim("c5", exactly("r", "a100"))]) is None
    assert _allocator_over(index, cel, taken).allocate(NODE, [claim("c6", exactly("r", "a100"))]) is None
    assert ran == ["c1", "c3", "c4", "c5"]


def test_a_changed_device_class_is_another_search(monkeypatch: pytest.MonkeyPatch) -> None:
    ran = _searches(monkeypatch)
    index, cel = SliceIndex([rslice("s", GPUS)], DEFAULTS), FakeCel()

    def with_class(name: str, device_class: Mapping[str, Any]) -> Any:
        allocator = Allocator(
            features=DEFAULTS, allocated=AllocatedState(), classes={"x": device_class}, slices=(), cel=cel, index=index
        )
        return picked(allocator.allocate(NODE, [claim(name, exactly("r", "x"))]))

    assert with_class("c1", dclass("x", f'device.attributes["{DRIVER}"].model == "a100"')) == [[("r", "gpu-1")]]
    assert with_class("c2", dclass("x", f'device.attributes["{DRIVER}"].model == "h100"')) == [[("r", "gpu-0")]]
    assert ran == ["c1", "c2"]


def test_searches_with_shared_counters_or_consumed_capacity_are_not_kept(monkeypatch: pytest.MonkeyPatch) -> None:
    ran = _searches(monkeypatch)
    counters = rslice("counters", node=None, sharedCounters=[{"name": "set", "counters": {"mem": {"value": "8Gi"}}}])
    consuming = device("gpu-0", consumesCounters=[{"counterSet": "set", "counters": {"mem": {"value": "4Gi"}}}])
    index = SliceIndex(
        [
            rslice("s", [consuming], count=2),
            {
                **counters,
                "spec": {**counters["spec"], "pool": {"name": "pool-1", "generation": 1, "resourceSliceCount": 2}},
            },
        ],
        DEFAULTS,
    )
    for name in ("c1", "c2"):
        _allocator_over(index, FakeCel()).allocate(NODE, [claim(name, exactly("r", "any"))])
    shared = AllocatedState()
    shared.capacity[(DRIVER, "other", "x")] = {}
    plain = SliceIndex([rslice("s", GPUS)], DEFAULTS)
    for name in ("c3", "c4"):
        _allocator_over(plain, FakeCel(), shared).allocate(NODE, [claim(name, exactly("r", "any"))])
    assert ran == ["c1", "c2", "c3", "c4"]


def test_a_kept_search_builds_its_results_only_when_asked(monkeypatch: pytest.MonkeyPatch) -> None:
    from kopf_scheduler.plugins.dynamic_resources.allocator import allocation as module

    index, cel = SliceIndex([rslice("s", GPUS)], DEFAULTS), FakeCel()
    searched = _allocator_over(index, cel).allocate_deferred(NODE, [claim("c1", exactly("r", "a100"))])
    assert searched is not None
    built: list[int] = []
    original = module.Allocation._result

    def result(self: Any, claim_index: int, c: Mapping[str, Any]) -> dict[str, Any]:
        built.append(claim_index)
        return original(self, claim_index, c)

    monkeypatch.setattr(module.Allocation, "_result", result)
    kept = _allocator_over(index, cel).allocate_deferred(NODE, [claim("c2", exactly("r", "a100"))])
    assert kept is not None
    assert built == []
    assert picked(kept()) == picked(searched()) == [[("r", "gpu-1")]]
    assert built == [0]


def test_a_kept_search_of_a_prioritized_list_answers_the_same_subrequest(monkeypatch: pytest.MonkeyPatch) -> None:
    ran = _searches(monkeypatch)
    index, cel = SliceIndex([rslice("s", GPUS)], DEFAULTS), FakeCel()
    config = [{"requests": ["r/big"], "opaque": {"driver": DRIVER, "parameters": {}}}]

    def prioritized(name: str) -> dict[str, Any]:
        return claim(
            name, first_available("r", sub("huge", "gpu", count=4), sub("big", "a100", count=2)), config=config
        )

    first = _allocator_over(index, cel).allocate(NODE, [prioritized("c1")])
    again = _allocator_over(index, cel).allocate(NODE, [prioritized("c2")])
    assert ran == ["c1"]
    assert picked(first) == [[("r/big", "gpu-1"), ("r/big", "gpu-2")]]
    assert again == first
