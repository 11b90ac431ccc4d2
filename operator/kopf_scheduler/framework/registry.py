"""The plugin registry: plugin name → plugin class, for in-tree and third-party plugins alike.

Upstream's registry is a hand-written map of factories. Ours is discovered, so that adding a plugin is
adding a module: every module of :mod:`kopf_scheduler.plugins` is imported and the :class:`Plugin`
subclasses it *defines* (not re-exports) that carry a ``name`` are registered. Third-party plugins come
from installed distributions through the entry-point group ``kopf_scheduler.plugins``; an entry point's
value is the plugin class (``MyPlugin = my_pkg.module:MyPlugin``) and its name must be the plugin's name.

Everything that can go wrong here is a deployment mistake (two plugins with one name, a broken package),
so it fails loudly with :class:`RegistryError`, naming the module or entry point at fault.
"""

from __future__ import annotations

import functools
import importlib
import importlib.metadata
import inspect
import pkgutil
from collections.abc import Iterable, Iterator, Mapping
from types import ModuleType

from kopf_scheduler.framework.interface import Plugin

#: The entry-point group third-party distributions register their plugin classes under.
ENTRY_POINT_GROUP = "kopf_scheduler.plugins"

#: The package whose modules hold the in-tree plugins.
IN_TREE_PACKAGE = "kopf_scheduler.plugins"


class RegistryError(Exception):
    """A plugin could not be registered: duplicate name, import failure, or not a plugin class."""


class Registry(Mapping[str, type[Plugin]]):
    """Plugin name → plugin class. Read-only once built; :meth:`register` is for building and tests."""

    def __init__(self, plugins: Iterable[type[Plugin]] = ()) -> None:
        self._plugins: dict[str, type[Plugin]] = {}
        #: name → where it came from, so a duplicate can name both sides.
        self._sources: dict[str, str] = {}
        for cls in plugins:
            self.register(cls)

    def register(self, cls: type[Plugin], *, source: str | None = None) -> None:
        """Add ``cls`` under ``cls.name``; a second class with the same name is an error."""
        name = plugin_name(cls)
        if name is None:
            raise RegistryError(f"{_qualname(cls)} is not a plugin class: it needs a Plugin base and a `name`")
        source = source or _qualname(cls)
        existing = self._plugins.get(name)
        if existing is not None:
            if existing is cls:
                return  # the same class reached twice (e.g. a distribution visible on two sys.path entries)
            raise RegistryError(
                f"plugin name {name!r} is registered twice: by {self._sources[name]} and by {source}; "
                "plugin names must be unique"
            )
        self._plugins[name] = cls
        self._sources[name] = source

    def source(self, name: str) -> str:
        """Where the plugin ``name`` was found (module or entry point), for messages and status."""
        return self._sources[name]

    def merged(self, other: Registry) -> Registry:
        """A new registry with the plugins of both (duplicates are an error, as upstream's ``Merge``)."""
        result = Registry()
        for registry in (self, other):
            for name, cls in registry.items():
                result.register(cls, source=registry._sources[name])
        return result

    def __getitem__(self, name: str) -> type[Plugin]:
        return self._plugins[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._plugins)

    def __len__(self) -> int:
        return len(self._plugins)

    def __repr__(self) -> str:
        return f"<Registry {sorted(self._plugins)}>"


def plugin_name(cls: object) -> str | None:
    """The registry name of a plugin class, or None if ``cls`` is not a concrete plugin class."""
    if not (inspect.isclass(cls) and issubclass(cls, Plugin)):
        return None
    name = getattr(cls, "name", None)
    return name if isinstance(name, str) and name else None


def _qualname(obj: object) -> str:
    return f"{getattr(obj, '__module__', '?')}.{getattr(obj, '__qualname__', repr(obj))}"


def plugins_defined_in(module: ModuleType) -> list[type[Plugin]]:
    """Plugin classes defined in ``module`` itself (imported helpers and bases are not re-registered).

    A plugin that is a package (``plugins/dynamic_resources/``) defines its class in a submodule and exports it
    from the package: classes defined anywhere inside the package count as the package's own.
    """
    found = []
    for value in vars(module).values():
        if inspect.isclass(value) and _defined_inside(value, module) and plugin_name(value) is not None:
            found.append(value)
    return found


def _defined_inside(cls: type, module: ModuleType) -> bool:
    if cls.__module__ == module.__name__:
        return True
    return hasattr(module, "__path__") and cls.__module__.startswith(f"{module.__name__}.")


def in_tree_registry(package: str = IN_TREE_PACKAGE) -> Registry:
    """Import every module of ``package`` and register the plugin classes each one defines."""
    registry = Registry()
    root = importlib.import_module(package)
    for info in sorted(pkgutil.iter_modules(root.__path__), key=lambda m: m.name):
        module_name = f"{package}.{info.name}"
        try:
            module = importlib.import_module(module_name)
        except Exception as exc:
            raise RegistryError(f"in-tree plugin module {module_name} failed to import: {exc!r}") from exc
        for cls in plugins_defined_in(module):
            registry.register(cls, source=f"in-tree module {module_name}")
    return registry


def entry_point_registry(group: str = ENTRY_POINT_GROUP) -> Registry:
    """Load every entry point of ``group``; each must name a plugin class whose ``name`` is the entry's name."""
    registry = Registry()
    for entry_point in sorted(importlib.metadata.entry_points(group=group), key=lambda ep: (ep.name, ep.value)):
        label = _describe(entry_point)
        try:
            cls = entry_point.load()
        except Exception as exc:
            raise RegistryError(f"plugin {label} failed to load: {exc!r}") from exc
        name = plugin_name(cls)
        if name is None:
            raise RegistryError(f"plugin {label} does not point to a plugin class (a Plugin subclass with a `name`)")
        if name != entry_point.name:
            raise RegistryError(
                f"plugin {label} points to a class named {name!r}; the entry point must be named after the plugin"
            )
        registry.register(cls, source=label)
    return registry


def _describe(entry_point: importlib.metadata.EntryPoint) -> str:
    dist = getattr(entry_point, "dist", None)
    origin = f" from distribution {dist.name}" if dist is not None else ""
    return f'entry point "{entry_point.name} = {entry_point.value}" (group {entry_point.group}){origin}'


def discover(*, entry_points: bool = True) -> Registry:
    """In-tree plugins plus, unless disabled, the installed third-party ones."""
    registry = in_tree_registry()
    if entry_points:
        registry = registry.merged(entry_point_registry())
    return registry


@functools.cache
def default_registry() -> Registry:
    """The process-wide registry (discovered once; call ``default_registry.cache_clear()`` to rediscover)."""
    return discover()


__all__ = [
    "ENTRY_POINT_GROUP",
    "Registry",
    "RegistryError",
    "default_registry",
    "discover",
    "entry_point_registry",
    "in_tree_registry",
    "plugin_name",
    "plugins_defined_in",
]
