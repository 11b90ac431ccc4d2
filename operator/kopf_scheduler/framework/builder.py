"""Profile → pipeline builder: a SchedulerProfile spec becomes a :class:`ResolvedProfile`, exactly as upstream.

kube-scheduler turns a ``KubeSchedulerProfile`` into a running framework in three steps, and so do we:

1. **Defaulting and merging** (upstream ``v1/default_plugins.go``): the user's plugin sets are merged into the
   default ones, per extension point and for ``multiPoint``. ``disabled`` names drop defaults (``*`` drops all);
   a user ``enabled`` entry naming a default replaces it *in place* (same position, the user's weight); the
   other user entries follow the defaults in the user's order. All of v1.36's defaults sit in ``multiPoint``.
2. **Config validation** (upstream ``validation.go``, ``validation_pluginargs.go``), every problem reported at
   once: ``percentageOfNodesToScore`` in [0, 100], plugins removed from v1 (AzureDiskLimits, CinderLimits,
   EBSLimits, GCEPDLimits), duplicate ``pluginConfig`` names, and each ``pluginConfig`` entry's args decoded
   strictly into its typed model and validated (:mod:`kopf_scheduler.api.args`); ``extenders`` as upstream's
   ``validateExtenders`` (:func:`validate_extenders`; upstream has one list per scheduler, we one per profile).
3. **Framework construction** (upstream ``runtime/framework.go``), stopping at the first problem as upstream
   does: each explicitly configured extension point in upstream's order (unknown plugin
   ``FilterPlugin "X" does not exist``, wrong interface ``plugin "X" does not extend FilterPlugin plugin``,
   duplicate ``plugin "X" already registered as "FilterPlugin"``); then ``multiPoint`` expansion per extension
   point: skipped where that point disables ``*``; a multiPoint plugin also listed explicitly at the point is an
   *override*; multiPoint plugins disabled at the point are left out; the final order is overrides (explicit
   order), then multiPoint plugins (multiPoint order), then the remaining explicit plugins. Then exactly one
   QueueSort plugin, at least one Bind plugin, at most one PlacementGenerate plugin, and score weights (Score's,
   then PlacementScore's, each on its own): the first of ``score.enabled`` (``placementScore.enabled``) followed by
   ``multiPoint.enabled`` wins (so an explicit score weight beats the multiPoint one), 0 or unset means 1, and
   the weighted maximum must not overflow int64 (in int64 arithmetic, so a negative weight followed by any
   other Score plugin is refused as an overflow, as upstream refuses it).

Every error is a :class:`ProfileError` whose message starts with the offending field, relative to the spec
(``plugins.filter.enabled[2]``, ``pluginConfig[0].args.scoringStrategy.type``), followed by upstream's text.

**Defaults missing from the registry.** A default-list plugin that is missing from the registry (every one of
upstream's defaults is in-tree, but a registry may lack some) is left out of the resolved profile and named in
:attr:`ResolvedProfile.omitted_defaults` (``status.omittedDefaultPlugins`` of a live profile), so a profile
without ``plugins`` still builds and reports honestly what does not run. A plugin the *user* names in an
``enabled`` list must exist: naming an unknown plugin is an error even when it is one of upstream's defaults.

Where we deliberately differ from upstream, for a profile-per-object operator:
- the cross-profile rules (unique schedulerName, the same queueSort everywhere) do not apply: each
  SchedulerProfile has its own queue;
- removed plugins are also refused in ``multiPoint`` (upstream only checks the single points and would
  report ``PreFilterPlugin "EBSLimits" does not exist`` instead).

As upstream, args whose model says ``judged_only_when_needed`` (NodeResourcesFit's) are judged only when the
plugin is needed (named in an ``enabled`` list after merging, upstream ``pluginsNeeded``): upstream's config
validator for NodeResourcesFit is registered under the key ``NodeResourcesFitArgs``, which no plugin has, so only
the plugin's constructor validates them. Such args of a plugin disabled everywhere are decoded (a wrong type or
unknown field is still refused) and otherwise accepted.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ValidationError

from kopf_scheduler.api.args import (
    STRUCTURE_ONLY,
    FieldError,
    NodeResourcesFitArgs,
    aggregate_message,
    duplicate,
    go_value,
    invalid,
    label_key_errors,
    validation_field_errors,
)
from kopf_scheduler.api.profile import EffectivePlugin, EffectivePlugins, Extender, PluginSet, SchedulerProfileSpec
from kopf_scheduler.framework.extender import parse_go_duration
from kopf_scheduler.framework.extension_points import FRAMEWORK_BUILD_ORDER, ExtensionPoint
from kopf_scheduler.framework.interface import MAX_NODE_SCORE, Plugin
from kopf_scheduler.framework.profile import PluginRef, ResolvedProfile
from kopf_scheduler.state.pod_info import is_extended_resource_name

#: The KubeSchedulerConfiguration version our profiles correspond to (quoted in upstream's messages).
V1_API_VERSION = "kubescheduler.config.k8s.io/v1"

#: Plugins removed from the v1 API; naming one is invalid (upstream ``invalidPluginsByVersion``).
REMOVED_PLUGINS: tuple[str, ...] = ("AzureDiskLimits", "CinderLimits", "EBSLimits", "GCEPDLimits")

#: Upstream v1.36's default ``multiPoint`` list with its weights (``getDefaultPlugins`` plus the feature gates
#: that are on by default in 1.36: DynamicResourceAllocation inserts DynamicResources, weight 2, right before
#: DefaultPreemption; NodeDeclaredFeatures (beta in 1.36) is appended last). None = no weight given (→ 1).
DEFAULT_MULTI_POINT: tuple[tuple[str, int | None], ...] = (
    ("SchedulingGates", None),
    ("PrioritySort", None),
    ("NodeUnschedulable", None),
    ("NodeName", None),
    ("TaintToleration", 3),
    ("NodeAffinity", 2),
    ("NodePorts", None),
    ("NodeResourcesFit", 1),
    ("VolumeRestrictions", None),
    ("NodeVolumeLimits", None),
    ("VolumeBinding", None),
    ("VolumeZone", None),
    ("PodTopologySpread", 2),
    ("InterPodAffinity", 2),
    ("DynamicResources", 2),
    ("DefaultPreemption", None),
    ("NodeResourcesBalancedAllocation", 1),
    ("ImageLocality", 1),
    ("DefaultBinder", None),
    ("NodeDeclaredFeatures", None),
)


#: Upstream ``MaxTotalScore`` (math.MaxInt64): the weighted sum of all maximum scores must stay below it.
MAX_TOTAL_SCORE = 2**63 - 1

_MULTI_POINT = "multiPoint"

#: The extension points whose plugins have weights (upstream ``getValidScoreWeights`` for Score and PlacementScore).
WEIGHTED_POINTS: tuple[ExtensionPoint, ...] = (ExtensionPoint.SCORE, ExtensionPoint.PLACEMENT_SCORE)


class ProfileError(ValueError):
    """A profile that cannot be built. ``errors`` are the problems, each naming its field; ``field`` the first."""

    def __init__(self, errors: Sequence[FieldError]) -> None:
        if not errors:
            raise ValueError("ProfileError needs at least one error")
        self.errors: tuple[FieldError, ...] = tuple(errors)
        super().__init__(aggregate_message(self.errors))

    @property
    def field(self) -> str:
        return self.errors[0].field

    @property
    def message(self) -> str:
        return str(self)


@dataclass(frozen=True, slots=True)
class MergedPlugin:
    """A plugin in a merged set: ``field`` is where the user wrote it, None if it came from the defaults."""

    name: str
    weight: int | None
    field: str | None


@dataclass(frozen=True, slots=True)
class MergedPluginSet:
    """One extension point's (or multiPoint's) plugins after merging; ``disabled`` are the user's names."""

    enabled: tuple[MergedPlugin, ...]
    disabled: frozenset[str]


def _type_name(point: ExtensionPoint) -> str:
    """Upstream's Go interface name, as its messages print it (``FilterPlugin``)."""
    return f"{point.interface_name}Plugin"


def merge_plugin_set(defaults: Sequence[MergedPlugin], custom: PluginSet, path: str) -> MergedPluginSet:
    """Upstream ``mergePluginSet``: ``custom`` merged into ``defaults``; ``path`` names the user's set.

    Pure list surgery, no registry: unknown names and duplicates survive it and fail the framework build.
    """
    disabled = frozenset(p.name for p in custom.disabled)
    # The last user entry of a name is the one that replaces a default (a Go map keyed by name).
    replacing: dict[str, int] = {p.name: i for i, p in enumerate(custom.enabled)}
    user = [MergedPlugin(p.name, p.weight, f"{path}.enabled[{i}]") for i, p in enumerate(custom.enabled)]
    merged: list[MergedPlugin] = []
    replaced: set[int] = set()
    if "*" not in disabled:
        for default in defaults:
            if default.name in disabled:
                continue
            index = replacing.get(default.name)
            if index is not None:
                merged.append(user[index])
                replaced.add(index)
            else:
                merged.append(default)
    # The remaining user entries, duplicates included: building the framework rejects those.
    merged += [entry for i, entry in enumerate(user) if i not in replaced]
    return MergedPluginSet(tuple(merged), disabled)


def resolve_profile(
    name: str,
    spec: SchedulerProfileSpec,
    registry: Mapping[str, type[Plugin]],
    *,
    default_plugins: Sequence[tuple[str, int | None]] = DEFAULT_MULTI_POINT,
) -> ResolvedProfile:
    """Build the :class:`ResolvedProfile` for scheduler ``name`` from ``spec``, or raise :class:`ProfileError`.

    ``registry`` maps plugin names to plugin classes (what each implements comes from
    ``cls.extension_points()``, its args type from ``cls.args_model``). ``default_plugins`` is upstream's default
    multiPoint list; tests may pass a small one.
    """
    defaults = tuple(MergedPlugin(plugin, weight, None) for plugin, weight in default_plugins)
    multi_point = merge_plugin_set(defaults, spec.plugins.multi_point, f"plugins.{_MULTI_POINT}")
    points = {point: merge_plugin_set((), spec.plugins.at(point), f"plugins.{point.value}") for point in ExtensionPoint}

    decoded_args = _validate_config(spec, multi_point, points, registry)

    # Defaults we do not implement are left out (and reported), before they could fail the build below.
    left_out = {e.name for e in multi_point.enabled if e.field is None and e.name not in registry}
    multi_point = MergedPluginSet(
        tuple(e for e in multi_point.enabled if e.field is not None or e.name in registry), multi_point.disabled
    )

    plugins = _build_extension_points(multi_point, points, registry)
    _check_required_points(name, plugins)
    _check_one_gang_api(plugins, registry)
    weights = {
        point: _score_weights(points[point].enabled + multi_point.enabled, registry, point) for point in WEIGHTED_POINTS
    }

    resolved: dict[ExtensionPoint, tuple[PluginRef, ...]] = {}
    for point in ExtensionPoint:
        names = plugins.get(point, [])
        if names:
            resolved[point] = tuple(PluginRef(n, weights[point][n] if point in weights else 1) for n in names)

    enabled_names = dict.fromkeys(n for point in ExtensionPoint for n in plugins.get(point, []))
    omitted = tuple(d for d, _ in default_plugins if d in left_out)
    plugin_args: dict[str, BaseModel | dict[str, Any]] = {}
    for plugin in enabled_names:
        if plugin in decoded_args:
            plugin_args[plugin] = decoded_args[plugin]
        else:
            model = _args_model(plugin, registry)
            if model is not None:
                plugin_args[plugin] = model()
    _ignore_extender_resources(spec.extenders, plugin_args)
    return ResolvedProfile(
        scheduler_name=name,
        percentage_of_nodes_to_score=spec.percentage_of_nodes_to_score,
        plugins=resolved,
        plugin_args=plugin_args,
        omitted_defaults=omitted,
    )


def effective_plugins(profile: ResolvedProfile) -> EffectivePlugins:
    """The status view of a resolved profile: plugin names per extension point, weights under score."""
    result = EffectivePlugins()
    for point in ExtensionPoint:
        result.at(point).extend(
            EffectivePlugin(name=ref.name, weight=ref.weight if point in WEIGHTED_POINTS else None)
            for ref in profile.enabled(point)
        )
    return result


# -- step 2: config validation --------------------------------------------------------------------------------------


def _args_model(plugin: str, registry: Mapping[str, type[Plugin]]) -> type[BaseModel] | None:
    """The args type of ``plugin``: the registered class's, else None (raw args)."""
    cls = registry.get(plugin)
    return cls.args_model if cls is not None else None


def _removed(field: str, plugin: str) -> FieldError:
    # The first version is "v1", not the config's group/version: upstream takes it from the core API package's
    # SchemeGroupVersion (its validation.go imports k8s.io/api/core/v1 as v1), so that is what users see.
    detail = f'was invalid in version "v1" (KubeSchedulerConfiguration is version "{V1_API_VERSION}")'
    return invalid(field, plugin, detail)


def _validate_config(
    spec: SchedulerProfileSpec,
    multi_point: MergedPluginSet,
    points: Mapping[ExtensionPoint, MergedPluginSet],
    registry: Mapping[str, type[Plugin]],
) -> dict[str, BaseModel | dict[str, Any]]:
    """Upstream's config validation, all problems at once; returns the decoded args by plugin name."""
    errors: list[FieldError] = []
    percentage = spec.percentage_of_nodes_to_score
    if percentage is not None and not 0 <= percentage <= 100:
        errors.append(invalid("percentageOfNodesToScore", percentage, "not in valid range [0-100]"))

    for merged in (*points.values(), multi_point):
        errors += [_removed(e.field, e.name) for e in merged.enabled if e.field and e.name in REMOVED_PLUGINS]

    errors += validate_extenders(spec.extenders)

    needed = {e.name for merged in (*points.values(), multi_point) for e in merged.enabled}
    decoded: dict[str, BaseModel | dict[str, Any]] = {}
    seen: set[str] = set()
    for index, config in enumerate(spec.plugin_config):
        path = f"pluginConfig[{index}]"
        if config.name in seen:
            errors.append(duplicate(path, config.name))
        seen.add(config.name)
        if config.name in REMOVED_PLUGINS:
            errors.append(_removed(path, config.name))
            continue
        model = _args_model(config.name, registry)
        if model is None:
            # Out-of-tree args without a model go to the plugin as they are (upstream passes them raw).
            decoded.setdefault(config.name, dict(config.args))
            continue
        structure_only = config.name not in needed and getattr(model, "judged_only_when_needed", False)
        args, args_errors = _decode_args(config.name, config.args, model, f"{path}.args", structure_only)
        errors += args_errors
        if args is not None:
            decoded.setdefault(config.name, args)
    if errors:
        raise ProfileError(errors)
    return decoded


def validate_extenders(extenders: Sequence[Extender], path: str = "extenders") -> list[FieldError]:
    """Upstream ``validateExtenders``: a prioritizer needs a positive weight, one binder at most, managed
    resources valid extended resource names and unique across extenders; plus ``httpTimeout`` as a Go duration
    (upstream's decoder refuses a bad one)."""
    errors: list[FieldError] = []
    managed: set[str] = set()
    for index, extender in enumerate(extenders):
        here = f"{path}[{index}]"
        if extender.prioritize_verb and extender.weight <= 0:
            errors.append(invalid(f"{here}.weight", extender.weight, "must have a positive weight applied to it"))
        if extender.http_timeout:
            try:
                parse_go_duration(extender.http_timeout)
            except ValueError as exc:
                errors.append(invalid(f"{here}.httpTimeout", extender.http_timeout, str(exc)))
        for position, resource in enumerate(extender.managed_resources):
            field = f"{here}.managedResources[{position}].name"
            errors += _extended_resource_name_errors(field, resource.name)
            if resource.name in managed:
                errors.append(invalid(field, resource.name, "duplicate extender managed resource name"))
            managed.add(resource.name)
    binders = sum(1 for e in extenders if e.bind_verb)
    if binders > 1:
        errors.append(
            invalid(path, f"found {binders} extenders implementing bind", "only one extender can implement bind")
        )
    return errors


def _extended_resource_name_errors(field: str, name: str) -> list[FieldError]:
    """Upstream ``validateExtendedResourceName``: a qualified name first, then an extended resource name."""
    problems = [invalid(field, name, message) for message in label_key_errors(name)]
    if not problems and not is_extended_resource_name(name):
        problems.append(invalid(field, name, "is an invalid extended resource name"))
    return problems


def _ignore_extender_resources(
    extenders: Sequence[Extender], plugin_args: dict[str, BaseModel | dict[str, Any]]
) -> None:
    """Upstream ``buildExtenders``: resources an extender manages with ``ignoredByScheduler`` *replace* the
    fit plugin's ``ignoredResources`` (NodeResourcesFitArgs; only when that plugin runs: upstream's pluginConfig
    always holds its args, ours only when it is enabled)."""
    ignored = [r.name for e in extenders for r in e.managed_resources if r.ignored_by_scheduler]
    if not ignored:
        return
    for plugin, args in plugin_args.items():
        if isinstance(args, NodeResourcesFitArgs):
            plugin_args[plugin] = args.model_copy(update={"ignored_resources": ignored})


def _decode_args(
    plugin: str, raw: Mapping[str, Any], model: type[BaseModel], path: str, structure_only: bool = False
) -> tuple[BaseModel | None, list[FieldError]]:
    """Strictly decode ``raw`` into ``model`` (apiVersion/kind, as upstream's args carry, are checked and dropped);
    ``structure_only``: decode without the semantic checks (then the args are not returned: nothing runs them)."""
    errors: list[FieldError] = []
    body = dict(raw)
    api_version = body.pop("apiVersion", None)
    kind = body.pop("kind", None)
    if api_version is not None and api_version != V1_API_VERSION:
        errors.append(invalid(f"{path}.apiVersion", api_version, f'must be "{V1_API_VERSION}"'))
    if kind is not None and kind != f"{plugin}Args":
        errors.append(
            invalid(
                f"{path}.kind",
                kind,
                f"args for plugin {plugin} were not of type {plugin}Args.kubescheduler.config.k8s.io",
            )
        )
    try:
        args = model.model_validate(body, context=STRUCTURE_ONLY if structure_only else None)
    except ValidationError as exc:
        return None, errors + validation_field_errors(exc, path)
    return (None, errors) if errors or structure_only else (args, errors)


# -- step 3: framework construction ---------------------------------------------------------------------------------


def _not_found(point: ExtensionPoint, entry: MergedPlugin) -> ProfileError:
    text = f"{_type_name(point)} {go_value(entry.name)} does not exist"
    if any(entry.name == default for default, _ in DEFAULT_MULTI_POINT):
        text += " (a kube-scheduler default plugin that kopf-scheduler does not implement yet)"
    return ProfileError([FieldError(entry.field or f"plugins.{_MULTI_POINT}", text)])


def _already_registered(point: ExtensionPoint, entry: MergedPlugin) -> ProfileError:
    text = f"plugin {go_value(entry.name)} already registered as {go_value(_type_name(point))}"
    return ProfileError([FieldError(entry.field or f"plugins.{_MULTI_POINT}", text)])


def _build_extension_points(
    multi_point: MergedPluginSet,
    points: Mapping[ExtensionPoint, MergedPluginSet],
    registry: Mapping[str, type[Plugin]],
) -> dict[ExtensionPoint, list[str]]:
    """Upstream ``updatePluginList`` per explicit point, then ``expandMultiPointPlugins``; names per point."""
    explicit: dict[ExtensionPoint, list[str]] = {}
    for point in FRAMEWORK_BUILD_ORDER:
        names: list[str] = []
        for entry in points[point].enabled:
            cls = registry.get(entry.name)
            if cls is None:
                raise _not_found(point, entry)
            if point not in cls.extension_points():
                text = f"plugin {go_value(entry.name)} does not extend {_type_name(point)} plugin"
                raise ProfileError([FieldError(entry.field or "", text)])
            if entry.name in names:
                raise _already_registered(point, entry)
            names.append(entry.name)
        explicit[point] = names

    result: dict[ExtensionPoint, list[str]] = {}
    for point in FRAMEWORK_BUILD_ORDER:
        names = explicit[point]
        disabled = points[point].disabled
        if not multi_point.enabled or "*" in disabled:
            result[point] = list(names)
            continue
        overrides: set[str] = set()
        expanded: list[str] = []
        for entry in multi_point.enabled:
            cls = registry.get(entry.name)
            if cls is None:
                raise _not_found(point, entry)
            if point not in cls.extension_points() or entry.name in disabled:
                continue
            if entry.name in names:
                overrides.add(entry.name)  # the explicit entry wins: keep it, at the front
                continue
            if entry.name in expanded:
                raise _already_registered(point, entry)
            expanded.append(entry.name)
        result[point] = [n for n in names if n in overrides] + expanded + [n for n in names if n not in overrides]
    return result


def _check_required_points(name: str, plugins: Mapping[ExtensionPoint, Sequence[str]]) -> None:
    queue_sort = plugins.get(ExtensionPoint.QUEUE_SORT, [])
    if len(queue_sort) != 1:
        text = (
            f"only one queue sort plugin required for profile with scheduler name {go_value(name)}, "
            f"but got {len(queue_sort)}"
        )
        raise ProfileError([FieldError("plugins.queueSort", text)])
    if not plugins.get(ExtensionPoint.BIND):
        text = f"at least one bind plugin is needed for profile with scheduler name {go_value(name)}"
        raise ProfileError([FieldError("plugins.bind", text)])
    if len(plugins.get(ExtensionPoint.PLACEMENT_GENERATE, [])) > 1:
        text = f"at most one placement generate plugin is allowed for profile with scheduler name {go_value(name)}"
        raise ProfileError([FieldError("plugins.placementGenerate", text)])


def _check_one_gang_api(plugins: Mapping[ExtensionPoint, Sequence[str]], registry: Mapping[str, type[Plugin]]) -> None:
    """Not upstream's (one scheduler never hosts both gang APIs): plugins of two gang APIs in one profile would
    hold a pod that names groups of both in two gang machineries at once, so the profile is refused."""
    by_api: dict[str, list[str]] = {}
    for name in dict.fromkeys(n for names in plugins.values() for n in names):
        cls = registry.get(name)
        if cls is not None and cls.gang_api:
            by_api.setdefault(cls.gang_api, []).append(name)
    if len(by_api) > 1:
        names = sorted(n for group in by_api.values() for n in group)
        apis = " and ".join(sorted(by_api))
        text = f"a profile may enable the plugins of one gang API only, not of {apis}"
        raise ProfileError([invalid("plugins", names, text)])


def _score_weights(
    entries: Sequence[MergedPlugin], registry: Mapping[str, type[Plugin]], point: ExtensionPoint
) -> dict[str, int]:
    """Upstream ``getValidScoreWeights`` over ``<point>.enabled`` then ``multiPoint.enabled`` for the plugins that
    implement ``point`` (Score, then PlacementScore, each checked on its own): first one wins."""
    weights: dict[str, int] = {}
    total = 0
    for entry in entries:
        cls = registry.get(entry.name)
        if cls is None or point not in cls.extension_points() or entry.name in weights:
            continue
        weight = entry.weight or 1  # 0 is not a way to disable a plugin: it means the default weight 1
        # Upstream's total is an int64 and its bound wraps: after a negative weight the total is below 0, the
        # bound MaxTotalScore - total overflows to a negative number and every later Score plugin trips the
        # check. So a negative weight is refused unless no Score plugin follows it (kube-scheduler v1.36.3).
        if weight * MAX_NODE_SCORE > _wrap_int64(MAX_TOTAL_SCORE - total):
            raise ProfileError([FieldError(f"plugins.{point.value}", "total score of Score plugins could overflow")])
        weights[entry.name] = weight
        total = _wrap_int64(total + weight * MAX_NODE_SCORE)
    return weights


def _wrap_int64(value: int) -> int:
    """``value`` as Go's int64 arithmetic leaves it: wrapped into [-2**63, 2**63)."""
    return (value + 2**63) % 2**64 - 2**63
