"""Node selectors and node affinity, parsed once per pod with upstream's rules, matched over node arrays.

Upstream's ``component-helpers/scheduling/corev1/nodeaffinity`` turns a pod's ``nodeSelector`` and
``requiredDuringSchedulingIgnoredDuringExecution`` into a ``RequiredNodeAffinity`` and its preferred terms
into ``PreferredSchedulingTerms``. The parsing rules decide verdicts, so they are restated here exactly:

- a term with neither matchExpressions nor matchFields matches nothing;
- a term whose requirements fail ``labels.NewRequirement`` validation (bad key, a value that is not a
  label value, In/NotIn without values, Exists with values, Gt/Lt without exactly one integer) matches
  nothing in the *required* selector (parse errors are ignored "for backwards compatibility"), while in
  *preferred* terms or a scheduler-enforced (``addedAffinity``) selector it is an error;
- matchFields know only ``metadata.name``, operators In/NotIn with exactly one value;
- Gt/Lt compare Go ``strconv.ParseInt`` integers (no float rounding, no ``_`` separators).

NodeAffinity (Filter/Score) and PodTopologySpread (``nodeAffinityPolicy: Honor``) share
:func:`required_node_affinity_mask`. Requirements are :class:`~kopf_scheduler.state.selectors.Requirement`
objects matched over the node table's interned label columns by a verdict per distinct label value, gathered
by the nodes' value ids (cheaper than ``np.isin``, and exact for Gt/Lt where the float column is not). The
``matches`` methods judge one node from its labels and name with the same per-value verdicts, for
NodeAffinity's QueueingHint (one node event at a time, no node table).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from kopf_scheduler.state.selectors import Requirement

if TYPE_CHECKING:
    from kopf_scheduler.state.node_table import NodeTable
    from kopf_scheduler.state.pod_info import PodInfo

#: The only field a node selector may name.
OBJECT_NAME_FIELD = "metadata.name"

_LABEL_OPERATORS = frozenset({"In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt"})
# Matched with fullmatch: Python's ``$`` would also accept a trailing newline, Go's does not.
_QUALIFIED_NAME = re.compile(r"([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]")
_LABEL_VALUE = re.compile(r"(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?")
_DNS1123_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
_GO_DECIMAL = re.compile(r"[+-]?[0-9]+")
_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1

#: PodInfo.memo key of the parsed required node affinity (shared by every plugin that asks).
_MEMO_REQUIRED = "state.RequiredNodeAffinity"


class NodeSelectorParseError(ValueError):
    """A node selector term that upstream's parser rejects."""


# -- validation (apimachinery's IsQualifiedName / IsValidLabelValue / strconv.ParseInt) ------------------
def parse_go_int64(text: str) -> int | None:
    """``strconv.ParseInt(text, 10, 64)``: optional sign, ASCII digits, int64 range; None on error."""
    if not _GO_DECIMAL.fullmatch(text):
        return None
    value = int(text)
    return value if _INT64_MIN <= value <= _INT64_MAX else None


def is_qualified_name(key: str) -> bool:
    """A label key: ``[prefix/]name``, name ≤ 63 chars, prefix a DNS-1123 subdomain ≤ 253 chars."""
    prefix, slash, name = key.rpartition("/")
    if slash and (not prefix or len(prefix) > 253 or not _DNS1123_SUBDOMAIN.fullmatch(prefix)):
        return False
    return 0 < len(name) <= 63 and bool(_QUALIFIED_NAME.fullmatch(name))


def is_label_value(value: str) -> bool:
    return len(value) <= 63 and bool(_LABEL_VALUE.fullmatch(value))


def _label_requirement(expr: Mapping[str, Any]) -> tuple[Requirement | None, list[str]]:
    """One matchExpressions entry as ``labels.NewRequirement`` would build it, or the reasons it cannot."""
    key = expr.get("key") or ""
    op = expr.get("operator") or ""
    values = tuple(expr.get("values") or ())
    if op not in _LABEL_OPERATORS:
        return None, [f"operator {op!r} not supported"]
    errors: list[str] = []
    if not is_qualified_name(key):
        errors.append(f"invalid label key {key!r}")
    if op in ("In", "NotIn") and not values:
        errors.append("for 'in', 'notin' operators, values set can't be empty")
    if op in ("Exists", "DoesNotExist") and values:
        errors.append("values set must be empty for exists and does not exist")
    if op in ("Gt", "Lt"):
        if len(values) != 1:
            errors.append("for 'Gt', 'Lt' operators, exactly one value is required")
        errors.extend(
            "for 'Gt', 'Lt' operators, the value must be an integer" for v in values if parse_go_int64(v) is None
        )
    errors.extend(f"invalid label value {v!r}" for v in values if not is_label_value(v))
    return (None if errors else Requirement(key, op, values)), errors


# -- matching ------------------------------------------------------------------------------------------
#: (id of a label column's value list, operator, bound) → (that list, verdict per value id). Value ids are
#: append-only, so a cached verdict table only ever needs extending; holding the list pins its id.
_NUMERIC_VERDICTS: dict[tuple[int, str, int], tuple[list[str], np.ndarray]] = {}
_NUMERIC_VERDICTS_MAX = 1024


def _numeric_verdict(value: str, operator: str, bound: int) -> bool:
    """One label value against ``Gt``/``Lt`` ``bound``: Go ``ParseInt`` semantics, a non-integer fails."""
    have = parse_go_int64(value)
    if have is None:
        return False
    return have > bound if operator == "Gt" else have < bound


def label_requirement_matches(req: Requirement, labels: Mapping[str, str]) -> bool:
    """One validated node-selector label requirement against one node's labels (the scalar :func:`_label_mask`)."""
    if req.operator in ("Gt", "Lt"):
        bound = parse_go_int64(req.values[0])
        assert bound is not None  # validated at parse time
        return req.key in labels and _numeric_verdict(labels[req.key], req.operator, bound)
    return req.matches(labels)


def _numeric_verdicts(values: list[str], operator: str, bound: int) -> np.ndarray:
    """Gt/Lt verdict for every interned value of a label column, with Go ``ParseInt`` semantics.

    Judged once per distinct value and cached, so a label holding many distinct numbers (a per-node
    counter, say) is not re-parsed every cycle.
    """
    key = (id(values), operator, bound)
    cached = _NUMERIC_VERDICTS.get(key)
    previous = cached[1] if cached is not None and cached[0] is values else None
    if previous is not None and len(previous) == len(values):
        return previous
    done = 0 if previous is None else len(previous)
    verdicts = np.zeros(len(values), dtype=bool)
    if previous is not None:
        verdicts[:done] = previous
    for value_id in range(done, len(values)):
        verdicts[value_id] = _numeric_verdict(values[value_id], operator, bound)
    if len(_NUMERIC_VERDICTS) >= _NUMERIC_VERDICTS_MAX:
        _NUMERIC_VERDICTS.clear()
    _NUMERIC_VERDICTS[key] = (values, verdicts)
    return verdicts


def _label_mask(table: NodeTable, nodes: np.ndarray, req: Requirement) -> np.ndarray:
    """One validated label requirement over ``nodes`` (``labels.Requirement.Matches``).

    A verdict is computed per interned label value and gathered by the nodes' value ids: one small table
    and one fancy-index, whatever the operator. The table has one extra last entry, for "label absent"
    (id −1 indexes it).
    """
    op = req.operator
    column = table.label_column(req.key)
    if column is None:  # no node has the label
        return np.full(len(nodes), op in ("NotIn", "DoesNotExist"), dtype=bool)
    ids: np.ndarray = column.ids[nodes]
    if op == "Exists":
        return ids >= 0
    if op == "DoesNotExist":
        return ids < 0
    verdicts = np.zeros(len(column.values) + 1, dtype=bool)
    if op in ("In", "NotIn"):
        for value in req.values:
            value_id = column.value_ids.get(value)
            if value_id is not None:
                verdicts[value_id] = True
        if op == "NotIn":
            verdicts = ~verdicts  # absent (last entry) becomes True too, as upstream
    else:  # Gt / Lt: absent stays False
        bound = parse_go_int64(req.values[0])
        assert bound is not None  # validated at parse time
        verdicts[:-1] = _numeric_verdicts(column.values, op, bound)
    judged: np.ndarray = verdicts[ids]
    return judged


def _name_mask(table: NodeTable, nodes: np.ndarray, name: str) -> np.ndarray:
    names = table.names
    return np.fromiter((names[slot] == name for slot in nodes.tolist()), dtype=bool, count=len(nodes))


@dataclass(frozen=True, slots=True)
class FieldRequirement:
    """A matchFields entry: ``metadata.name`` In/NotIn one value."""

    key: str
    operator: str
    value: str

    def mask(self, table: NodeTable, nodes: np.ndarray) -> np.ndarray:
        if self.key == OBJECT_NAME_FIELD:
            hit = _name_mask(table, nodes, self.value)
        else:
            # A node's field set holds only metadata.name; any other field reads as "".
            hit = np.full(len(nodes), self.value == "", dtype=bool)
        return hit if self.operator == "In" else ~hit

    def matches(self, name: str) -> bool:
        """The scalar :meth:`mask`: one node, by name."""
        hit = name == self.value if self.key == OBJECT_NAME_FIELD else self.value == ""
        return hit == (self.operator == "In")


def _field_requirement(expr: Mapping[str, Any]) -> tuple[FieldRequirement | None, list[str]]:
    op = expr.get("operator") or ""
    values = list(expr.get("values") or ())
    if op not in ("In", "NotIn"):
        return None, [f"operator {op!r} not supported for fields"]
    if len(values) != 1:
        return None, ["must have one element"]
    return FieldRequirement(expr.get("key") or "", op, values[0]), []


@dataclass(frozen=True, slots=True)
class NodeSelectorTerm:
    """A parsed ``NodeSelectorTerm``: its label and field requirements ANDed.

    ``labels``/``fields`` are None when the term names none (upstream's nil selectors); ``errors`` holds
    parse errors, with which the term matches nothing.
    """

    labels: tuple[Requirement, ...] | None
    fields: tuple[FieldRequirement, ...] | None
    errors: tuple[str, ...] = ()

    @classmethod
    def parse(cls, raw: Mapping[str, Any]) -> NodeSelectorTerm:
        errors: list[str] = []
        labels: tuple[Requirement, ...] | None = None
        fields: tuple[FieldRequirement, ...] | None = None
        expressions = raw.get("matchExpressions") or ()
        if expressions:
            parsed = []
            for expr in expressions:
                req, errs = _label_requirement(expr)
                errors.extend(errs)
                if req is not None:
                    parsed.append(req)
            labels = tuple(parsed)
        match_fields = raw.get("matchFields") or ()
        if match_fields:
            parsed_fields = []
            for expr in match_fields:
                field_req, errs = _field_requirement(expr)
                errors.extend(errs)
                if field_req is not None:
                    parsed_fields.append(field_req)
            fields = tuple(parsed_fields)
        return cls(labels, fields, tuple(errors))

    @property
    def is_empty(self) -> bool:
        return self.labels is None and self.fields is None

    def matches(self, labels: Mapping[str, str], name: str) -> bool:
        """The scalar :meth:`mask`: one node, by its labels and name."""
        if self.is_empty or self.errors:
            return False
        return all(label_requirement_matches(req, labels) for req in self.labels or ()) and all(
            field_req.matches(name) for field_req in self.fields or ()
        )

    def mask(self, table: NodeTable, nodes: np.ndarray) -> np.ndarray:
        if self.is_empty or self.errors:
            return np.zeros(len(nodes), dtype=bool)
        mask = np.ones(len(nodes), dtype=bool)
        for req in self.labels or ():
            mask &= _label_mask(table, nodes, req)
        for field_req in self.fields or ():
            mask &= field_req.mask(table, nodes)
        return mask


def _is_empty_term(raw: Mapping[str, Any]) -> bool:
    return not raw.get("matchExpressions") and not raw.get("matchFields")


@dataclass(frozen=True, slots=True)
class NodeSelector:
    """A parsed ``v1.NodeSelector``: non-empty terms ORed. No terms → matches nothing."""

    terms: tuple[NodeSelectorTerm, ...]

    @classmethod
    def parse(cls, raw: Mapping[str, Any], *, strict: bool = False) -> NodeSelector:
        """Empty terms are dropped. ``strict`` (upstream ``NewNodeSelector``) raises on a term that does not
        parse; otherwise (``NewLazyErrorNodeSelector``) such a term is kept and simply matches nothing."""
        terms = tuple(NodeSelectorTerm.parse(t) for t in raw.get("nodeSelectorTerms") or () if not _is_empty_term(t))
        if strict:
            errors = [e for term in terms for e in term.errors]
            if errors:
                raise NodeSelectorParseError("; ".join(errors))
        return cls(terms)

    def matches(self, labels: Mapping[str, str], name: str) -> bool:
        """The scalar :meth:`mask`: one node, by its labels and name."""
        return any(term.matches(labels, name) for term in self.terms)

    def mask(self, table: NodeTable, nodes: np.ndarray) -> np.ndarray:
        mask = np.zeros(len(nodes), dtype=bool)
        for term in self.terms:
            mask |= term.mask(table, nodes)
        return mask


@dataclass(frozen=True, slots=True)
class RequiredNodeAffinity:
    """Upstream ``RequiredNodeAffinity``: ``spec.nodeSelector`` (every pair equal) AND the required selector."""

    node_selector: tuple[tuple[str, str], ...]
    #: None when the pod has no ``requiredDuringSchedulingIgnoredDuringExecution``.
    required: NodeSelector | None

    @classmethod
    def from_pod(cls, pod: PodInfo) -> RequiredNodeAffinity:
        """Parsed once per pod and kept in ``pod.memo``."""
        found = pod.memo.get(_MEMO_REQUIRED)
        if found is None:
            raw = required_node_selector_raw(pod)
            found = cls(
                tuple(sorted(pod.node_selector.items())),
                None if raw is None else NodeSelector.parse(raw),
            )
            pod.memo[_MEMO_REQUIRED] = found
        return found

    @property
    def matches_all(self) -> bool:
        return not self.node_selector and self.required is None

    def matches(self, labels: Mapping[str, str], name: str) -> bool:
        """The scalar :meth:`mask` (upstream ``RequiredNodeAffinity.Match``): one node, by labels and name."""
        if any(labels.get(key) != value for key, value in self.node_selector):
            return False
        return self.required is None or self.required.matches(labels, name)

    def mask(self, table: NodeTable, nodes: np.ndarray) -> np.ndarray:
        mask = np.ones(len(nodes), dtype=bool)
        for key, value in self.node_selector:
            column = table.label_column(key)
            value_id = None if column is None else column.value_ids.get(value)
            if column is None or value_id is None:
                return np.zeros(len(nodes), dtype=bool)
            mask &= column.ids[nodes] == value_id
        if self.required is not None:
            mask &= self.required.mask(table, nodes)
        return mask


def required_node_selector_raw(pod: PodInfo) -> Mapping[str, Any] | None:
    """The pod's raw ``nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution`` (None if unset)."""
    node_affinity = pod.affinity.get("nodeAffinity") or {}
    return node_affinity.get("requiredDuringSchedulingIgnoredDuringExecution")


def required_node_affinity_mask(table: NodeTable, nodes: np.ndarray, pod: PodInfo) -> np.ndarray:
    """Bool mask aligned with ``nodes``: the node satisfies the pod's nodeSelector and required node affinity.

    This is upstream ``GetRequiredNodeAffinity(pod).Match(node)`` with parse errors ignored, as both
    NodeAffinity's Filter and PodTopologySpread's node inclusion policy use it.
    """
    affinity = RequiredNodeAffinity.from_pod(pod)
    if affinity.matches_all:
        return np.ones(len(nodes), dtype=bool)
    return affinity.mask(table, nodes)


@dataclass(frozen=True, slots=True)
class PreferredSchedulingTerms:
    """Upstream ``PreferredSchedulingTerms``: (weight, term) pairs; terms of weight 0 or empty are dropped."""

    terms: tuple[tuple[int, NodeSelectorTerm], ...]

    @classmethod
    def parse(cls, raw: Sequence[Mapping[str, Any]] | None) -> PreferredSchedulingTerms:
        """Raises :class:`NodeSelectorParseError` on any term that does not parse (upstream returns an error)."""
        terms: list[tuple[int, NodeSelectorTerm]] = []
        errors: list[str] = []
        for item in raw or ():
            weight = int(item.get("weight") or 0)
            preference = item.get("preference") or {}
            if weight == 0 or _is_empty_term(preference):
                continue
            term = NodeSelectorTerm.parse(preference)
            if term.errors:
                errors.extend(term.errors)
                continue
            terms.append((weight, term))
        if errors:
            raise NodeSelectorParseError("; ".join(errors))
        return cls(tuple(terms))

    def score(self, table: NodeTable, nodes: np.ndarray) -> np.ndarray:
        """int64 aligned with ``nodes``: the sum of the weights of the terms each node matches."""
        total = np.zeros(len(nodes), dtype=np.int64)
        for weight, term in self.terms:
            total += weight * term.mask(table, nodes)
        return total
