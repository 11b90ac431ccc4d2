"""The plugin registry: the in-tree list, entry-point plugins (through real importlib.metadata), errors.

Third-party plugins are installed for a test by writing a minimal ``*.dist-info`` (METADATA and
``entry_points.txt``) into a temporary directory on ``sys.path``: exactly what ``pip install`` leaves
behind, so ``importlib.metadata.entry_points`` finds them the way it finds a real installation. The example
package under ``examples/plugins`` is loaded that way (its sources put on ``sys.path``).
"""

from __future__ import annotations

import ast
import importlib
import inspect
import pkgutil
from collections.abc import Callable
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import pytest

import kopf_scheduler.plugins as plugins_package
from kopf_scheduler.algorithm import FitError, schedule_pod
from kopf_scheduler.framework import (
    QUEUE,
    QUEUE_SKIP,
    ActionType,
    ClusterEvent,
    CycleState,
    EventResource,
    ExtensionPoint,
    FilterPlugin,
    Plugin,
    ScorePlugin,
)
from kopf_scheduler.framework.enqueue import events_for_framework
from kopf_scheduler.framework.profile import PluginRef, ResolvedProfile
from kopf_scheduler.framework.registry import (
    ENTRY_POINT_GROUP,
    Registry,
    RegistryError,
    entry_point_registry,
    plugin_name,
)
from kopf_scheduler.framework.runtime import Framework, FrameworkError
from kopf_scheduler.plugins.default_binder import DefaultBinder
from kopf_scheduler.plugins.node_name import NodeName
from kopf_scheduler.plugins.node_unschedulable import NodeUnschedulable
from kopf_scheduler.plugins.queue_sort import PrioritySort
from kopf_scheduler.plugins.registry import IN_TREE_PLUGINS, default_registry, discover, in_tree_registry
from kopf_scheduler.plugins.scheduling_gates import SchedulingGates
from tests.unit.factories import FakeHandle, make_cache, make_node, make_pod, pod_info

EXAMPLE_SRC = Path(__file__).resolve().parents[2] / "examples" / "plugins" / "src"
EXAMPLE_ENTRIES = {
    "RequireNodeLabel": "kopf_scheduler_example.require_node_label:RequireNodeLabel",
    "FewestPods": "kopf_scheduler_example.fewest_pods:FewestPods",
}

Install = Callable[..., Path]


@pytest.fixture
def install(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Install:
    """Install a fake distribution declaring ``entries`` in the plugin entry-point group."""
    monkeypatch.syspath_prepend(str(EXAMPLE_SRC))
    counter = iter(range(1000))

    def _install(entries: dict[str, str], *, name: str = "fake-plugins", group: str = ENTRY_POINT_GROUP) -> Path:
        root = tmp_path / f"site{next(counter)}"
        dist = root / f"{name.replace('-', '_')}-0.1.0.dist-info"
        dist.mkdir(parents=True)
        (dist / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 0.1.0\n")
        lines = "".join(f"{key} = {value}\n" for key, value in entries.items())
        (dist / "entry_points.txt").write_text(f"[{group}]\n{lines}")
        monkeypatch.syspath_prepend(str(root))
        return root

    return _install


# -- in-tree -------------------------------------------------------------------------------------------
def test_in_tree_discovery_finds_the_plugins_by_upstream_name() -> None:
    registry = in_tree_registry()
    expected = {
        "PrioritySort": PrioritySort,
        "SchedulingGates": SchedulingGates,
        "NodeUnschedulable": NodeUnschedulable,
        "NodeName": NodeName,
        "DefaultBinder": DefaultBinder,
    }
    for name, cls in expected.items():
        assert registry[name] is cls
        assert registry.source(name) == f"in-tree module {cls.__module__}"
    # Every registered class really is a plugin named as it is registered.
    for name, cls in registry.items():
        assert issubclass(cls, Plugin)
        assert cls.name == name


def _plugin_classes_defined_under_plugins() -> set[type[Plugin]]:
    """Every plugin class (a Plugin subclass with a ``name``) defined in a module under ``plugins/``."""
    found: set[type[Plugin]] = set()
    for info in pkgutil.walk_packages(plugins_package.__path__, prefix=f"{plugins_package.__name__}."):
        module = importlib.import_module(info.name)
        for value in vars(module).values():
            if inspect.isclass(value) and value.__module__ == module.__name__ and plugin_name(value) is not None:
                found.add(value)
    return found


def test_the_written_in_tree_list_is_every_plugin_class_under_plugins() -> None:
    """A new plugin module cannot be forgotten: IN_TREE_PLUGINS names every plugin class plugins/ defines."""
    assert len(set(IN_TREE_PLUGINS)) == len(IN_TREE_PLUGINS)
    assert set(IN_TREE_PLUGINS) == _plugin_classes_defined_under_plugins()


@pytest.mark.parametrize(
    ("candidate", "expected"),
    [
        pytest.param(NodeName, "NodeName", id="plugin"),
        pytest.param(FilterPlugin, None, id="base-without-name"),
        pytest.param(NodeName(handle=FakeHandle()), None, id="instance"),
        pytest.param(object, None, id="not-a-plugin"),
    ],
)
def test_plugin_name(candidate: object, expected: str | None) -> None:
    assert plugin_name(candidate) == expected


def test_duplicate_names_are_an_error() -> None:
    class Impostor(FilterPlugin):
        name: ClassVar[str] = "NodeName"

    registry = Registry([NodeName])
    with pytest.raises(RegistryError) as info:
        registry.register(Impostor, source="entry point X")
    assert str(info.value) == (
        "plugin name 'NodeName' is registered twice: by kopf_scheduler.plugins.node_name.NodeName and by "
        "entry point X; plugin names must be unique"
    )
    registry.register(NodeName)  # the very same class again is harmless
    assert len(registry) == 1


def test_registering_a_non_plugin_is_an_error() -> None:
    with pytest.raises(RegistryError, match="is not a plugin class"):
        Registry().register(FilterPlugin)


def test_default_registry_is_cached() -> None:
    default_registry.cache_clear()
    first = default_registry()
    assert default_registry() is first
    assert "PrioritySort" in first
    default_registry.cache_clear()


# -- entry points --------------------------------------------------------------------------------------
def test_example_package_loads_through_its_entry_points(install: Install) -> None:
    install(EXAMPLE_ENTRIES, name="kopf-scheduler-example-plugins")
    registry = entry_point_registry()
    assert set(registry) >= {"RequireNodeLabel", "FewestPods"}
    cls = registry["RequireNodeLabel"]
    assert cls.__module__ == "kopf_scheduler_example.require_node_label"
    assert registry.source("RequireNodeLabel") == (
        'entry point "RequireNodeLabel = kopf_scheduler_example.require_node_label:RequireNodeLabel" '
        "(group kopf_scheduler.plugins) from distribution kopf-scheduler-example-plugins"
    )
    # The full registry has both kinds.
    merged = discover()
    assert merged["FewestPods"] is registry["FewestPods"]
    assert merged["NodeName"] is NodeName
    assert cls.extension_points() == frozenset({ExtensionPoint.FILTER})
    assert registry["FewestPods"].extension_points() == frozenset({ExtensionPoint.SCORE})


def test_entry_point_that_fails_to_import_names_itself(install: Install) -> None:
    install({"Broken": "no_such_module_for_kopf_scheduler:Broken"}, name="broken-plugins")
    with pytest.raises(RegistryError) as info:
        entry_point_registry()
    message = str(info.value)
    assert message.startswith(
        'plugin entry point "Broken = no_such_module_for_kopf_scheduler:Broken" (group kopf_scheduler.plugins) '
        "from distribution broken-plugins failed to load: ModuleNotFoundError("
    )


def test_entry_point_to_a_non_plugin(install: Install) -> None:
    install({"Path": "pathlib:Path"})
    with pytest.raises(RegistryError, match=r'entry point "Path = pathlib:Path" .* does not point to a plugin class'):
        entry_point_registry()


def test_entry_point_name_must_be_the_plugin_name(install: Install) -> None:
    install({"FewerPods": EXAMPLE_ENTRIES["FewestPods"]})
    with pytest.raises(RegistryError, match="points to a class named 'FewestPods'; the entry point must be named"):
        entry_point_registry()


def test_third_party_plugin_shadowing_an_in_tree_one_is_an_error(
    install: Install, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    module_dir = tmp_path / "mods"
    module_dir.mkdir()
    (module_dir / "twin_plugin_module.py").write_text(
        "from typing import ClassVar\n"
        "from kopf_scheduler.framework import FilterPlugin\n"
        "class NodeName(FilterPlugin):\n"
        "    name: ClassVar[str] = 'NodeName'\n"
    )
    monkeypatch.syspath_prepend(str(module_dir))
    install({"NodeName": "twin_plugin_module:NodeName"}, name="twin")
    assert entry_point_registry()["NodeName"].__module__ == "twin_plugin_module"
    with pytest.raises(RegistryError, match="plugin name 'NodeName' is registered twice: by in-tree module"):
        discover()


def test_other_groups_are_ignored(install: Install) -> None:
    install({"FewestPods": EXAMPLE_ENTRIES["FewestPods"]}, group="somebody.else")
    assert "FewestPods" not in entry_point_registry()


# -- the example plugins at work -----------------------------------------------------------------------
def example_framework(install: Install, points: dict[ExtensionPoint, tuple[str, ...]], args: dict[str, Any]) -> Any:
    install(EXAMPLE_ENTRIES, name="kopf-scheduler-example-plugins")
    registry = discover()
    cache = make_cache(
        [
            make_node("gpu-a", labels={"pool": "gpu"}),
            make_node("gpu-b", labels={"pool": "gpu"}),
            make_node("cpu-a", labels={"pool": "cpu"}),
            make_node("bare"),
        ],
        [make_pod("p1", node_name="gpu-a"), make_pod("p2", node_name="gpu-a"), make_pod("p3", node_name="cpu-a")],
    )
    plugins = {ExtensionPoint.QUEUE_SORT: ("PrioritySort",), ExtensionPoint.BIND: ("DefaultBinder",), **points}
    profile = ResolvedProfile(
        "examples",
        plugins={point: tuple(PluginRef(n) for n in names) for point, names in plugins.items()},
        plugin_args=args,
    )
    return Framework(profile, registry, FakeHandle(cache)), cache


def test_example_filter_and_score_in_a_cycle(install: Install) -> None:
    framework, cache = example_framework(
        install,
        {ExtensionPoint.FILTER: ("RequireNodeLabel",), ExtensionPoint.SCORE: ("FewestPods",)},
        {"RequireNodeLabel": {"key": "pool", "values": ["gpu"]}},
    )
    result = schedule_pod(framework, CycleState(), pod_info(make_pod()), cache.snapshot())
    # gpu-a runs 2 pods, gpu-b none: normalised (reversed) 0 and 100.
    assert result.suggested_host == "gpu-b"
    assert result.plugin_scores() == {"FewestPods": 100}
    assert result.top_nodes(cache.table.names) == [("gpu-b", 100), ("gpu-a", 0)]


def test_example_filter_reason_in_fit_error(install: Install) -> None:
    framework, cache = example_framework(
        install,
        {ExtensionPoint.FILTER: ("RequireNodeLabel",)},
        {"RequireNodeLabel": {"key": "pool", "values": ["tpu"]}},
    )
    with pytest.raises(FitError) as info:
        schedule_pod(framework, CycleState(), pod_info(make_pod()), cache.snapshot())
    assert info.value.message == "0/4 nodes are available: 4 node(s) didn't have label pool=tpu."


def test_example_filter_any_value_and_missing_args(install: Install) -> None:
    framework, cache = example_framework(
        install, {ExtensionPoint.FILTER: ("RequireNodeLabel",)}, {"RequireNodeLabel": {"key": "pool"}}
    )
    snapshot = cache.snapshot()
    outcome = framework.run_filter_plugins(CycleState(), pod_info(make_pod()), snapshot.order, snapshot)
    assert sorted(cache.table.names[int(s)] for s in outcome.feasible) == ["cpu-a", "gpu-a", "gpu-b"]
    with pytest.raises(FrameworkError, match="initializing plugin 'RequireNodeLabel': RequireNodeLabel needs args"):
        example_framework(install, {ExtensionPoint.FILTER: ("RequireNodeLabel",)}, {})


def test_per_node_score_plugin_is_a_score_plugin(install: Install) -> None:
    install(EXAMPLE_ENTRIES, name="kopf-scheduler-example-plugins")
    cls = entry_point_registry()["FewestPods"]
    assert issubclass(cls, ScorePlugin)
    assert cls.has_normalize
    plugin = cls(handle=FakeHandle())
    assert plugin.normalize_score(CycleState(), pod_info(make_pod()), np.arange(3), np.asarray([2, 1, 0])).tolist() == [
        0,
        50,
        100,
    ]


def test_example_plugin_through_the_profile_builder(install: Install) -> None:
    from kopf_scheduler.api.profile import SchedulerProfileSpec
    from kopf_scheduler.framework.builder import resolve_profile

    install(EXAMPLE_ENTRIES, name="kopf-scheduler-example-plugins")
    registry = discover()
    spec = SchedulerProfileSpec.model_validate(
        {
            "plugins": {"filter": {"enabled": [{"name": "RequireNodeLabel"}]}},
            "pluginConfig": [{"name": "RequireNodeLabel", "args": {"key": "pool", "values": ["gpu"]}}],
        }
    )
    profile = resolve_profile("gpu-pool", spec, registry)
    framework = Framework(profile, registry, FakeHandle())
    plugin = framework.plugins["RequireNodeLabel"]
    assert (plugin.key, plugin.values) == ("pool", ("gpu",))
    assert "RequireNodeLabel" in [name for name, _ in framework.filter_plugins]


def test_example_filter_declares_its_own_queueing_hint(install: Install) -> None:
    framework, _ = example_framework(
        install,
        {ExtensionPoint.FILTER: ("RequireNodeLabel",)},
        {"RequireNodeLabel": {"key": "pool", "values": ["gpu"]}},
    )
    (registration,) = events_for_framework(framework)["RequireNodeLabel"]  # its own list, not every event
    assert registration.event == ClusterEvent(EventResource.NODE, ActionType.ADD | ActionType.UPDATE_NODE_LABEL)
    assert registration.hint is not None
    pod = pod_info(make_pod())
    gpu, cpu = make_node("n", labels={"pool": "gpu"}), make_node("n", labels={"pool": "cpu"})
    assert registration.hint(pod, None, gpu) is QUEUE
    assert registration.hint(pod, None, cpu) is QUEUE_SKIP
    assert registration.hint(pod, cpu, gpu) is QUEUE
    assert registration.hint(pod, gpu, gpu) is QUEUE_SKIP


def test_example_package_imports_only_the_plugin_facing_api() -> None:
    imported = set()
    for source in EXAMPLE_SRC.rglob("*.py"):
        for node in ast.walk(ast.parse(source.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module:
                imported.add(node.module)
            elif isinstance(node, ast.Import):
                imported.update(alias.name for alias in node.names)
    assert {name for name in imported if name.startswith("kopf_scheduler")} == {"kopf_scheduler.framework"}


def test_no_in_tree_plugin_of_the_default_profile_is_workload_aware() -> None:
    """A profile with ``spec: {}`` ignores ``spec.schedulingGroup``, as upstream with its workload gates off."""
    from kopf_scheduler.api.profile import SchedulerProfileSpec
    from kopf_scheduler.framework.builder import resolve_profile

    registry = in_tree_registry()
    framework = Framework(
        resolve_profile("default-scheduler", SchedulerProfileSpec(), registry), registry, FakeHandle(make_cache([]))
    )
    assert framework.workload_aware is False
