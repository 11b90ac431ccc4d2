"""CEL device selectors: compile ``DeviceSelector.cel.expression`` once, evaluate it against many devices.

Upstream counterpart: ``k8s.io/dynamic-resource-allocation@v0.36.3/cel`` (``compile.go``: the DRA CEL environment
and ``DeviceMatches``; ``cache.go``: the LRU of compiled expressions). The Kubernetes CEL libraries it enables
(upstream ``k8s.io/apiserver/pkg/cel/library``: quantity, semver, regex, lists; cel-go's strings) are
``cel_library.py``.

The environment has one variable, ``device``, with ``driver`` (string), ``allowMultipleAllocations`` (bool),
``attributes`` (domain -> ID -> bool/int/string/semver) and ``capacity`` (domain -> ID -> quantity). A qualified
name "gpu.example.com/model" is split into domain and ID; a name without a domain gets the driver name as its
domain. Looking up an unknown domain yields an empty map (so ``"d" in device.attributes`` is false, and
``device.attributes["d"].x`` fails with upstream's "no such key: x"). The result must be a bool.

The evaluator is cel-python (``celpy``, pure Python on lark); docs/plugins.md ("DynamicResources: CEL") has the
measurement that chose it over Google's C++ binding, which cannot carry the opaque quantity and semver values.
celpy is imported lazily (on the first compile), so a scheduler that never sees a claim never pays for it.

Differences from upstream, on purpose or for want of a type checker (celpy has none):
- Compile-time checks are partial: syntax errors, undeclared functions and variables and a literal non-bool
  result are rejected when compiling (with upstream's texts); any other non-bool result (or a type mismatch)
  fails when evaluated, with upstream's runtime text for that case. A macro or ``cel.bind`` variable may not be
  named ``device`` (the evaluator binds ``device`` directly, for speed).
- The cost limit (``CELSelectorExpressionMaxCost`` = 1,000,000) is enforced as a budget of evaluation steps
  (one per parse-tree node visited: usually several per cel-go cost unit, but string and list sizes are not
  charged); the error text is cel-go's. celpy needs seconds for a million steps, so callers also pass
  ``deadline`` (a ``time.monotonic()`` instant, upstream's filter timeout); past it evaluation stops with
  "operation interrupted".

Errors: :class:`CelError` (:class:`CelCompileError` from ``compile``) carries cel-go's text; upstream's allocator
wraps it as "claim ns/name: selector #0: CEL runtime error: no such key: model" and stops the allocation.
Errors inside ``||``/``&&`` are absorbed as in cel-go (``x.missing || true`` is true).

Libraries, as upstream's base environment has them: quantity, semver, regex (``find``/``findAll``), lists
(``isSorted``/``sum``/``min``/``max``/``indexOf``/``lastIndexOf``), strings v2 (``charAt``, ``indexOf``,
``lastIndexOf``, ``lowerAscii``, ``upperAscii``, ``replace``, ``split``, ``substring``, ``trim``, ``join``),
``cel.bind``, and celpy's standard functions and macros. Not here (they fail to compile as undeclared): sets,
IP/CIDR, URL, format, two-variable comprehensions, optional types, and DRAListTypeAttributes' ``includes``.

Activations: ``CompiledSelector.matches(driver, device)`` converts the device (a resource.k8s.io/v1 ``Device``
dict) into CEL values once and keeps the result in a small LRU keyed by ``(id(device), driver)`` that holds the
device itself, so identity is checked and ids cannot be reused while an entry lives. Devices must therefore not
be mutated in place after their first evaluation (informer objects are replaced, never edited). Callers that
prefer explicit control pass ``context=device_context(driver, device)``. A context also remembers each
selector's outcome on its device, so the next scheduling cycle over the same devices evaluates nothing.
"""

from __future__ import annotations

import functools
import threading
import time
from collections import OrderedDict
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from kopf_scheduler.plugins.dynamic_resources.cel_library import CelError as CelError  # re-exported
from kopf_scheduler.plugins.dynamic_resources.cel_library import (
    Quantity,
    Semver,
    kubernetes_functions,
    new_quantity,
)

if TYPE_CHECKING:
    import lark

# resourceapi.CELSelectorExpressionMaxCost: the runtime limit, here a budget of evaluation steps.
COST_LIMIT = 1_000_000
_DEVICE_VAR = "device"
_CONTEXT_CACHE_SIZE = 4096
_INTERRUPTED = "operation interrupted: context deadline exceeded"


class CelCompileError(CelError):
    """The expression does not compile (``SelectorCache.compile``); other :class:`CelError` are runtime errors."""


# ---------------------------------------------------------------------------------------------------------------
# The device as CEL values.


class DeviceContext:
    """The CEL activation for one device under one driver: build once, evaluate many selectors against it.

    It also remembers each selector's outcome on this device (the environment has no clock and no randomness,
    so an expression's result on an unchanged device never changes); an interrupted evaluation is not kept.
    """

    __slots__ = ("device", "outcomes", "value")

    def __init__(self, device: Mapping[str, Any], value: Any) -> None:
        self.device = device
        self.value = value  # the celpy map bound to ``device``
        self.outcomes: dict[str, bool | str] = {}  # expression -> result, or the CelError text


def device_context(driver: str, device: Mapping[str, Any]) -> DeviceContext:
    """Convert a resource.k8s.io/v1 ``Device`` dict into the ``device`` variable; raises :class:`CelError`."""
    from celpy import celtypes  # lazily, with the rest of celpy

    defaulting_map = _defaulting_map_type()
    attributes: dict[str, dict[Any, Any]] = {}
    for name, attribute in (device.get("attributes") or {}).items():
        domain, ident = _split_qualified_name(name, driver)
        attributes.setdefault(domain, {})[celtypes.StringType(ident)] = _attribute_value(name, attribute)
    capacity: dict[str, dict[Any, Any]] = {}
    for name, cap in (device.get("capacity") or {}).items():
        domain, ident = _split_qualified_name(name, driver)
        capacity.setdefault(domain, {})[celtypes.StringType(ident)] = new_quantity(str(cap.get("value", "0")))
    value = celtypes.MapType(
        {
            celtypes.StringType("driver"): celtypes.StringType(driver),
            celtypes.StringType("allowMultipleAllocations"): celtypes.BoolType(
                bool(device.get("allowMultipleAllocations"))
            ),
            celtypes.StringType("attributes"): defaulting_map(
                {celtypes.StringType(d): celtypes.MapType(ids) for d, ids in attributes.items()}
            ),
            celtypes.StringType("capacity"): defaulting_map(
                {celtypes.StringType(d): celtypes.MapType(ids) for d, ids in capacity.items()}
            ),
        }
    )
    return DeviceContext(device, value)


def _split_qualified_name(name: str, default_domain: str) -> tuple[str, str]:
    """Upstream ``parseQualifiedName``: "domain/id", or the driver name as domain for a bare ID."""
    domain, sep, ident = name.partition("/")
    return (domain, ident) if sep else (default_domain, name)


def _attribute_value(name: str, attribute: Mapping[str, Any]) -> Any:
    """Upstream ``getAttributeValue`` (without DRAListTypeAttributes): exactly one of int/bool/string/version."""
    from celpy import celtypes  # lazily, with the rest of celpy

    if attribute.get("int") is not None:
        return celtypes.IntType(int(attribute["int"]))
    if attribute.get("bool") is not None:
        return celtypes.BoolType(bool(attribute["bool"]))
    if attribute.get("string") is not None:
        return celtypes.StringType(str(attribute["string"]))
    if attribute.get("version") is not None:
        try:
            return Semver(str(attribute["version"]))
        except CelError as error:
            raise CelError(f"attribute {name}: parse semantic version: {error}") from error
    raise CelError(f"attribute {name}: unsupported attribute value")


@functools.cache
def _defaulting_map_type() -> type:
    """A celpy map whose lookup of an unknown key yields an empty map (upstream ``mapper.Find``)."""
    from celpy import celtypes  # lazily, with the rest of celpy

    class DefaultingMap(celtypes.MapType):
        def __getitem__(self, key: Any) -> Any:
            try:
                return super().__getitem__(key)
            except KeyError:
                return celtypes.MapType({})

    return DefaultingMap


# ---------------------------------------------------------------------------------------------------------------
# Compilation and evaluation.


class CompiledSelector:
    """One compiled expression; ``matches`` evaluates it for a device (raises :class:`CelError` at runtime)."""

    __slots__ = ("_contexts", "_tree", "expression")

    def __init__(self, expression: str, tree: lark.Tree[lark.Token], contexts: _ContextCache) -> None:
        self.expression = expression
        self._tree = tree
        self._contexts = contexts

    def matches(
        self,
        driver: str,
        device: Mapping[str, Any],
        context: DeviceContext | None = None,
        *,
        deadline: float | None = None,
    ) -> bool:
        """Whether the device (served by ``driver``) satisfies the selector.

        ``context`` (from :func:`device_context`) skips the conversion of the device; ``deadline`` is a
        ``time.monotonic()`` instant after which the evaluation is interrupted.
        """
        if context is None:
            context = self._contexts.get(driver, device)
        outcome = context.outcomes.get(self.expression)
        if outcome is None:
            outcome = self._evaluate(context, deadline)
            context.outcomes[self.expression] = outcome
        if isinstance(outcome, str):
            raise CelError(outcome)
        return outcome

    def _evaluate(self, context: DeviceContext, deadline: float | None) -> bool | str:
        """The result, or the text of the :class:`CelError` (raised instead when the deadline interrupted it)."""
        try:
            result = _runtime().evaluate(self._tree, context, deadline)
        except CelError as error:
            if str(error) == _INTERRUPTED:
                raise
            return str(error)
        if isinstance(result, bool):
            return result
        type_name = _cel_type_name(result)
        return (
            f"CEL result of type {type_name} could not be converted to bool: "
            f"unsupported type conversion from '{type_name}' to bool"
        )


def _cel_type_name(value: Any) -> str:
    if isinstance(value, Quantity):
        return "kubernetes.Quantity"
    if isinstance(value, Semver):
        return "kubernetes.Semver"
    names = {
        "IntType": "int",
        "UintType": "uint",
        "DoubleType": "double",
        "StringType": "string",
        "BytesType": "bytes",
        "ListType": "list",
        "MapType": "map",
        "NoneType": "null_type",
    }
    for cls in type(value).__mro__:
        if cls.__name__ in names:
            return names[cls.__name__]
    return type(value).__name__


class _ContextCache:
    """Device contexts by ``(id(device), driver)``, holding the device so a reused id is never mistaken."""

    def __init__(self, max_size: int) -> None:
        self._max_size = max_size
        self._entries: OrderedDict[tuple[int, str], DeviceContext] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, driver: str, device: Mapping[str, Any]) -> DeviceContext:
        key = (id(device), driver)
        with self._lock:
            cached = self._entries.get(key)
            if cached is not None and cached.device is device:
                self._entries.move_to_end(key)
                return cached
        context = device_context(driver, device)
        with self._lock:
            self._entries[key] = context
            if len(self._entries) > self._max_size:
                self._entries.popitem(last=False)
        return context


class SelectorCache:
    """Upstream ``cel.Cache``: compiled selectors by expression text, least recently used dropped first."""

    def __init__(self, max_size: int = 1024) -> None:
        self._max_size = max_size
        self._compiled: OrderedDict[str, CompiledSelector] = OrderedDict()
        self._lock = threading.Lock()
        self._contexts = _ContextCache(_CONTEXT_CACHE_SIZE)

    def compile(self, expression: str) -> CompiledSelector:
        """The compiled selector (cached); raises :class:`CelError` with upstream's text on compile errors."""
        with self._lock:
            cached = self._compiled.get(expression)
            if cached is not None:
                self._compiled.move_to_end(expression)
                return cached
            compiled = CompiledSelector(expression, _runtime().compile(expression), self._contexts)
            self._compiled[expression] = compiled
            if len(self._compiled) > self._max_size:
                self._compiled.popitem(last=False)
            return compiled

    def __len__(self) -> int:
        return len(self._compiled)


# celpy evaluates these itself (min() is its own, matching the Kubernetes lists library).
_MACROS = frozenset({"all", "exists", "exists_one", "map", "filter", "has", "dyn", "min"})
# The variable and the type names CEL resolves as identifiers (`type(x) == string`).
_ROOT_IDENTS = frozenset(
    {_DEVICE_VAR, "int", "uint", "double", "bool", "string", "bytes", "list", "map", "null_type", "type"}
)
_LITERAL_TYPES = {
    "INT_LIT": "int",
    "UINT_LIT": "uint",
    "FLOAT_LIT": "double",
    "STRING_LIT": "string",
    "MLSTRING_LIT": "string",
    "BYTES_LIT": "bytes",
    "NULL_LIT": "null_type",
}


@functools.cache
def _runtime() -> _Runtime:
    """The one celpy runtime of the process, built on first use (that is where celpy gets imported)."""
    return _Runtime()


class _Runtime:
    """celpy's parser, the function table, the base activation and the evaluator class."""

    def __init__(self) -> None:
        import celpy  # the heavy import happens only when a selector is compiled
        from celpy import celtypes, evaluation
        from celpy.celparser import CELParseError

        _skip_runtime_typing(evaluation)
        self._parse_error = CELParseError
        self.celtypes = celtypes
        self._env = celpy.Environment()
        functions = kubernetes_functions()
        self._known_functions = frozenset(functions) | frozenset(evaluation.base_functions) | _MACROS
        self._evaluator_class = _evaluator_class(evaluation)
        self._eval_error = evaluation.CELEvalError
        # No expression tree: the runner serves only to build the base activation with the functions.
        runner = celpy.InterpretedRunner(self._env, None, functions)  # type: ignore[arg-type]  # tree is None
        self._base_activation = runner.new_activation()

    def compile(self, expression: str) -> lark.Tree[lark.Token]:
        try:
            tree = self._env.compile(expression)
        except self._parse_error as error:
            line, column = getattr(error, "line", None) or 1, getattr(error, "column", None) or 1
            # cel-go names the expected tokens; celpy only points at the spot, drawn the way cel-go draws it.
            source, caret = [*str(error.args[0] if error.args else "").splitlines(), "", ""][:2]
            message = f"compilation failed: ERROR: <input>:{line}:{column}: Syntax error: unexpected input"
            if caret.strip() == "^":
                message += f"\n | {source}\n | {caret.replace(' ', '.')}"
            raise CelCompileError(message) from error
        self._check(tree)
        return tree

    def _check(self, tree: lark.Tree[lark.Token]) -> None:
        """The part of cel-go's checker that needs no types: known functions and variables, literal results."""
        bound = {_macro_variable(node) for node in tree.find_data("member_dot_arg") if _method_name(node) in _MACROS}
        bound |= {_macro_variable(node) for node in tree.find_data("member_dot_arg") if _is_cel_bind(node)}
        if _DEVICE_VAR in bound:
            raise CelCompileError(_compile_error(tree, f"a macro or cel.bind variable must not shadow '{_DEVICE_VAR}'"))
        for node in tree.find_data("ident_arg"):
            self._require_function(str(node.children[0]), node)
        for node in tree.find_data("member_dot_arg"):
            if not _is_cel_bind(node):
                self._require_function(_method_name(node), node)
        for node in tree.find_data("ident"):
            name = str(node.children[0])
            if name not in _ROOT_IDENTS and name not in bound and name != "cel":
                raise CelCompileError(_compile_error(node, f"undeclared reference to '{name}' (in container '')"))
        literal = _top_level_literal(tree)
        if literal is not None:
            raise CelCompileError(
                f"must evaluate to bool or the unknown type, not {_LITERAL_TYPES.get(literal.type, literal.type)}"
            )

    def _require_function(self, name: str, node: lark.Tree[lark.Token]) -> None:
        if name not in self._known_functions:
            raise CelCompileError(_compile_error(node, f"undeclared reference to '{name}' (in container '')"))

    def evaluate(self, tree: lark.Tree[lark.Token], context: DeviceContext, deadline: float | None) -> Any:
        evaluator = self._evaluator_class(tree, self._base_activation, _Budget(COST_LIMIT, deadline), context.value)
        try:
            value = evaluator.evaluate(None)
        except self._eval_error as error:
            raise CelError(_runtime_text(error)) from error
        except CelError:
            raise
        except (RecursionError, ArithmeticError, ValueError, TypeError) as error:
            raise CelError(str(error)) from error
        if isinstance(value, self.celtypes.BoolType):
            return bool(value)
        return value


class _AnySubscript:
    """Stands in for ``typing.Tuple`` & co: subscripting returns itself, at no cost."""

    def __getitem__(self, _: Any) -> _AnySubscript:
        return self


def _skip_runtime_typing(evaluation: Any) -> None:
    """celpy's evaluator subscripts ``Tuple[...]``/``List[...]`` for ``typing.cast`` on every node; hashing its
    ``Result`` union there is a third of the evaluation time. Those subscriptions only feed ``cast`` (a no-op),
    and ``isinstance`` checks in ``celpy.evaluation`` use none of these names, so they are replaced there."""
    for name in ("Tuple", "List", "Iterable", "Callable"):
        setattr(evaluation, name, _AnySubscript())


def _compile_error(node: lark.Tree[lark.Token], message: str) -> str:
    meta = getattr(node, "meta", None)
    line, column = getattr(meta, "line", 1), getattr(meta, "column", 1)
    return f"compilation failed: ERROR: <input>:{line}:{column}: {message}"


def _method_name(node: lark.Tree[lark.Token]) -> str:
    return str(node.children[1])


def _is_cel_bind(node: lark.Tree[lark.Token]) -> bool:
    target: Any = node.children[0]  # a Tree or a Token, told apart by its ``data``
    return (
        _method_name(node) == "bind"
        and getattr(target, "data", None) == "member"
        and [str(t) for t in target.scan_values(lambda _: True)] == ["cel"]
    )


def _macro_variable(node: lark.Tree[lark.Token]) -> str:
    args: Any = node.children[2] if len(node.children) > 2 else None  # a Tree or a Token, or none
    if args is None or not getattr(args, "children", None):
        return ""
    names = list(args.children[0].scan_values(lambda _: True))
    return str(names[0]) if len(names) == 1 else ""


def _top_level_literal(tree: lark.Tree[lark.Token]) -> Any:
    """The literal token if the whole expression is one non-bool literal (cel-go rejects it as not bool)."""
    node: Any = tree
    while getattr(node, "data", None) is not None and node.data != "literal" and len(node.children) == 1:
        node = node.children[0]
    if getattr(node, "data", None) == "literal":
        token = node.children[0]
        return None if token.type == "BOOL_LIT" else token
    if getattr(node, "data", None) in {"list_lit", "map_lit"}:
        return type("Token", (), {"type": "list" if node.data == "list_lit" else "map"})()
    return None


def _runtime_text(error: Any) -> str:
    """cel-go's text for a celpy evaluation error (the ones a selector meets: missing keys, overloads)."""
    message, _exc_class, exc_args = [*error.args, None, None, None][:3]
    if isinstance(message, str) and message.startswith("no such member in mapping: "):
        return "no such key: " + message.removeprefix("no such member in mapping: ").strip("'\"")
    if message == "no such key" and exc_args:
        return f"no such key: {exc_args[0]}"
    if message == "evaluation error" and exc_args:  # a nested CELEvalError
        return _runtime_text(type(error)(*exc_args))
    if isinstance(exc_args, tuple) and exc_args and isinstance(exc_args[0], CelError):
        return str(exc_args[0])
    if message == "no such overload" or (isinstance(message, str) and message.startswith("found no matching overload")):
        return "no such overload"
    return str(message)


def _evaluator_class(evaluation: Any) -> type:
    """celpy's Evaluator with cel-go's texts for missing keys, ``cel.bind`` and a step budget (the cost limit)."""

    class DraEvaluator(evaluation.Evaluator):  # type: ignore[misc]  # its base is Any (the module is passed in)
        def __init__(self, ast: Any, activation: Any, budget: _Budget, device: Any) -> None:
            super().__init__(ast, activation)
            self._budget = budget
            self._device = device

        def ident_value(self, name: str, root_scope: bool = False) -> Any:
            # ``device`` directly: celpy's name resolution costs ~0.1 ms per lookup. Macro variables (resolved
            # by celpy) cannot shadow it; the compile check refuses a macro variable named ``device``.
            if name == _DEVICE_VAR:
                return self._device
            return super().ident_value(name, root_scope)

        def _visit_tree(self, tree: Any) -> Any:  # lark's one entry for every node, top-level and children
            self._budget.spend()
            # lark's own version also looks for a ``visit_wrapper`` (``@v_args``), which celpy never uses.
            return getattr(self, tree.data)(tree)

        def sub_evaluator(self, ast: Any) -> Any:
            return DraEvaluator(ast, self.activation, self._budget, self._device)

        def member_dot_arg(self, tree: Any) -> Any:
            if _is_cel_bind(tree):
                variable, init, body = tree.children[2].children
                value = self.visit(init)
                if isinstance(value, evaluation.CELEvalError):
                    return value
                name = next(iter(variable.scan_values(lambda _: True)))
                return self.sub_evaluator(body).evaluate({str(name): value})
            return super().member_dot_arg(tree)

        # Our functions raise CelError; as a CEL error value it is absorbed by ``||``/``&&`` like cel-go's.
        def function_eval(self, name_token: Any, exprlist: Any = None) -> Any:
            try:
                return super().function_eval(name_token, exprlist)
            except CelError as error:
                return evaluation.CELEvalError(str(error))

        def method_eval(self, obj: Any, method_ident: Any, exprlist: Any = None) -> Any:
            try:
                return super().method_eval(obj, method_ident, exprlist)
            except CelError as error:
                return evaluation.CELEvalError(str(error))

    return DraEvaluator


class _Budget:
    """The steps an evaluation may still take, and the instant it must stop (checked every 1024 steps)."""

    __slots__ = ("deadline", "left")

    def __init__(self, steps: int, deadline: float | None) -> None:
        self.left = steps
        self.deadline = deadline

    def spend(self) -> None:
        self.left -= 1
        if self.left < 0:
            raise CelError("operation cancelled: actual cost limit exceeded")
        if self.deadline is not None and self.left & 1023 == 0 and time.monotonic() > self.deadline:
            raise CelError(_INTERRUPTED)
