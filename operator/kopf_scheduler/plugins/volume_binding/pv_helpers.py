"""The PersistentVolume and PersistentVolumeClaim helpers VolumeBinding's binder uses, as upstream's storage helpers.

Upstream keeps these outside the scheduler: ``component-helpers/storage/volume`` (``pv_helpers.go``:
``GetPersistentVolumeClaimClass``, ``GetPersistentVolumeClass``, ``IsDelayBindingMode``, ``FindMatchingVolume``,
``CheckNodeAffinity``, ``GetBindVolumeToClaim``, the ``pv.kubernetes.io/*`` annotations) and
``component-helpers/storage/ephemeral`` (``VolumeClaimName``, ``VolumeIsForPod``). They are restated here on
the raw API dicts the store (:mod:`kopf_scheduler.state.objects`) holds; nothing here does I/O or mutates its
arguments (``bind_volume_to_claim`` returns a copy, as upstream's deep copy).
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

from kopf_scheduler.api.args import aggregate_message, invalid, label_key_errors, label_value_errors
from kopf_scheduler.go_format import go_quote
from kopf_scheduler.plugins.helper.volumes import (
    BETA_STORAGE_CLASS_ANNOTATION,
    WAIT_FOR_FIRST_CONSUMER,
    claim_class,
    ephemeral_claim_name,
)
from kopf_scheduler.state.node_affinity import NodeSelector
from kopf_scheduler.state.quantity import QuantityError, parse_quantity
from kopf_scheduler.state.selectors import LabelSelector

Obj = Mapping[str, Any]

#: Set by the scheduler on a claim to provision: the node the volume must be reachable from.
ANN_SELECTED_NODE = "volume.kubernetes.io/selected-node"
#: Set by the PV controller once a claim's binding is complete.
ANN_BIND_COMPLETED = "pv.kubernetes.io/bind-completed"
#: Set on a PV the PV controller (or the scheduler, for it) bound, as opposed to one pre-bound by a user.
ANN_BOUND_BY_CONTROLLER = "pv.kubernetes.io/bound-by-controller"
#: The provisioner of classes meant for static PVs only (local volumes).
NOT_SUPPORTED_PROVISIONER = "kubernetes.io/no-provisioner"

CLAIM_LOST = "Lost"
VOLUME_AVAILABLE = "Available"
FILESYSTEM = "Filesystem"


class VolumeError(Exception):
    """An error upstream's helpers return (their texts are kept: they end up in statuses)."""


# -- object access -----------------------------------------------------------------------------------------
def meta(obj: Obj) -> Mapping[str, Any]:
    return obj.get("metadata") or {}


def spec(obj: Obj) -> Mapping[str, Any]:
    return obj.get("spec") or {}


def annotations_of(obj: Obj) -> Mapping[str, str]:
    return meta(obj).get("annotations") or {}


def name_of(obj: Obj) -> str:
    return meta(obj).get("name") or ""


def namespace_of(obj: Obj) -> str:
    return meta(obj).get("namespace") or ""


def claim_key(claim: Obj) -> str:
    """``namespace/name``, how upstream names a claim in errors and its assume cache (``getPVCName``)."""
    return f"{namespace_of(claim)}/{name_of(claim)}"


def resource_version(obj: Obj) -> int:
    """``metadata.resourceVersion`` as the integer upstream's assume cache compares (unset or odd → 0)."""
    try:
        return int(meta(obj).get("resourceVersion") or 0)
    except ValueError:
        return 0


def storage_request(claim: Obj) -> Fraction | None:
    """The claim's ``resources.requests.storage`` (None when it requests none)."""
    raw = ((spec(claim).get("resources") or {}).get("requests") or {}).get("storage")
    return None if raw is None else _quantity(raw)


def storage_capacity(volume: Obj) -> Fraction:
    raw = (spec(volume).get("capacity") or {}).get("storage")
    return Fraction(0) if raw is None else _quantity(raw)


def _quantity(raw: Any) -> Fraction:
    try:
        return parse_quantity(raw)
    except (QuantityError, ValueError, TypeError):
        return Fraction(0)


# -- pods' claims (component-helpers/storage/ephemeral) ----------------------------------------------------
@dataclass(frozen=True, slots=True)
class PodClaim:
    """One of a pod's volumes that is backed by a claim: its claim name and whether it is generic ephemeral."""

    name: str
    ephemeral: bool


def pod_claims(pod_name: str, pod_spec: Mapping[str, Any]) -> Iterator[PodClaim]:
    """The claims a pod's volumes name, in volume order; ephemeral volumes' claims are ``<pod>-<volume>``."""
    for volume in pod_spec.get("volumes") or ():
        source = volume.get("persistentVolumeClaim")
        if source is not None:
            yield PodClaim(source.get("claimName") or "", False)
        elif volume.get("ephemeral") is not None:
            yield PodClaim(ephemeral_claim_name(pod_name, volume), True)


def volume_is_for_pod(pod_namespace: str, pod_name: str, pod_uid: str, claim: Obj) -> str | None:
    """Upstream ``ephemeral.VolumeIsForPod``: None if the pod controls the claim, else the error text."""
    if pod_namespace != namespace_of(claim) or not _controlled_by(claim, pod_uid):
        return f"PVC {claim_key(claim)} was not created for pod {pod_namespace}/{pod_name} (pod is not owner)"
    return None


def _controlled_by(obj: Obj, uid: str) -> bool:
    for ref in meta(obj).get("ownerReferences") or ():
        if ref.get("controller"):
            return bool(ref.get("uid")) and ref.get("uid") == uid
    return False


# -- classes and binding modes -----------------------------------------------------------------------------
def volume_class(volume: Obj) -> str:
    """Upstream ``GetPersistentVolumeClass``: the beta annotation, else ``spec.storageClassName``, else ""."""
    ann = annotations_of(volume)
    if BETA_STORAGE_CLASS_ANNOTATION in ann:
        return ann[BETA_STORAGE_CLASS_ANNOTATION]
    return spec(volume).get("storageClassName") or ""


def is_delay_binding_mode(claim: Obj, storage_class: Obj | None) -> bool:
    """Upstream ``IsDelayBindingMode``: the claim's class binds at first consumer.

    No class name, or a class that does not exist, is not delayed; a class without a binding mode (the API
    server defaults it, so only a hand-made object) is an error.
    """
    class_name = claim_class(claim)
    if not class_name or storage_class is None:
        return False
    mode: str | None = storage_class.get("volumeBindingMode")
    if mode is None:
        raise VolumeError(f"VolumeBindingMode not set for StorageClass {go_quote(class_name)}")
    return mode == WAIT_FOR_FIRST_CONSUMER


def is_claim_fully_bound(claim: Obj) -> bool:
    """Upstream ``isPVCFullyBound``: a volume name and the PV controller's bind-completed annotation."""
    return bool(spec(claim).get("volumeName")) and ANN_BIND_COMPLETED in annotations_of(claim)


# -- node affinity -----------------------------------------------------------------------------------------
def volume_node_selector(volume: Obj) -> NodeSelector | None:
    """The PV's required node affinity, parsed leniently (a bad term matches nothing); None when it has none."""
    required = (spec(volume).get("nodeAffinity") or {}).get("required")
    if required is None:
        return None
    return NodeSelector.parse(required)


#: Parsed PV node affinities of one scheduling cycle, by ``id`` of the PV (kept with it, so the id stays its).
SelectorMemo = dict[int, tuple[Obj, NodeSelector | None]]


def check_node_affinity(volume: Obj, node_labels: Mapping[str, str], memo: SelectorMemo | None = None) -> bool:
    """Upstream ``CheckNodeAffinity``: does the node (by its labels only) satisfy the PV's node affinity?

    Upstream matches a node built from the labels alone, so ``matchFields`` on ``metadata.name`` never match.
    ``memo`` saves re-parsing the same PV for every node of a cycle.
    """
    if memo is None:
        selector = volume_node_selector(volume)
    else:
        held = memo.get(id(volume))
        if held is None:
            held = memo[id(volume)] = (volume, volume_node_selector(volume))
        selector = held[1]
    return selector is None or selector.matches(node_labels, "")


HOSTNAME_LABEL = "kubernetes.io/hostname"


def match_topology_selector_terms(terms: Iterable[Mapping[str, Any]] | None, labels: Mapping[str, str]) -> bool:
    """Upstream ``MatchTopologySelectorTerms``: no terms match everything; else any term whose every
    ``matchLabelExpressions`` entry finds the label with one of its values (a term without entries, or an
    entry without values, matches nothing)."""
    terms = list(terms or ())
    if not terms:
        return True
    for term in terms:
        expressions = term.get("matchLabelExpressions") or ()
        if not expressions or any(not e.get("values") for e in expressions):
            continue
        if all(e.get("key") in labels and labels[e.get("key")] in e.get("values") for e in expressions):
            return True
    return False


# -- matching a claim to a static volume -------------------------------------------------------------------
def is_volume_bound_to_claim(volume: Obj, claim: Obj) -> bool:
    """Upstream ``IsVolumeBoundToClaim``: the PV's claimRef names this claim (and its UID, when set)."""
    ref = spec(volume).get("claimRef")
    if ref is None:
        return False
    if ref.get("name") != name_of(claim) or ref.get("namespace") != namespace_of(claim):
        return False
    uid = ref.get("uid") or ""
    return not uid or uid == (meta(claim).get("uid") or "")


def volume_modes_mismatch(claim: Obj, volume: Obj) -> bool:
    """Upstream ``CheckVolumeModeMismatches`` (an unset mode is Filesystem)."""
    return (spec(claim).get("volumeMode") or FILESYSTEM) != (spec(volume).get("volumeMode") or FILESYSTEM)


def access_modes_match(claim: Obj, volume: Obj) -> bool:
    """Upstream ``CheckAccessModes``: the PV offers every mode the claim asks for."""
    offered = set(spec(volume).get("accessModes") or ())
    return all(mode in offered for mode in spec(claim).get("accessModes") or ())


def _attributes_class_mismatch(claim: Obj, volume: Obj) -> bool:
    # VolumeAttributesClass is GA (on) in 1.36: a claim naming a class needs a PV of that class.
    wanted = spec(claim).get("volumeAttributesClassName")
    return wanted is not None and wanted != (spec(volume).get("volumeAttributesClassName") or "")


#: ``metav1.LabelSelectorAsSelector``'s operators.
_SELECTOR_OPERATORS = frozenset({"In", "NotIn", "Exists", "DoesNotExist"})


def label_selector_error(raw: Mapping[str, Any]) -> str | None:
    """Why upstream ``LabelSelectorAsSelector`` rejects a selector (the first failing requirement: matchLabels
    by key, then matchExpressions in order), or None when it is valid."""
    for key, value in sorted((raw.get("matchLabels") or {}).items()):
        error = _requirement_error(key, "=", [value])
        if error is not None:
            return error
    for expr in raw.get("matchExpressions") or ():
        operator = expr.get("operator") or ""
        if operator not in _SELECTOR_OPERATORS:
            return f"{go_quote(operator)} is not a valid label selector operator"
        error = _requirement_error(expr.get("key") or "", operator, list(expr.get("values") or ()))
        if error is not None:
            return error
    return None


def _requirement_error(key: str, operator: str, values: list[str]) -> str | None:
    """``labels.NewRequirement``'s errors (no field path prefix), aggregated as Go prints them."""
    errors = []
    key_errors = label_key_errors(key)
    if key_errors:
        errors.append(invalid("key", key, "; ".join(key_errors)))
    shown = values or None  # Go copies the values into a nil slice: none print as null
    if operator in ("In", "NotIn") and not values:
        errors.append(invalid("values", shown, "for 'in', 'notin' operators, values set can't be empty"))
    elif operator in ("Exists", "DoesNotExist") and values:
        errors.append(invalid("values", shown, "values set must be empty for exists and does not exist"))
    for index, value in enumerate(values):
        value_errors = label_value_errors(value)
        if value_errors:
            errors.append(invalid(f"values[{index}][{key}]", value, "; ".join(value_errors)))
    return aggregate_message(errors) if errors else None


@dataclass(frozen=True, slots=True)
class Candidate:
    """A PV that passed FindMatchingVolume's node-independent checks for one claim."""

    volume: Obj
    size: Fraction
    #: The PV's claimRef names the claim: it wins at once, on a node that fits it.
    pre_bound: bool


def matching_candidates(claim: Obj, volumes: Iterable[Obj]) -> list[Candidate]:
    """Upstream ``FindMatchingVolume`` (scheduler path: a node given, delayed binding), first half: the PVs it
    could pick for ``claim`` on *some* node, in order. A malformed ``spec.selector`` raises
    :class:`VolumeError` with upstream's text.

    A PV pre-bound to the claim needs only the size, mode and deletion checks (upstream returns it before
    looking at phase, selector, class and access modes); any other PV must pass them all. What depends on
    the node (affinity) or on the pod's other claims (PVs already chosen) is left to
    :func:`pick_matching_volume`, so a cycle judges each PV's node-independent fit once, not once per node.
    """
    requested = storage_request(claim) or Fraction(0)
    requested_class = claim_class(claim)
    raw_selector = spec(claim).get("selector")
    selector = None
    if raw_selector is not None:
        error = label_selector_error(raw_selector)
        if error is not None:
            raise VolumeError(f"error creating internal label selector for claim: {claim_key(claim)}: {error}")
        selector = LabelSelector.parse(raw_selector)
    found: list[Candidate] = []
    for volume in volumes:
        if spec(volume).get("claimRef") is not None and not is_volume_bound_to_claim(volume, claim):
            continue
        size = storage_capacity(volume)
        if size < requested or volume_modes_mismatch(claim, volume) or _attributes_class_mismatch(claim, volume):
            continue
        if meta(volume).get("deletionTimestamp") is not None:
            continue
        if is_volume_bound_to_claim(volume, claim):
            found.append(Candidate(volume, size, True))
            continue
        if (volume.get("status") or {}).get("phase") != VOLUME_AVAILABLE:
            continue
        if selector is not None and not selector.matches(meta(volume).get("labels") or {}):
            continue
        if volume_class(volume) != requested_class or not access_modes_match(claim, volume):
            continue
        found.append(Candidate(volume, size, False))
    return found


def pick_matching_volume(
    candidates: Iterable[Candidate], fits_node: Callable[[Obj], bool], excluded: Mapping[str, Any]
) -> Obj | None:
    """The rest of ``FindMatchingVolume`` for one node: the first pre-bound candidate decides (it or
    nothing, by the node's fit); otherwise the smallest candidate reachable from the node, the first of equal
    sizes. ``fits_node(pv)`` is :func:`check_node_affinity` for the node; candidates named in ``excluded``
    (chosen for another claim of the pod) are skipped."""
    smallest: Candidate | None = None
    for candidate in candidates:
        if name_of(candidate.volume) in excluded:
            continue
        fits = fits_node(candidate.volume)
        if candidate.pre_bound:
            return candidate.volume if fits else None
        if fits and (smallest is None or smallest.size > candidate.size):
            smallest = candidate
    return None if smallest is None else smallest.volume


def claim_reference(claim: Obj) -> dict[str, Any]:
    """Upstream ``reference.GetReference`` of a claim: what a PV's ``claimRef`` holds."""
    claim_meta = meta(claim)
    ref: dict[str, Any] = {
        "kind": "PersistentVolumeClaim",
        "namespace": claim_meta.get("namespace") or "",
        "name": claim_meta.get("name") or "",
        "uid": claim_meta.get("uid") or "",
        "apiVersion": "v1",
        "resourceVersion": claim_meta.get("resourceVersion") or "",
    }
    return {k: v for k, v in ref.items() if v}


def bind_volume_to_claim(volume: Obj, claim: Obj) -> tuple[dict[str, Any], bool]:
    """Upstream ``GetBindVolumeToClaim``: a copy of the PV with ``claimRef`` on the claim and, when the
    scheduler (not a user) made the binding, the bound-by-controller annotation; and whether it changed."""
    set_by_controller = not is_volume_bound_to_claim(volume, claim)
    clone: dict[str, Any] = copy.deepcopy(dict(volume))
    dirty = False
    ref = spec(volume).get("claimRef")
    claim_meta = meta(claim)
    if (
        ref is None
        or ref.get("name") != claim_meta.get("name")
        or ref.get("namespace") != claim_meta.get("namespace")
        or (ref.get("uid") or "") != (claim_meta.get("uid") or "")
    ):
        clone.setdefault("spec", {})["claimRef"] = claim_reference(claim)
        dirty = True
    clone_meta = clone.setdefault("metadata", {})
    if set_by_controller and ANN_BOUND_BY_CONTROLLER not in (clone_meta.get("annotations") or {}):
        clone_meta["annotations"] = {**(clone_meta.get("annotations") or {}), ANN_BOUND_BY_CONTROLLER: "yes"}
        dirty = True
    return clone, dirty


def with_annotation(obj: Obj, key: str, value: str) -> dict[str, Any]:
    """A copy of ``obj`` with one annotation set (upstream deep-copies before ``SetMetaDataAnnotation``)."""
    clone: dict[str, Any] = copy.deepcopy(dict(obj))
    clone_meta = clone.setdefault("metadata", {})
    clone_meta["annotations"] = {**(clone_meta.get("annotations") or {}), key: value}
    return clone
