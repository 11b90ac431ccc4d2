"""DRA CEL device selectors (plugins/dynamic_resources/cel.py, cel_library.py) against upstream's cases.

The scenarios restate k8s.io/dynamic-resource-allocation@v0.36.3/cel/compile_test.go (TestCEL, without the
list-type-attributes and cost-estimate parts) and the error forms the structured allocator surfaces.
"""

from __future__ import annotations

import subprocess
import sys
import time
from typing import Any

import pytest

from kopf_scheduler.plugins.dynamic_resources import cel
from kopf_scheduler.plugins.dynamic_resources.cel import (
    CelCompileError,
    CelError,
    CompiledSelector,
    SelectorCache,
    device_context,
)

DRIVER = "dra.example.com"


def _device(
    attributes: dict[str, dict[str, Any]] | None = None,
    capacity: dict[str, str] | None = None,
    allow_multiple_allocations: bool | None = None,
) -> dict[str, Any]:
    """A resource.k8s.io/v1 Device as JSON."""
    device: dict[str, Any] = {"name": "device-0"}
    if attributes is not None:
        device["attributes"] = attributes
    if capacity is not None:
        device["capacity"] = {name: {"value": value} for name, value in capacity.items()}
    if allow_multiple_allocations is not None:
        device["allowMultipleAllocations"] = allow_multiple_allocations
    return device


ALL_KINDS = _device(
    attributes={
        "bool": {"bool": True},
        "int": {"int": 1},
        "string": {"string": "fish"},
        "version": {"version": "1.0.0"},
    },
    capacity={"quantity": "1Mi"},
)

# (id, expression, driver, device, expected result)
MATCHES = [
    ("true", "true", "", _device(), True),
    ("false", "false", "", _device(), False),
    ("domain-check-negative", '"no-such-domain" in device.attributes', "", _device(), False),
    (
        "domain-check-positive",
        '"dra.example.com" in device.attributes',
        "",
        _device(attributes={"dra.example.com/something": {"bool": True}}),
        True,
    ),
    ("empty-driver-name", 'device.driver == ""', "", _device(), True),
    ("real-driver-name", 'device.driver == "dra.example.com"', DRIVER, _device(), True),
    ("other-driver-name", 'device.driver == "other.example.com"', DRIVER, _device(), False),
    (
        "driver-name-qualifier",
        'device.attributes["dra.example.com"].name',
        DRIVER,
        _device(attributes={"name": {"bool": True}}),
        True,
    ),
    (
        "driver-name-qualifier-map-lookup",
        'device.attributes["dra.example.com"]["name"]',
        DRIVER,
        _device(attributes={"name": {"bool": True}}),
        True,
    ),
    (
        "bind",
        'cel.bind(dra, device.attributes["dra.example.com"], dra.name)',
        DRIVER,
        _device(attributes={"name": {"bool": True}}),
        True,
    ),
    (
        "qualified-attribute-name",
        'device.attributes["other.example.com"].name',
        DRIVER,
        _device(attributes={"other.example.com/name": {"bool": True}}),
        True,
    ),
    (
        "qualified-name-is-not-under-the-driver",
        '"name" in device.attributes["dra.example.com"]',
        DRIVER,
        _device(attributes={"other.example.com/name": {"bool": True}}),
        False,
    ),
    ("int", 'device.attributes["dra.example.com"].name > 0', DRIVER, _device(attributes={"name": {"int": 1}}), True),
    (
        "string",
        'device.attributes["dra.example.com"].name == "fish"',
        DRIVER,
        _device(attributes={"name": {"string": "fish"}}),
        True,
    ),
    (
        "version",
        'device.attributes["dra.example.com"].name.isGreaterThan(semver("0.0.1"))',
        DRIVER,
        _device(attributes={"name": {"version": "1.0.0"}}),
        True,
    ),
    (
        "version_v",
        'device.attributes["dra.example.com"].name.isGreaterThan(semver("v0.0.1", true)) && isSemver("v1.0.0", true)',
        DRIVER,
        _device(attributes={"name": {"version": "1.0.0"}}),
        True,
    ),
    (
        "version-pre-release-ranks-below-release",
        'device.attributes["dra.example.com"].v.isLessThan(semver("1.0.0")) && '
        'device.attributes["dra.example.com"].v.major() == 1',
        DRIVER,
        _device(attributes={"v": {"version": "1.0.0-rc.1"}}),
        True,
    ),
    (
        "quantity",
        'device.capacity["dra.example.com"].name.isGreaterThan(quantity("1Ki"))',
        DRIVER,
        _device(capacity={"name": "1Mi"}),
        True,
    ),
    (
        "quantity-compare-to",
        'device.capacity["dra.example.com"].memory.compareTo(quantity("40Gi")) == 0',
        DRIVER,
        _device(capacity={"memory": "40Gi"}),
        True,
    ),
    (
        "quantity-arithmetic",
        'device.capacity["dra.example.com"].memory.sub(quantity("1Gi")).add(1).asInteger() == 39 * 1073741824 + 1',
        DRIVER,
        _device(capacity={"memory": "40Gi"}),
        True,
    ),
    (
        "check-positive",
        '"name" in device.capacity["dra.example.com"] && '
        'device.capacity["dra.example.com"].name.isGreaterThan(quantity("1Ki"))',
        DRIVER,
        _device(capacity={"name": "1Mi"}),
        True,
    ),
    (
        "check-negative",
        '!("name" in device.capacity["dra.example.com"]) || '
        'device.capacity["dra.example.com"].name.isGreaterThan(quantity("1Ki"))',
        "",
        _device(),
        True,
    ),
    (
        "all",
        """
device.capacity["dra.example.com"].quantity.isGreaterThan(quantity("1Ki")) &&
device.attributes["dra.example.com"].bool &&
device.attributes["dra.example.com"].int > 0 &&
device.attributes["dra.example.com"].string == "fish" &&
device.attributes["dra.example.com"].version.isGreaterThan(semver("0.0.1")) &&
device.capacity["dra.example.com"]["quantity"].isGreaterThan(quantity("1Ki")) &&
device.attributes["dra.example.com"]["bool"] &&
device.attributes["dra.example.com"]["int"] > 0 &&
device.attributes["dra.example.com"]["string"] == "fish" &&
device.attributes["dra.example.com"]["version"].isGreaterThan(semver("0.0.1"))
""",
        DRIVER,
        ALL_KINDS,
        True,
    ),
    (
        "check_attribute_domains",
        'device.attributes.exists_one(x, x == "dra.example.com")',
        DRIVER,
        _device(attributes={"services": {"string": "some_example_value"}}),
        True,
    ),
    (
        "check_attribute_ids",
        'device.attributes["dra.example.com"].exists_one(x, x == "services")',
        DRIVER,
        _device(attributes={"services": {"string": "some_example_value"}}),
        True,
    ),
    (
        "split_attribute",
        'device.attributes["dra.example.com"].services.split("example").size() >= 2',
        DRIVER,
        _device(attributes={"services": {"string": "some_example_value"}}),
        True,
    ),
    (
        "regexp_attribute",
        'device.attributes["dra.example.com"].services.matches("[^a]?sym")',
        DRIVER,
        _device(attributes={"services": {"string": "asymetric"}}),
        True,
    ),
    (
        "check_capacity_domains",
        'device.capacity.exists_one(x, x == "dra.example.com")',
        DRIVER,
        _device(capacity={"memory": "1Mi"}),
        True,
    ),
    (
        "allow_multiple_allocations",
        "device.allowMultipleAllocations == true",
        DRIVER,
        _device(allow_multiple_allocations=True),
        True,
    ),
    ("allow_multiple_allocations_default", "device.allowMultipleAllocations == false", DRIVER, _device(), True),
    (
        "has-absent-attribute",
        'has(device.attributes["dra.example.com"].model)',
        DRIVER,
        _device(attributes={"memory": {"int": 1}}),
        False,
    ),
    (
        "missing-key-error-absorbed-by-or",
        'device.attributes["dra.example.com"].model == "a100" || true',
        DRIVER,
        _device(),
        True,
    ),
    (
        "function-error-absorbed-by-and",
        'false && quantity("bad").isGreaterThan(quantity("1"))',
        DRIVER,
        _device(),
        False,
    ),
    (
        "in-list-literal",
        'device.attributes["dra.example.com"].model in ["a100", "h100"]',
        DRIVER,
        _device(attributes={"model": {"string": "h100"}}),
        True,
    ),
]


@pytest.mark.parametrize(
    ("expression", "driver", "device", "expected"),
    [pytest.param(*case[1:], id=case[0]) for case in MATCHES],
)
def test_selector_matches_like_upstream(expression: str, driver: str, device: dict[str, Any], expected: bool) -> None:
    assert SelectorCache().compile(expression).matches(driver, device) is expected


# (id, expression, driver, device, text the CelError must contain)
RUNTIME_ERRORS = [
    (
        "runtime-error-lookup-identifier",
        'device.attributes["no-such-domain"].noSuchAttr.isGreaterThan(quantity("0"))',
        "",
        _device(),
        "no such key: noSuchAttr",
    ),
    (
        "runtime-error-lookup-map",
        'device.attributes["no-such-domain"]["noSuchAttr"].isGreaterThan(quantity("0"))',
        "",
        _device(),
        "no such key: noSuchAttr",
    ),
    (
        "missing-attribute-of-the-driver",
        'device.attributes["dra.example.com"].model == "a100"',
        DRIVER,
        _device(attributes={"memory": {"int": 1}}),
        "no such key: model",
    ),
    (
        "non-bool-attribute-result",
        'device.attributes["dra.example.com"].name',
        DRIVER,
        _device(attributes={"name": {"int": 1}}),
        "CEL result of type int could not be converted to bool",
    ),
    (
        "attribute-without-value",
        "true",
        DRIVER,
        _device(attributes={"names": {"strings": ["fish", "bird"]}}),
        "attribute names: unsupported attribute value",
    ),
    (
        "quantity-as-integer-of-a-fraction",
        'quantity("1.5").asInteger() == 1',
        DRIVER,
        _device(),
        "cannot convert value to integer",
    ),
    (
        "quantity-parse-error",
        'quantity("1 Gi").isGreaterThan(quantity("1"))',
        DRIVER,
        _device(),
        "quantities must match the regular expression",
    ),
    (
        "string-compared-with-int",
        'device.attributes["dra.example.com"].model > 1',
        DRIVER,
        _device(attributes={"model": {"string": "a100"}}),
        "no such overload",
    ),
    (
        "quantities-have-no-less-than-operator",
        'quantity("1") < quantity("2")',
        DRIVER,
        _device(),
        "no such overload",
    ),
    (
        "comparing-a-quantity-with-a-semver",
        'quantity("1").isGreaterThan(semver("1.0.0"))',
        DRIVER,
        _device(),
        "no such overload",
    ),
]


@pytest.mark.parametrize(
    ("expression", "driver", "device", "message"),
    [pytest.param(*case[1:], id=case[0]) for case in RUNTIME_ERRORS],
)
def test_runtime_errors_carry_upstream_text(expression: str, driver: str, device: dict[str, Any], message: str) -> None:
    selector = SelectorCache().compile(expression)
    with pytest.raises(CelError, match=None) as caught:
        selector.matches(driver, device)
    assert message in str(caught.value)


# (id, expression, text the CelError must contain)
COMPILE_ERRORS = [
    ("syntax-error", "?!", "Syntax error"),
    ("type-error", "1", "must evaluate to bool or the unknown type, not int"),
    ("string-result", '"yes"', "must evaluate to bool or the unknown type, not string"),
    ("undeclared-function", 'device.attributes["d"].name.includes("fish")', "undeclared reference to 'includes'"),
    ("undeclared-variable", "pod.name == 1", "undeclared reference to 'pod'"),
    # structured allocator's "invalid-CEL-one-device" case
    ("allocator-no-such-var", "noSuchVar", "undeclared reference"),
    ("empty-expression", "", "Syntax error"),
    ("macro-variable-shadows-device", "[1].all(device, device > 0)", "must not shadow 'device'"),
]


@pytest.mark.parametrize(("expression", "message"), [pytest.param(*case[1:], id=case[0]) for case in COMPILE_ERRORS])
def test_compile_errors_carry_upstream_text(expression: str, message: str) -> None:
    with pytest.raises(CelCompileError) as caught:
        SelectorCache().compile(expression)
    assert message in str(caught.value)


@pytest.mark.parametrize(
    "expression",
    [
        '"abc".charAt(1) == "b"',
        '"hello".indexOf("l") == 2 && "hello".lastIndexOf("l") == 3',
        '"AbC".lowerAscii() == "abc" && "AbC".upperAscii() == "ABC" && " a ".trim() == "a"',
        '"a,b,c".split(",") == ["a", "b", "c"] && "a,b,c".split(",", 2) == ["a", "b,c"]',
        '"hello".substring(1, 3) == "el" && ["a", "b"].join("-") == "a-b"',
        '"aXa".replace("a", "b") == "bXb" && "aXa".replace("a", "b", 1) == "bXa"',
        '"abc123".find("[0-9]+") == "123" && "a1b22".findAll("[0-9]+") == ["1", "22"]',
        "[1, 2, 3].isSorted() && [1, 2, 3].sum() == 6 && [1, 5, 2].max() == 5 && [3, 1].min() == 1",
        "[1, 2, 3].indexOf(2) == 1 && [1, 2, 2].lastIndexOf(2) == 2",
        'isQuantity("1Gi") && !isQuantity("1 Gi") && quantity("1Gi").isInteger() && quantity("-1").sign() == -1',
        'semver("1.2.3").major() == 1 && semver("1.2.3").minor() == 2 && semver("1.2.3").patch() == 3',
        'semver("1.0.0-alpha").isLessThan(semver("1.0.0-alpha.1")) && semver("1.0.0+build") == semver("1.0.0")',
        'type(1) == int && type("a") == string',
    ],
)
def test_kubernetes_libraries(expression: str) -> None:
    assert SelectorCache().compile(expression).matches(DRIVER, _device()) is True


def test_syntax_errors_read_like_cel_go() -> None:
    with pytest.raises(CelCompileError) as caught:
        SelectorCache().compile("device.driver ==")
    assert str(caught.value) == (
        "compilation failed: ERROR: <input>:1:15: Syntax error: unexpected input\n"
        " | device.driver ==\n"
        " | ..............^"
    )


def test_the_error_text_the_allocator_wraps() -> None:
    cache = SelectorCache()
    with pytest.raises(CelError) as runtime:
        cache.compile('device.attributes["dra.example.com"].model == "a100"').matches(DRIVER, _device())
    assert not isinstance(runtime.value, CelCompileError)
    assert str(runtime.value) == "no such key: model"
    with pytest.raises(CelCompileError) as compile_time:
        cache.compile("1")
    assert str(compile_time.value) == "must evaluate to bool or the unknown type, not int"


def test_macro_variables_are_not_undeclared() -> None:
    selector = SelectorCache().compile('device.attributes.all(domain, domain != "") && [1, 2].exists(n, n == 2)')
    assert selector.matches(DRIVER, _device(attributes={"a": {"bool": True}})) is True


_TEN = "[1, 2, 3, 4, 5, 6, 7, 8, 9, 10]"
_TEN_CUBED = f"{_TEN}.all(x, {_TEN}.all(y, {_TEN}.all(z, x * y * z > 0)))"


def test_the_cost_limit_stops_an_expensive_expression() -> None:
    nested = "int('1') < 100"
    for variable in ("z5", "z4", "z3", "z2", "z", "y", "x"):
        nested = f"[1, 2, 3, 4, 5, 6, 7, 8, 9, 10].all({variable}, {nested})"
    selector = SelectorCache().compile(nested)
    with pytest.raises(CelError, match=r"operation interrupted|actual cost limit exceeded"):
        selector.matches(DRIVER, _device(), deadline=time.monotonic() + 0.5)


def test_the_step_budget_gives_cel_go_text(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cel, "COST_LIMIT", 2000)
    selector = SelectorCache().compile(_TEN_CUBED)
    with pytest.raises(CelError, match=r"^operation cancelled: actual cost limit exceeded$"):
        selector.matches(DRIVER, _device())
    monkeypatch.setattr(cel, "COST_LIMIT", 1_000_000)
    assert selector.matches(DRIVER, _device()) is True


def test_a_deadline_interrupts_the_evaluation() -> None:
    selector = SelectorCache().compile(_TEN_CUBED)
    with pytest.raises(CelError, match=r"^operation interrupted: context deadline exceeded$"):
        selector.matches(DRIVER, _device(), deadline=time.monotonic() - 1)


def test_an_outcome_is_remembered_per_device(monkeypatch: pytest.MonkeyPatch) -> None:
    cache = SelectorCache()
    selector = cache.compile('device.attributes["dra.example.com"].model == "a100"')
    missing = cache.compile('device.attributes["dra.example.com"].memory > 1')
    device = _device(attributes={"model": {"string": "a100"}})
    assert selector.matches(DRIVER, device) is True
    with pytest.raises(CelError, match="no such key: memory"):
        missing.matches(DRIVER, device)
    calls = []
    original = cel._Runtime.evaluate
    monkeypatch.setattr(cel._Runtime, "evaluate", lambda *args: calls.append(args) or original(*args))
    assert selector.matches(DRIVER, device) is True
    with pytest.raises(CelError, match="no such key: memory"):
        missing.matches(DRIVER, device)
    assert calls == []
    assert selector.matches(DRIVER, _device(attributes={"model": {"string": "h100"}})) is False
    assert len(calls) == 1


def test_an_interrupted_evaluation_is_not_remembered() -> None:
    selector = SelectorCache().compile(_TEN_CUBED)
    device = _device()
    with pytest.raises(CelError, match=r"^operation interrupted"):
        selector.matches(DRIVER, device, deadline=time.monotonic() - 1)
    assert selector.matches(DRIVER, device) is True


def test_cache_returns_the_same_compiled_selector() -> None:
    cache = SelectorCache()
    first = cache.compile("device.driver == 'a'")
    assert isinstance(first, CompiledSelector)
    assert first.expression == "device.driver == 'a'"
    assert cache.compile("device.driver == 'a'") is first
    assert len(cache) == 1


def test_cache_drops_the_least_recently_used() -> None:
    cache = SelectorCache(max_size=2)
    a = cache.compile("true")
    cache.compile("false")
    assert cache.compile("true") is a  # "true" is now the most recently used
    cache.compile("1 == 1")
    assert len(cache) == 2
    assert cache.compile("true") is a
    assert cache.compile("false") is not None
    assert len(cache) == 2


def test_compile_errors_are_not_cached() -> None:
    cache = SelectorCache()
    with pytest.raises(CelError):
        cache.compile("?!")
    assert len(cache) == 0


def test_a_precomputed_context_serves_many_selectors() -> None:
    device = _device(attributes={"model": {"string": "a100"}, "gpu.example.com/mem": {"int": 3}})
    context = device_context("gpu.example.com", device)
    cache = SelectorCache()
    assert cache.compile('device.attributes["gpu.example.com"].model == "a100"').matches(
        "gpu.example.com", device, context
    )
    assert cache.compile('device.attributes["gpu.example.com"].mem == 3').matches("gpu.example.com", device, context)


def test_the_device_conversion_is_cached_per_device_object_and_driver() -> None:
    selector = SelectorCache().compile('device.driver == "a.example.com"')
    device = _device()
    assert selector.matches("a.example.com", device) is True
    assert selector.matches("b.example.com", device) is False  # same dict, other driver: not mixed up
    assert selector.matches("a.example.com", _device()) is True  # an equal, distinct dict


def test_a_bad_version_attribute_is_a_runtime_error() -> None:
    selector = SelectorCache().compile("true")
    with pytest.raises(CelError) as caught:
        selector.matches(DRIVER, _device(attributes={"v": {"version": "1.0"}}))
    assert str(caught.value) == "attribute v: parse semantic version: No Major.Minor.Patch elements found"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("01.0.0", 'Major number must not contain leading zeroes "01"'),
        ("1.x.0", 'Invalid character(s) found in minor number "x"'),
        ("1.0.0-", "Prerelease is empty"),
        ("1.0.0-01", 'Numeric PreRelease version must not contain leading zeroes "01"'),
        ("1.0.0+", "Build meta data is empty"),
        ("v1.0.0", 'Invalid character(s) found in major number "v1"'),
    ],
)
def test_semver_parse_errors_are_blangs(text: str, message: str) -> None:
    selector = SelectorCache().compile(f'semver("{text}").major() == 1')
    with pytest.raises(CelError) as caught:
        selector.matches(DRIVER, _device())
    assert str(caught.value) == message


def test_semver_normalization_fills_in_and_strips() -> None:
    selector = SelectorCache().compile('semver("v01.2", true) == semver("1.2.0") && isSemver("1", true)')
    assert selector.matches(DRIVER, _device()) is True


def test_importing_the_module_does_not_import_celpy() -> None:
    code = (
        "import sys\n"
        "import kopf_scheduler.plugins.dynamic_resources.cel as cel\n"
        "assert 'celpy' not in sys.modules and 'lark' not in sys.modules, 'celpy imported eagerly'\n"
        "cel.SelectorCache()\n"
        "assert 'celpy' not in sys.modules, 'celpy imported by an empty cache'\n"
        "cel.SelectorCache().compile('true')\n"
        "assert 'celpy' in sys.modules\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, env=_subprocess_env())


def _subprocess_env() -> dict[str, str]:
    import os

    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)
    return env
