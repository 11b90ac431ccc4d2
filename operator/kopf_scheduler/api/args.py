"""Typed plugin args (``pluginConfig[].args``) with upstream's v1 defaults and validation (reference §2, §7.3).

Field names are upstream's JSON names (camelCase aliases) so KubeSchedulerConfiguration snippets paste in;
Python code uses the snake_case attributes. Unknown fields are rejected, as upstream's strict decoding does.

Validation follows kube-scheduler v1.36 (``pkg/scheduler/apis/config/validation/validation_pluginargs.go``)
and so do the messages: each problem is a :class:`FieldError` whose text is what Go's ``field.Error`` prints,
e.g. ``scoringStrategy.resources[0].weight: Invalid value: 101: resource weight of cpu not in valid range
(0, 100]``. Users paste upstream configs and search upstream docs for these texts, so they should match.

Defaulting happens before validation, as upstream's v1 defaulting runs before the internal validation:
a resource weight of 0 becomes 1, an empty resource list becomes ``[cpu, memory]``, an empty
``defaultingType`` becomes ``System``. The semantic checks live in each model's :meth:`ArgsModel.field_errors`
and run as an after-validator, raising one pydantic error of type :data:`KUBE_FIELD_ERRORS` that carries the
upstream-style errors; :func:`validation_field_errors` turns any pydantic ``ValidationError`` of these models
into :class:`FieldError` s under a prefix such as ``pluginConfig[2].args``. Validated with the context
:data:`STRUCTURE_ONLY`, a model checks only what decoding checks (types, unknown fields), not the semantics:
upstream validates NodeResourcesFit's args only in the plugin's constructor, so a plugin that is not enabled
anywhere gets its args decoded but never judged.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, ValidationInfo, field_validator, model_validator
from pydantic.alias_generators import to_camel
from pydantic_core import PydanticCustomError

from kopf_scheduler.go_format import go_duration, go_quote, parse_go_duration

# -- upstream-style field errors ----------------------------------------------------------------------------

#: The pydantic error type our validators raise; its ``ctx["errors"]`` holds ``[field, message]`` pairs.
KUBE_FIELD_ERRORS = "kube_field_errors"


@dataclass(frozen=True, slots=True)
class FieldError:
    """One validation problem: an upstream-style field path and the text Go's ``field.Error`` prints after it.

    ``field`` uses upstream's path syntax (``a.b[0].c``); ``""`` means the object itself.
    """

    field: str
    message: str

    def under(self, prefix: str) -> FieldError:
        """The same error with ``prefix`` (e.g. ``pluginConfig[0].args``) in front of its path."""
        return FieldError(join_path(prefix, self.field), self.message)

    def __str__(self) -> str:
        return f"{self.field}: {self.message}" if self.field else self.message


def join_path(prefix: str, field: str) -> str:
    """Join two upstream-style paths (``a`` + ``b[0]`` → ``a.b[0]``; ``a`` + ``[0]`` → ``a[0]``)."""
    if not prefix:
        return field
    if not field:
        return prefix
    return prefix + field if field.startswith("[") else f"{prefix}.{field}"


def go_value(value: Any) -> str:
    """A bad value as ``field.Error`` prints it: numbers and bools with ``%v``, strings quoted, the rest JSON."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return str(value)
    if isinstance(value, str):
        return go_quote(value)
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"), default=str)


def invalid(field: str, value: Any, detail: str) -> FieldError:
    return FieldError(field, f"Invalid value: {go_value(value)}: {detail}")


def required(field: str, detail: str = "") -> FieldError:
    return FieldError(field, f"Required value: {detail}" if detail else "Required value")


def forbidden(field: str, detail: str) -> FieldError:
    return FieldError(field, f"Forbidden: {detail}")


def duplicate(field: str, value: Any) -> FieldError:
    return FieldError(field, f"Duplicate value: {go_value(value)}")


def not_supported(field: str, value: Any, supported: Iterable[str]) -> FieldError:
    values = ", ".join(json.dumps(v) for v in supported)
    return FieldError(field, f"Unsupported value: {go_value(value)}: supported values: {values}")


def aggregate_message(errors: Sequence[FieldError | str]) -> str:
    """Several errors as Go's ``utilerrors.Aggregate`` prints them: one plainly, more as ``[a, b]`` (deduped)."""
    texts = list(dict.fromkeys(str(e) for e in errors))
    if len(texts) == 1:
        return texts[0]
    return "[" + ", ".join(texts) + "]"


def _raise_if_any(errors: Sequence[FieldError]) -> None:
    if errors:
        raise PydanticCustomError(
            KUBE_FIELD_ERRORS,
            "{message}",
            {"message": aggregate_message(errors), "errors": [[e.field, e.message] for e in errors]},
        )


def validation_field_errors(exc: ValidationError, prefix: str = "") -> list[FieldError]:
    """Every problem of a pydantic ``ValidationError`` of these models as upstream-style errors under ``prefix``.

    Our own semantic checks keep their upstream text; pydantic's structural errors (wrong type, unknown field,
    missing field) get a path in the same syntax and a short upstream-like body.
    """
    result: list[FieldError] = []
    for error in exc.errors(include_url=False):
        base = join_path(prefix, _loc_path(error.get("loc", ())))
        if error["type"] == KUBE_FIELD_ERRORS:
            result.extend(FieldError(join_path(base, field), message) for field, message in error["ctx"]["errors"])
        elif error["type"] == "missing":
            result.append(required(base))
        elif error["type"] == "extra_forbidden":
            result.append(forbidden(base, "unknown field"))
        else:
            raw = error.get("input")
            shown = f"{go_value(raw)}: " if isinstance(raw, str | int | float | bool) or raw is None else ""
            result.append(FieldError(base, f"Invalid value: {shown}{error['msg']}"))
    return result


def explain_validation_error(exc: ValidationError, prefix: str = "") -> str:
    """One message for a pydantic ``ValidationError``, each problem naming its field under ``prefix``."""
    return aggregate_message(validation_field_errors(exc, prefix))


def _loc_path(loc: Sequence[int | str]) -> str:
    path = ""
    for part in loc:
        path = f"{path}[{part}]" if isinstance(part, int) else join_path(path, str(part))
    return path


# -- label-key syntax (apimachinery content.IsLabelKey), used for topologyKey and resource names -----------------

_LABEL_KEY_FMT = "([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]"
_LABEL_KEY_MSG = (
    "must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character"
)
_DNS1123_LABEL_FMT = "[a-z0-9]([-a-z0-9]*[a-z0-9])?"
_DNS1123_SUBDOMAIN_FMT = _DNS1123_LABEL_FMT + r"(\." + _DNS1123_LABEL_FMT + ")*"
_DNS1123_SUBDOMAIN_MSG = (
    "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', "
    "and must start and end with an alphanumeric character"
)
_LABEL_KEY_RE = re.compile(_LABEL_KEY_FMT)
_DNS1123_SUBDOMAIN_RE = re.compile(_DNS1123_SUBDOMAIN_FMT)


def _regex_error(msg: str, fmt: str, *examples: str) -> str:
    # Same punctuation as upstream's RegexError, double spaces included, so the texts compare equal.
    if not examples:
        return f"{msg} (regex used for validation is '{fmt}')"
    return msg + " (e.g. " + " or ".join(f"'{e}', " for e in examples) + f"regex used for validation is '{fmt}')"


def label_key_errors(value: str) -> list[str]:
    """Why ``value`` is not a valid label key (upstream ``IsQualifiedName``); empty when it is valid."""
    errors: list[str] = []
    parts = value.split("/")
    if len(parts) > 2:
        return [
            "a valid label key "
            + _regex_error(_LABEL_KEY_MSG, _LABEL_KEY_FMT, "MyName", "my.name", "123-abc")
            + " with an optional DNS subdomain prefix and '/' (e.g. 'example.com/MyName')"
        ]
    name = parts[-1]
    if len(parts) == 2:
        prefix = parts[0]
        if not prefix:
            errors.append("prefix part must be non-empty")
        else:
            if len(prefix.encode()) > 253:
                errors.append("prefix part must be no more than 253 bytes")
            if not _DNS1123_SUBDOMAIN_RE.fullmatch(prefix):
                errors.append(
                    "prefix part " + _regex_error(_DNS1123_SUBDOMAIN_MSG, _DNS1123_SUBDOMAIN_FMT, "example.com")
                )
    if not name:
        errors.append("name part must be non-empty")
    elif len(name.encode()) > 63:
        errors.append("name part must be no more than 63 bytes")
    if not _LABEL_KEY_RE.fullmatch(name):
        errors.append("name part " + _regex_error(_LABEL_KEY_MSG, _LABEL_KEY_FMT, "MyName", "my.name", "123-abc"))
    return errors


def _label_name_errors(field: str, value: str) -> list[FieldError]:
    return [invalid(field, value, msg) for msg in label_key_errors(value)]


# -- the models ---------------------------------------------------------------------------------------------------


#: Validation context (``model_validate(raw, context=STRUCTURE_ONLY)``): decode the args, skip the semantic checks.
STRUCTURE_ONLY: Mapping[str, bool] = {"structureOnly": True}


def _semantics_wanted(info: ValidationInfo) -> bool:
    return not (isinstance(info.context, Mapping) and info.context.get("structureOnly"))


class ArgsModel(BaseModel):
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="forbid", frozen=True)
    #: Upstream validates these args only in the plugin's constructor: the builder judges them only when the
    #: plugin is needed (and decodes them with :data:`STRUCTURE_ONLY` otherwise).
    judged_only_when_needed: ClassVar[bool] = False

    def field_errors(self) -> list[FieldError]:
        """Upstream's semantic validation of these args, paths relative to the args object. Empty = valid."""
        return []

    @model_validator(mode="after")
    def _validate_semantics(self, info: ValidationInfo) -> ArgsModel:
        if _semantics_wanted(info):
            _raise_if_any(self.field_errors())
        return self


class ResourceSpec(ArgsModel):
    """A resource and its weight in a scoring strategy."""

    name: str = Field(description="Resource name, e.g. cpu, memory or an extended resource.")
    weight: int = Field(default=1, description="Weight of this resource; 0 or unset means 1.")

    @field_validator("weight")
    @classmethod
    def _zero_weight_means_one(cls, weight: int) -> int:
        # v1 defaulting (SetDefaults_NodeResourcesFitArgs / …BalancedAllocationArgs): 0 → 1.
        return 1 if weight == 0 else weight


def _default_resources() -> list[ResourceSpec]:
    return [ResourceSpec(name="cpu", weight=1), ResourceSpec(name="memory", weight=1)]


class UtilizationShapePoint(ArgsModel):
    utilization: int = Field(description="Utilization (x axis), 0..100.")
    score: int = Field(description="Score (y axis), 0..10.")


class RequestedToCapacityRatioParam(ArgsModel):
    shape: list[UtilizationShapePoint] = Field(
        default_factory=list, description="Piecewise-linear function of utilization → score."
    )


#: Upstream's ``supportedScoringStrategyTypes`` (sorted, as ``sets.List`` prints them).
SCORING_STRATEGY_TYPES: tuple[str, ...] = ("LeastAllocated", "MostAllocated", "RequestedToCapacityRatio")


class ScoringStrategy(ArgsModel):
    # A plain string, as upstream's ScoringStrategyType: any value decodes, NodeResourcesFitArgs.field_errors
    # refuses the unsupported ones (with the other problems of the args, as upstream aggregates them).
    type: str = Field(default="LeastAllocated", description="How NodeResourcesFit scores nodes.")
    resources: list[ResourceSpec] = Field(default_factory=_default_resources)
    requested_to_capacity_ratio: RequestedToCapacityRatioParam | None = None

    @field_validator("resources")
    @classmethod
    def _empty_means_default(cls, resources: list[ResourceSpec]) -> list[ResourceSpec]:
        return resources or _default_resources()


#: Upstream's ``MaxCustomPriorityScore``: the largest score of a utilization shape point.
MAX_CUSTOM_PRIORITY_SCORE = 10


def _function_shape_errors(shape: Sequence[UtilizationShapePoint], path: str) -> list[FieldError]:
    """Upstream ``validateFunctionShape``: non-empty, utilization strictly increasing in [0,100], score [0,10]."""
    if not shape:
        return [required(path, "at least one point must be specified")]
    errors: list[FieldError] = []
    for i in range(1, len(shape)):
        if shape[i - 1].utilization >= shape[i].utilization:
            errors.append(
                invalid(f"{path}[{i}].utilization", shape[i].utilization, "values must be sorted in increasing order")
            )
            break  # upstream reports only the first unsorted pair
    for i, point in enumerate(shape):
        if not 0 <= point.utilization <= 100:
            errors.append(invalid(f"{path}[{i}].utilization", point.utilization, "not in valid range [0, 100]"))
        if not 0 <= point.score <= MAX_CUSTOM_PRIORITY_SCORE:
            errors.append(
                invalid(f"{path}[{i}].score", point.score, f"not in valid range [0, {MAX_CUSTOM_PRIORITY_SCORE}]")
            )
    return errors


class NodeResourcesFitArgs(ArgsModel):
    # validation.go registers ValidateNodeResourcesFitArgs under "NodeResourcesFitArgs", a key no pluginConfig
    # entry has: only the plugin's constructor (NewFit) validates these args.
    judged_only_when_needed: ClassVar[bool] = True

    ignored_resources: list[str] = Field(default_factory=list)
    ignored_resource_groups: list[str] = Field(default_factory=list)
    scoring_strategy: ScoringStrategy = Field(default_factory=ScoringStrategy)

    @model_validator(mode="before")
    @classmethod
    def _raw_scoring_strategy(cls, data: Any) -> Any:
        # Upstream defaults the whole strategy only when it is absent: a given strategy keeps its `type`, so a
        # strategy without one has type "" (refused by field_errors). Read on the raw input because the model's
        # own default type would hide the omission.
        if not isinstance(data, Mapping):
            return data
        for key in ("scoringStrategy", "scoring_strategy"):
            if key not in data:
                continue
            raw = data[key]
            if raw is None:  # an explicit null is a nil pointer upstream: defaulted like an absent one
                return {k: v for k, v in data.items() if k != key}
            if isinstance(raw, Mapping) and "type" not in raw:
                return {**data, key: {**raw, "type": ""}}
        return data

    def field_errors(self) -> list[FieldError]:
        # Upstream ValidateNodeResourcesFitArgs, in its order.
        errors: list[FieldError] = []
        for i, resource in enumerate(self.ignored_resources):
            errors += _label_name_errors(f"ignoredResources[{i}]", resource)
        for i, group in enumerate(self.ignored_resource_groups):
            if "/" in group:
                errors.append(invalid(f"ignoredResourceGroups[{i}]", group, "resource group name can't contain '/'"))
            errors += _label_name_errors(f"ignoredResourceGroups[{i}]", group)
        strategy = self.scoring_strategy
        if strategy.type not in SCORING_STRATEGY_TYPES:
            errors.append(not_supported("scoringStrategy.type", strategy.type, SCORING_STRATEGY_TYPES))
        for i, weighted in enumerate(strategy.resources):
            if not 0 < weighted.weight <= 100:
                errors.append(
                    invalid(
                        f"scoringStrategy.resources[{i}].weight",
                        weighted.weight,
                        f"resource weight of {weighted.name} not in valid range (0, 100]",
                    )
                )
        rtcr_path = "scoringStrategy.requestedToCapacityRatio"
        if strategy.type == "RequestedToCapacityRatio":
            if strategy.requested_to_capacity_ratio is None:
                errors.append(required(rtcr_path, "must be specified when type is RequestedToCapacityRatio"))
            else:
                errors += _function_shape_errors(strategy.requested_to_capacity_ratio.shape, f"{rtcr_path}.shape")
        elif strategy.requested_to_capacity_ratio is not None:
            errors.append(forbidden(rtcr_path, "must be nil when type is not RequestedToCapacityRatio"))
        return errors


class NodeResourcesBalancedAllocationArgs(ArgsModel):
    resources: list[ResourceSpec] = Field(default_factory=_default_resources)

    @field_validator("resources")
    @classmethod
    def _empty_means_default(cls, resources: list[ResourceSpec]) -> list[ResourceSpec]:
        return resources or _default_resources()

    def field_errors(self) -> list[FieldError]:
        errors: list[FieldError] = []
        seen: set[str] = set()
        for i, resource in enumerate(self.resources):
            if resource.name in seen:
                errors.append(duplicate(f"resources[{i}].name", resource.name))
            seen.add(resource.name)
            if resource.weight != 1:
                errors.append(invalid(f"resources[{i}].weight", resource.weight, "must be 1"))
        return errors


class NodeAffinityArgs(ArgsModel):
    #: A v1.NodeAffinity applied to every pod of the profile (kept raw: it has the pod API's shape).
    added_affinity: dict[str, Any] | None = None

    def field_errors(self) -> list[FieldError]:
        # Upstream ValidateNodeAffinityArgs: both selectors must parse (nodeaffinity.NewNodeSelector and
        # NewPreferredSchedulingTerms with field paths), whether or not the plugin is enabled.
        affinity = self.added_affinity or {}
        errors: list[FieldError] = []
        required_path = "addedAffinity.requiredDuringSchedulingIgnoredDuringExecution"
        selector = affinity.get("requiredDuringSchedulingIgnoredDuringExecution")
        if isinstance(selector, Mapping):
            for i, term in enumerate(selector.get("nodeSelectorTerms") or ()):
                errors += _node_selector_term_errors(term, f"{required_path}.nodeSelectorTerms[{i}]")
        preferred_path = "addedAffinity.preferredDuringSchedulingIgnoredDuringExecution"
        for i, item in enumerate(affinity.get("preferredDuringSchedulingIgnoredDuringExecution") or ()):
            if isinstance(item, Mapping) and item.get("weight"):
                # Upstream's path for a preference skips ".preference" (it indexes the list and goes on).
                errors += _node_selector_term_errors(item.get("preference") or {}, f"{preferred_path}[{i}]")
        return errors


#: Upstream's ``validSelectorOperators`` (nodeaffinity), in its order.
NODE_SELECTOR_OPERATORS: tuple[str, ...] = ("In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt")
_LABEL_VALUE_FMT = "(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?"
_LABEL_VALUE_MSG = (
    "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must "
    "start and end with an alphanumeric character"
)
_LABEL_VALUE_RE = re.compile(_LABEL_VALUE_FMT)
_GO_INT64_RE = re.compile(r"[+-]?[0-9]+")


def _node_selector_term_errors(term: Any, path: str) -> list[FieldError]:
    """Upstream ``newNodeSelectorTerm``'s parse errors: label requirements, then field requirements."""
    if not isinstance(term, Mapping):
        return []
    errors: list[FieldError] = []
    for j, expr in enumerate(term.get("matchExpressions") or ()):
        errors += _label_requirement_errors(expr, f"{path}.matchExpressions[{j}]")
    for j, expr in enumerate(term.get("matchFields") or ()):
        here = f"{path}.matchFields[{j}]"
        if expr.get("operator") not in ("In", "NotIn"):
            errors.append(not_supported(f"{here}.operator", expr.get("operator", ""), ("In", "NotIn")))
        elif len(expr.get("values") or ()) != 1:
            errors.append(invalid(f"{here}.values", expr.get("values"), "must have one element"))
    return errors


def _label_requirement_errors(expr: Mapping[str, Any], path: str) -> list[FieldError]:
    """Upstream ``labels.NewRequirement`` (after nodeaffinity's operator check), in its order."""
    operator = expr.get("operator", "")
    if operator not in NODE_SELECTOR_OPERATORS:
        return [not_supported(f"{path}.operator", operator, NODE_SELECTOR_OPERATORS)]
    key, values = expr.get("key", ""), expr.get("values")
    errors: list[FieldError] = []
    key_errors = label_key_errors(key)
    if key_errors:
        errors.append(invalid(f"{path}.key", key, "; ".join(key_errors)))
    shown = values  # Go prints a missing list as null, an empty one as []
    values = list(values or ())
    if operator in ("In", "NotIn") and not values:
        errors.append(invalid(f"{path}.values", shown, "for 'in', 'notin' operators, values set can't be empty"))
    elif operator in ("Exists", "DoesNotExist") and values:
        errors.append(invalid(f"{path}.values", shown, "values set must be empty for exists and does not exist"))
    elif operator in ("Gt", "Lt"):
        if len(values) != 1:
            errors.append(invalid(f"{path}.values", shown, "for 'Gt', 'Lt' operators, exactly one value is required"))
        errors += [
            invalid(f"{path}.values[{i}]", v, "for 'Gt', 'Lt' operators, the value must be an integer")
            for i, v in enumerate(values)
            if not _is_go_int64(v)
        ]
    for i, value in enumerate(values):
        value_errors = label_value_errors(value)
        if value_errors:
            errors.append(invalid(f"{path}.values[{i}][{key}]", value, "; ".join(value_errors)))
    return errors


def _is_go_int64(text: Any) -> bool:
    """``strconv.ParseInt(text, 10, 64)`` succeeds."""
    return isinstance(text, str) and bool(_GO_INT64_RE.fullmatch(text)) and -(2**63) <= int(text) < 2**63


def label_value_errors(value: Any) -> list[str]:
    """Upstream ``IsValidLabelValue``."""
    text = str(value)
    errors = ["must be no more than 63 characters"] if len(text) > 63 else []
    if not _LABEL_VALUE_RE.fullmatch(text):
        errors.append(_regex_error(_LABEL_VALUE_MSG, _LABEL_VALUE_FMT, "MyValue", "my_value", "12345"))
    return errors


#: Keys of a v1.TopologySpreadConstraint (strict decoding rejects others).
_TOPOLOGY_SPREAD_CONSTRAINT_KEYS = frozenset(
    {
        "maxSkew",
        "topologyKey",
        "whenUnsatisfiable",
        "labelSelector",
        "minDomains",
        "nodeAffinityPolicy",
        "nodeTaintsPolicy",
        "matchLabelKeys",
    }
)
DEFAULTING_TYPES: tuple[str, ...] = ("System", "List")
#: ``sets.List`` of upstream's supported actions (sorted).
WHEN_UNSATISFIABLE_ACTIONS: tuple[str, ...] = ("DoNotSchedule", "ScheduleAnyway")


class PodTopologySpreadArgs(ArgsModel):
    #: v1.TopologySpreadConstraint objects without labelSelector (raw API shape).
    default_constraints: list[dict[str, Any]] = Field(default_factory=list)
    defaulting_type: Literal["System", "List"] = "System"

    @field_validator("defaulting_type", mode="before")
    @classmethod
    def _check_defaulting_type(cls, value: Any) -> Any:
        if value in ("", None):
            return "System"  # v1 defaulting: empty → System
        if value not in DEFAULTING_TYPES:
            _raise_if_any([not_supported("", value, DEFAULTING_TYPES)])
        return value

    def field_errors(self) -> list[FieldError]:
        # Upstream ValidatePodTopologySpreadArgs, in its order.
        errors: list[FieldError] = []
        if self.defaulting_type == "System" and self.default_constraints:
            errors.append(invalid("defaultingType", self.defaulting_type, "when .defaultConstraints are not empty"))
        seen: set[tuple[Any, Any]] = set()
        for i, constraint in enumerate(self.default_constraints):
            path = f"defaultConstraints[{i}]"
            errors += [
                forbidden(f"{path}.{k}", "unknown field")
                for k in constraint
                if k not in _TOPOLOGY_SPREAD_CONSTRAINT_KEYS
            ]
            max_skew = constraint.get("maxSkew", 0)
            if not isinstance(max_skew, int) or isinstance(max_skew, bool):
                errors.append(invalid(f"{path}.maxSkew", max_skew, "must be an integer"))
            elif max_skew <= 0:
                errors.append(invalid(f"{path}.maxSkew", max_skew, "not in valid range (0, inf)"))
            topology_key = constraint.get("topologyKey", "")
            if not topology_key:
                errors.append(required(f"{path}.topologyKey", "can not be empty"))
            else:
                errors += _label_name_errors(f"{path}.topologyKey", str(topology_key))
            action = constraint.get("whenUnsatisfiable", "")
            if not action:
                errors.append(required(f"{path}.whenUnsatisfiable", "can not be empty"))
            elif action not in WHEN_UNSATISFIABLE_ACTIONS:
                errors.append(not_supported(f"{path}.whenUnsatisfiable", action, WHEN_UNSATISFIABLE_ACTIONS))
            if constraint.get("labelSelector") is not None:
                errors.append(
                    forbidden(
                        f"{path}.labelSelector", "constraint must not define a selector, as they deduced for each pod"
                    )
                )
            key = (topology_key, action)
            if key in seen:
                errors.append(duplicate(path, f"{{{topology_key}, {action}}}"))
            seen.add(key)
        return errors


class InterPodAffinityArgs(ArgsModel):
    hard_pod_affinity_weight: int = 1
    ignore_preferred_terms_of_existing_pods: bool = False

    def field_errors(self) -> list[FieldError]:
        if not 0 <= self.hard_pod_affinity_weight <= 100:
            return [invalid("hardPodAffinityWeight", self.hard_pod_affinity_weight, "not in valid range [0, 100]")]
        return []


class DefaultPreemptionArgs(ArgsModel):
    min_candidate_nodes_percentage: int = 10
    min_candidate_nodes_absolute: int = 100

    def field_errors(self) -> list[FieldError]:
        errors: list[FieldError] = []
        percentage, absolute = self.min_candidate_nodes_percentage, self.min_candidate_nodes_absolute
        if not 0 <= percentage <= 100:
            errors.append(invalid("minCandidateNodesPercentage", percentage, "not in valid range [0, 100]"))
        if absolute < 0:
            errors.append(invalid("minCandidateNodesAbsolute", absolute, "not in valid range [0, inf)"))
        if percentage == 0 and absolute == 0:
            errors.append(
                invalid(
                    "minCandidateNodesPercentage", 0, "cannot be zero at the same time as minCandidateNodesAbsolute"
                )
            )
            errors.append(
                invalid(
                    "minCandidateNodesAbsolute", 0, "cannot be zero at the same time as minCandidateNodesPercentage"
                )
            )
        return errors


class VolumeBindingArgs(ArgsModel):
    bind_timeout_seconds: int = 600
    shape: list[UtilizationShapePoint] | None = None

    def field_errors(self) -> list[FieldError]:
        errors: list[FieldError] = []
        if self.bind_timeout_seconds < 0:
            errors.append(
                invalid(
                    "bindTimeoutSeconds",
                    self.bind_timeout_seconds,
                    "invalid BindTimeoutSeconds, should not be a negative value",
                )
            )
        if self.shape is not None:
            # The StorageCapacityScoring gate is alpha (off) in 1.36, and upstream then refuses any shape. The
            # value prints as Go's JSON of the internal type, whose fields have no json tags (hence the capitals).
            shown = [{"Utilization": p.utilization, "Score": p.score} for p in self.shape]
            errors.append(
                invalid(
                    "shape",
                    shown,
                    "unexpected field `shape`, remove it or turn on the feature gate StorageCapacityScoring",
                )
            )
        return errors


class DynamicResourcesArgs(ArgsModel):
    """Upstream ``DynamicResourcesArgs`` (v1): ``metav1.Duration`` strings, as Go parses and prints them.

    Defaults are 1.36's with the DRASchedulerFilterTimeout, DRADeviceBindingConditions and
    DRAResourceClaimDeviceStatus gates on (all beta, on by default): the gated fields are therefore allowed.
    """

    filter_timeout: str = "10s"
    binding_timeout: str = "10m0s"

    @field_validator("filter_timeout", "binding_timeout")
    @classmethod
    def _go_duration(cls, value: str) -> str:
        return go_duration(parse_go_duration(value))  # metav1.Duration round-trips through time.Duration

    def field_errors(self) -> list[FieldError]:
        errors: list[FieldError] = []
        if parse_go_duration(self.filter_timeout) < 0:
            errors.append(invalid("filterTimeout", self.filter_timeout, "must be zero or positive"))
        if parse_go_duration(self.binding_timeout) < 1:
            errors.append(invalid("bindingTimeout", self.binding_timeout, "must be at least 1 second"))
        return errors


class CoschedulingArgs(ArgsModel):
    """scheduler-plugins' ``CoschedulingArgs`` (v0.34.7): v1 defaults (``SetDefaults_CoschedulingArgs``) and
    ``ValidateCoschedulingArgs``, messages as it words them ("must be greater than 0" even where 0 is allowed)."""

    permit_waiting_time_seconds: int = Field(
        default=60,
        description="How long placed pods wait at Permit for their group when its PodGroup sets no timeout.",
    )
    pod_group_backoff_seconds: int = Field(
        default=0,
        description="How long a group that failed is refused at PreFilter before it is tried again; 0: never.",
    )
    pod_group_reject_percentage: int = Field(
        default=10,
        description="PostFilter rejects the whole group only when more than this percentage of minMember is unplaced.",
    )

    def field_errors(self) -> list[FieldError]:
        errors: list[FieldError] = []
        if self.permit_waiting_time_seconds < 0:
            errors.append(
                invalid("permitWaitingTimeSeconds", self.permit_waiting_time_seconds, "must be greater than 0")
            )
        if self.pod_group_backoff_seconds < 0:
            errors.append(invalid("podGroupBackoffSeconds", self.pod_group_backoff_seconds, "must be greater than 0"))
        if not 0 <= self.pod_group_reject_percentage <= 100:
            errors.append(
                invalid("podGroupRejectPercentage", self.pod_group_reject_percentage, "must be between 0 and 100")
            )
        return errors
