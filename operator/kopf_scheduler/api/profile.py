"""The SchedulerProfile spec and status: one KubeSchedulerConfiguration v1 profile as pydantic models.

``spec`` mirrors upstream's ``KubeSchedulerProfile`` (``k8s.io/kube-scheduler/config/v1``) field for field, with
the same camelCase JSON names, so a profile copied out of a KubeSchedulerConfiguration pastes in unchanged;
only ``schedulerName`` is missing because ``metadata.name`` is the scheduler name. Unknown fields are refused,
as kube-scheduler's strict decoding refuses them.

These models are the source of the CRD's OpenAPI schema (generated in ``crds/``), so they stay *structural*:
optional scalars are plain typed fields (no ``anyOf`` with null), nested objects default to empty objects rather
than null, and ``pluginConfig[].args`` is a free-form object (``x-kubernetes-preserve-unknown-fields``) that the
profile builder decodes into each plugin's typed args. The descriptions are what ``kubectl explain`` prints.

What the schema can check (types, enums, ranges of plain numbers) it checks; everything that needs the plugin
registry or upstream's merging rules (unknown plugins, duplicates, args semantics) is the builder's job
(:mod:`kopf_scheduler.framework.builder`), which reports it with upstream's error texts.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, WithJsonSchema
from pydantic.alias_generators import to_camel

INT32_MIN = -(2**31)
INT32_MAX = 2**31 - 1

#: An optional int32. The explicit schema keeps the CRD structural (pydantic would emit ``anyOf`` with null).
OptionalInt32 = Annotated[
    int | None,
    WithJsonSchema({"type": "integer", "format": "int32", "minimum": INT32_MIN, "maximum": INT32_MAX}),
]
OptionalInt64 = Annotated[int | None, WithJsonSchema({"type": "integer", "format": "int64", "minimum": 0})]
#: Free-form plugin arguments: decoded later into the plugin's args model.
FreeFormObject = Annotated[
    dict[str, Any], WithJsonSchema({"type": "object", "x-kubernetes-preserve-unknown-fields": True})
]


class ApiModel(BaseModel):
    """camelCase on the wire, snake_case in Python, unknown fields refused (kube-scheduler decodes strictly)."""

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="forbid")

    def to_api(self) -> dict[str, Any]:
        """The object as it is written to the API server: camelCase keys, unset optional fields left out."""
        return self.model_dump(by_alias=True, exclude_none=True, mode="json")


# -- spec -------------------------------------------------------------------------------------------------------


class PluginEntry(ApiModel):
    """A plugin named at an extension point (upstream Plugin)."""

    # No minLength: kube-scheduler ignores an empty name in a "disabled" list and refuses it in an "enabled"
    # one as a plugin that does not exist (the builder's text), so the schema must let both through.
    name: str = Field(
        description=(
            'Name of the plugin, as registered (for example "NodeResourcesFit"). In a "disabled" list, "*" stands '
            "for every default plugin of the extension point."
        ),
    )
    weight: OptionalInt32 = Field(
        default=None,
        ge=INT32_MIN,
        le=INT32_MAX,
        description=(
            "Weight of the plugin's score; used only for Score and PlacementScore plugins (in score.enabled, "
            "placementScore.enabled or multiPoint.enabled). Unset or 0 means 1. A weight given at the extension "
            "point takes precedence over the multiPoint weight."
        ),
    )


class PluginSet(ApiModel):
    """Enabled and disabled plugins of one extension point (upstream PluginSet)."""

    enabled: list[PluginEntry] = Field(
        default_factory=list,
        description=(
            "Plugins to enable in addition to the defaults. A default plugin listed here keeps its position and "
            "takes the weight given here; the others run after the defaults, in the order listed."
        ),
    )
    disabled: list[PluginEntry] = Field(
        default_factory=list,
        description='Default plugins to disable; [{name: "*"}] disables all default plugins of this extension point.',
    )


_POINT_DESCRIPTIONS: dict[str, str] = {
    "preEnqueue": "Plugins that must all pass before a pod is added to the active scheduling queue.",
    "queueSort": "The plugin that orders pods in the scheduling queue (exactly one must be enabled).",
    "preFilter": "Plugins that pre-process or check the pod (and the cluster) before filtering.",
    "filter": "Plugins that filter out nodes that cannot run the pod.",
    "postFilter": "Plugins run when no node fits the pod (preemption).",
    "preScore": "Plugins that prepare state for scoring.",
    "score": "Plugins that rank the nodes that passed filtering; weights apply here.",
    "reserve": "Plugins that reserve (and on failure unreserve) resources once a node is chosen.",
    "permit": "Plugins that can approve, reject or delay the binding of a pod.",
    "preBind": "Plugins run before a pod is bound.",
    "bind": "Plugins that bind the pod to its node; the first that does not skip binds.",
    "postBind": "Plugins run after a pod was bound.",
    "placementGenerate": (
        "Plugins that split the nodes into the placements a PodGroup is tried in, in a workload-aware profile's "
        "pod-group cycle (at most one; none: one placement of every node). Upstream 1.36, alpha."
    ),
    "placementScore": (
        "Plugins that rank the placements a PodGroup fits in, in a workload-aware profile's pod-group cycle; "
        "weights apply here. Upstream 1.36, alpha."
    ),
}


def _point_set(point: str) -> Any:
    return Field(default_factory=PluginSet, description=_POINT_DESCRIPTIONS[point])


class Plugins(ApiModel):
    """Plugins per extension point, merged into kube-scheduler's default plugins (upstream Plugins).

    An extension point that is omitted keeps its defaults. The defaults are all given through multiPoint.
    """

    pre_enqueue: PluginSet = _point_set("preEnqueue")
    queue_sort: PluginSet = _point_set("queueSort")
    pre_filter: PluginSet = _point_set("preFilter")
    filter: PluginSet = _point_set("filter")
    post_filter: PluginSet = _point_set("postFilter")
    pre_score: PluginSet = _point_set("preScore")
    score: PluginSet = _point_set("score")
    reserve: PluginSet = _point_set("reserve")
    permit: PluginSet = _point_set("permit")
    pre_bind: PluginSet = _point_set("preBind")
    bind: PluginSet = _point_set("bind")
    post_bind: PluginSet = _point_set("postBind")
    placement_generate: PluginSet = _point_set("placementGenerate")
    placement_score: PluginSet = _point_set("placementScore")
    multi_point: PluginSet = Field(
        default_factory=PluginSet,
        description=(
            "Plugins enabled at every extension point they implement. kube-scheduler's defaults live here. "
            "Precedence: a plugin listed at a specific extension point overrides its multiPoint entry there "
            "(and runs first), then come multiPoint plugins, then the other explicitly listed plugins. "
            "A plugin can still be disabled at a specific extension point."
        ),
    )

    def at(self, point: str) -> PluginSet:
        """The set configured for ``point``, its JSON key (an ``ExtensionPoint`` or ``"multiPoint"``)."""
        found: PluginSet = getattr(self, _FIELD_BY_KEY[point])
        return found


#: JSON key (``ExtensionPoint`` value, ``multiPoint``) → Python field name. Keyed by plain strings so that this
#: data module needs nothing from the framework (``ExtensionPoint`` is a StrEnum and looks these up directly).
_FIELD_BY_KEY: dict[str, str] = {info.alias or name: name for name, info in Plugins.model_fields.items()}


class PluginConfig(ApiModel):
    """Arguments for one plugin (upstream PluginConfig)."""

    # No minLength: kube-scheduler accepts (and ignores) args for a plugin named "" (twice: a duplicate).
    name: str = Field(description="Name of the plugin the arguments are for.")
    args: FreeFormObject = Field(
        default_factory=dict,
        description=(
            "The plugin's arguments, as in KubeSchedulerConfiguration (for example NodeResourcesFitArgs: "
            "scoringStrategy, ignoredResources). Omitted fields take upstream's defaults; unknown fields are "
            "an error. apiVersion and kind may be given and are checked."
        ),
    )


class ExtenderTLSConfig(ApiModel):
    """TLS settings for an HTTPS extender (upstream ExtenderTLSConfig)."""

    insecure: bool = Field(default=False, description="Skip verifying the extender's certificate (testing only).")
    server_name: str = Field(
        default="", description="Server name sent for SNI and checked against the certificate (default: the host)."
    )
    cert_file: str = Field(
        default="",
        description=(
            "Path of a client certificate file inside the scheduler's container (e.g. a mounted Secret); "
            "certData wins when both are given."
        ),
    )
    key_file: str = Field(default="", description="Path of the client key file inside the scheduler's container.")
    ca_file: str = Field(
        default="", description="Path of a CA bundle file inside the scheduler's container (caData wins)."
    )
    cert_data: str = Field(
        default="",
        json_schema_extra={"format": "byte"},
        description="PEM client certificate, base64-encoded (a []byte in upstream's JSON).",
    )
    key_data: str = Field(
        default="", json_schema_extra={"format": "byte"}, description="PEM client key, base64-encoded."
    )
    ca_data: str = Field(
        default="",
        json_schema_extra={"format": "byte"},
        description="PEM CA bundle the extender's certificate must chain to, base64-encoded.",
    )


class ExtenderManagedResource(ApiModel):
    """An extended resource an extender manages (upstream ExtenderManagedResource)."""

    name: str = Field(min_length=1, description='Extended resource name, e.g. "example.com/gpu".')
    ignored_by_scheduler: bool = Field(
        default=False,
        description=(
            "NodeResourcesFit ignores this resource: the names so marked (over all extenders of the profile) "
            "replace NodeResourcesFit's ignoredResources, as upstream does."
        ),
    )


class Extender(ApiModel):
    """An HTTP scheduler extender of this profile (upstream Extender; upstream has one list per kube-scheduler)."""

    url_prefix: str = Field(
        min_length=1, description='URL prefix of the extender; a verb is appended as "<urlPrefix>/<verb>".'
    )
    filter_verb: str = Field(default="", description="Verb of the filter call; empty: the extender does not filter.")
    preempt_verb: str = Field(
        default="",
        description="Verb of the preempt call; empty: the extender does not take part in preemption.",
    )
    prioritize_verb: str = Field(
        default="", description="Verb of the prioritize call; empty: the extender does not score."
    )
    weight: int = Field(
        default=0,
        json_schema_extra={"format": "int64"},
        description=(
            "Multiplier of the extender's 0-10 scores (x10 to the 0-100 range); must be > 0 with prioritizeVerb."
        ),
    )
    bind_verb: str = Field(
        default="",
        description=(
            "Verb of the bind call; when set the extender binds the pods it is interested in (one binder at most)."
        ),
    )
    enable_https: bool = Field(default=False, alias="enableHTTPS", description="Call the extender over HTTPS.")
    tls_config: ExtenderTLSConfig = Field(default_factory=ExtenderTLSConfig, description="TLS settings for HTTPS.")
    http_timeout: str = Field(
        default="",
        description='Timeout of each call, a Go duration ("5s", "500ms"); unset or 0 means 5s.',
    )
    node_cache_capable: bool = Field(
        default=False,
        description="The extender caches nodes itself: calls carry node names only (NodeNames), not full Nodes.",
    )
    managed_resources: list[ExtenderManagedResource] = Field(
        default_factory=list,
        description=(
            "Extended resources the extender manages; when non-empty the extender is only called for pods that "
            "request or limit one of them."
        ),
    )
    ignorable: bool = Field(
        default=False, description="Errors of (or failing to reach) the extender are ignored instead of failing."
    )


class ExplainOptions(ApiModel):
    """What the profile keeps for ``kopf-scheduler explain`` beyond failed attempts (not upstream's)."""

    successes: bool = Field(
        default=False,
        description=(
            "Keep, for each pod this profile binds, the per-plugin scores (raw, normalized, weighted) of the chosen "
            "node and the three best runners-up, for the operator's last explainBoundPods bound pods. Off by "
            "default: it adds a measurable share to each scheduling cycle (docs/benchmarks.md)."
        ),
    )
    annotations: bool = Field(
        default=False,
        description=(
            "Write each pod's last attempt onto the pod as kopf-scheduler.io/ annotations (result, filter-result, "
            "score-result, finalscore-result, selected-node; the kube-scheduler-simulator's shapes, at most 8 KiB), "
            "readable with kubectl and by explain after a failover. A bound pod's go in its Binding (no extra "
            "write); a failure's in one merge patch when it differs from the last. Off by default (docs/explain.md)."
        ),
    )


class SchedulerProfileSpec(ApiModel):
    """One kube-scheduler profile; the SchedulerProfile's metadata.name is its schedulerName."""

    percentage_of_nodes_to_score: OptionalInt32 = Field(
        default=None,
        json_schema_extra={"minimum": 0, "maximum": 100},
        description=(
            "Percentage of all nodes that, once found feasible, stops the search for more feasible nodes "
            "(at least 100 nodes are always looked for, or all). 0 or unset means an adaptive default between 5% "
            "and 50% depending on the cluster size. Range 0-100."
        ),
    )
    plugins: Plugins = Field(
        default_factory=Plugins,
        description=(
            "Plugins to enable or disable per extension point, merged into kube-scheduler's default plugins. "
            "Omitted: exactly kube-scheduler's default profile."
        ),
    )
    plugin_config: list[PluginConfig] = Field(
        default_factory=list,
        description="Arguments per plugin. A plugin without an entry runs with upstream's default arguments.",
    )
    extenders: list[Extender] = Field(
        default_factory=list,
        description=(
            "HTTP scheduler extenders consulted by this profile, in order (upstream configures them per "
            "kube-scheduler, for every profile, in KubeSchedulerConfiguration.extenders)."
        ),
    )
    explain: ExplainOptions = Field(
        default_factory=ExplainOptions,
        description="What this profile's decisions leave for kopf-scheduler explain (failed attempts always).",
    )


# -- status -----------------------------------------------------------------------------------------------------


class Condition(ApiModel):
    """A condition in the shape of metav1.Condition."""

    type: str = Field(min_length=1, description='Condition type, e.g. "Ready".')
    status: Literal["True", "False", "Unknown"] = Field(description="True, False or Unknown.")
    reason: str = Field(default="", description="Machine-readable CamelCase reason for the last transition.")
    message: str = Field(default="", description="Human-readable details; for an invalid profile, the problem.")
    last_transition_time: str = Field(
        default="",
        json_schema_extra={"format": "date-time"},
        description="When the status last changed (RFC 3339).",
    )
    observed_generation: OptionalInt64 = Field(
        default=None, ge=0, description="The metadata.generation the condition was computed from."
    )


class EffectivePlugin(ApiModel):
    """A plugin that runs at an extension point, with its weight at the score extension point."""

    name: str = Field(description="Plugin name.")
    weight: OptionalInt32 = Field(default=None, description="Score weight (set only under score and placementScore).")


def _effective(point: str) -> Any:
    return Field(default_factory=list, description=f"Plugins run at {point}, in order.")


class EffectivePlugins(ApiModel):
    """The plugins that actually run, per extension point, after defaults, merging and multiPoint expansion."""

    pre_enqueue: list[EffectivePlugin] = _effective("preEnqueue")
    queue_sort: list[EffectivePlugin] = _effective("queueSort")
    pre_filter: list[EffectivePlugin] = _effective("preFilter")
    filter: list[EffectivePlugin] = _effective("filter")
    post_filter: list[EffectivePlugin] = _effective("postFilter")
    pre_score: list[EffectivePlugin] = _effective("preScore")
    score: list[EffectivePlugin] = _effective("score")
    reserve: list[EffectivePlugin] = _effective("reserve")
    permit: list[EffectivePlugin] = _effective("permit")
    pre_bind: list[EffectivePlugin] = _effective("preBind")
    bind: list[EffectivePlugin] = _effective("bind")
    post_bind: list[EffectivePlugin] = _effective("postBind")
    placement_generate: list[EffectivePlugin] = _effective("placementGenerate")
    placement_score: list[EffectivePlugin] = _effective("placementScore")

    def at(self, point: str) -> list[EffectivePlugin]:
        """The plugins at ``point`` (an ``ExtensionPoint`` or its JSON key)."""
        found: list[EffectivePlugin] = getattr(self, _FIELD_BY_KEY[point])
        return found


class SchedulerProfileStatus(ApiModel):
    """What the operator made of the spec."""

    observed_generation: OptionalInt64 = Field(
        default=None, ge=0, description="The metadata.generation last processed (valid or not)."
    )
    conditions: list[Condition] = Field(
        default_factory=list,
        description="Ready=True when the current spec is serving; Ready=False with the reason when it is invalid "
        "(the previous valid pipeline, if any, keeps serving).",
    )
    effective_plugins: EffectivePlugins = Field(
        default_factory=EffectivePlugins, description="The plugins of the pipeline that is serving."
    )
    score_plugins: str = Field(
        default="",
        description="Summary of the score plugins and their weights (Plugin:weight, comma-separated), for kubectl get.",
    )
    omitted_default_plugins: list[str] = Field(
        default_factory=list,
        description=(
            "Plugins of kube-scheduler's default profile that this scheduler does not implement and that "
            "therefore do not run."
        ),
    )
