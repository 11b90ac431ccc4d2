"""Label selectors (metav1.LabelSelector) and node selector requirements, parsed once, matched fast.

Pod selectors are matched against pods' label dicts (PodTopologySpread, InterPodAffinity counting).
Node selector requirements are matched against the node table's label columns, all nodes at once,
which is what keeps NodeAffinity and the spread/affinity node-inclusion checks vectorised.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from kopf_scheduler.state.node_table import NodeTable


@dataclass(frozen=True, slots=True)
class Requirement:
    """One ``key op values`` clause. Ops: In, NotIn, Exists, DoesNotExist (+ Gt, Lt for nodes)."""

    key: str
    operator: str
    values: tuple[str, ...] = ()

    def matches(self, labels: Mapping[str, str]) -> bool:
        op = self.operator
        if op == "In":
            return labels.get(self.key) in self.values if self.key in labels else False
        if op == "NotIn":
            return self.key not in labels or labels[self.key] not in self.values
        if op == "Exists":
            return self.key in labels
        if op == "DoesNotExist":
            return self.key not in labels
        if op in ("Gt", "Lt"):
            if self.key not in labels or len(self.values) != 1:
                return False
            try:
                have, want = int(labels[self.key]), int(self.values[0])
            except ValueError:
                return False
            return have > want if op == "Gt" else have < want
        return False


@dataclass(frozen=True, slots=True)
class LabelSelector:
    """A parsed ``metav1.LabelSelector``. ``None`` selectors are represented by :data:`NOTHING`."""

    requirements: tuple[Requirement, ...]
    matches_nothing: bool = False

    @classmethod
    def parse(cls, raw: Mapping[str, Any] | None) -> LabelSelector:
        """Upstream ``LabelSelectorAsSelector``: nil → nothing; ``{}`` → everything."""
        if raw is None:
            return NOTHING
        reqs = [Requirement(k, "In", (v,)) for k, v in sorted((raw.get("matchLabels") or {}).items())]
        for expr in raw.get("matchExpressions") or ():
            reqs.append(Requirement(expr.get("key", ""), expr.get("operator", ""), tuple(expr.get("values") or ())))
        return cls(tuple(reqs))

    @property
    def is_empty(self) -> bool:
        """Matches everything (``{}``)."""
        return not self.requirements and not self.matches_nothing

    def matches(self, labels: Mapping[str, str]) -> bool:
        if self.matches_nothing:
            return False
        return all(r.matches(labels) for r in self.requirements)

    def and_requirements(self, extra: Sequence[Requirement]) -> LabelSelector:
        if self.matches_nothing or not extra:
            return self
        return LabelSelector((*self.requirements, *extra))


#: The selector that matches no object (a nil selector in upstream terms).
NOTHING = LabelSelector((), matches_nothing=True)


def node_requirement_mask(table: NodeTable, nodes: np.ndarray, req: Requirement) -> np.ndarray:
    """Which of ``nodes`` (table slots) satisfy one node selector requirement, vectorised."""
    column = table.label_column(req.key)
    if column is None:
        present = np.zeros(len(nodes), dtype=bool)
        ids = np.full(len(nodes), -1, dtype=np.int32)
    else:
        ids = column.ids[nodes]
        present = ids >= 0
    op = req.operator
    if op == "Exists":
        return present
    if op == "DoesNotExist":
        return ~present
    if op in ("In", "NotIn"):
        wanted = [column.value_ids[v] for v in req.values if column is not None and v in column.value_ids]
        hit = np.isin(ids, np.asarray(wanted, dtype=np.int32)) if wanted else np.zeros(len(nodes), dtype=bool)
        return hit if op == "In" else ~hit
    if op in ("Gt", "Lt"):
        if column is None or len(req.values) != 1:
            return np.zeros(len(nodes), dtype=bool)
        try:
            want = int(req.values[0])
        except ValueError:
            return np.zeros(len(nodes), dtype=bool)
        numbers = column.numeric[nodes]
        with np.errstate(invalid="ignore"):
            result = numbers > want if op == "Gt" else numbers < want
        return result & ~np.isnan(numbers)
    return np.zeros(len(nodes), dtype=bool)


def node_selector_term_mask(table: NodeTable, nodes: np.ndarray, term: Mapping[str, Any]) -> np.ndarray:
    """Upstream ``NodeSelectorTerm`` match: all expressions and fields ANDed; an empty term matches nothing."""
    expressions = term.get("matchExpressions") or ()
    fields = term.get("matchFields") or ()
    if not expressions and not fields:
        return np.zeros(len(nodes), dtype=bool)
    mask = np.ones(len(nodes), dtype=bool)
    for expr in expressions:
        req = Requirement(expr.get("key", ""), expr.get("operator", ""), tuple(expr.get("values") or ()))
        mask &= node_requirement_mask(table, nodes, req)
    for expr in fields:
        mask &= _field_mask(table, nodes, expr)
    return mask


def _field_mask(table: NodeTable, nodes: np.ndarray, expr: Mapping[str, Any]) -> np.ndarray:
    # Only metadata.name is a supported field; In/NotIn only (upstream rejects anything else).
    if expr.get("key") != "metadata.name" or expr.get("operator") not in ("In", "NotIn"):
        return np.zeros(len(nodes), dtype=bool)
    values = set(expr.get("values") or ())
    hit = np.fromiter((table.names[i] in values for i in nodes), dtype=bool, count=len(nodes))
    return hit if expr.get("operator") == "In" else ~hit


def node_selector_mask(table: NodeTable, nodes: np.ndarray, terms: Sequence[Mapping[str, Any]]) -> np.ndarray:
    """A ``NodeSelector``: its terms ORed."""
    mask = np.zeros(len(nodes), dtype=bool)
    for term in terms:
        mask |= node_selector_term_mask(table, nodes, term)
    return mask
