"""The plugin registry: plugin name → plugin class, for in-tree and third-party plugins alike (upstream
``framework/runtime/registry.go``).

The framework knows no plugin: the in-tree ones are written down in :mod:`kopf_scheduler.plugins.registry`
(upstream ``NewInTreeRegistry``), which the composition root merges with the third-party plugins read here.
Those come from installed distributions through the entry-point group ``kopf_scheduler.plugins``; an entry
point's value is the plugin class (``MyPlugin = my_pkg.module:MyPlugin``) and its name must be the plugin's name.

Everything that can go wrong here is a deployment mistake (two plugins with one name, a broken package),
so it fails loudly with :class:`RegistryError`, naming the module or entry point at fault.
"""

from __future__ import annotations

import importlib.metadata
import inspect
from collections.abc import Iterable, Iterator, Mapping

from kopf_scheduler.framework.interface import Plugin

#: The entry-point group third-party distributions register their plugin classes under.
ENTRY_POINT_GROUP = "kopf_scheduler.plugins"


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


__all__ = [
    "ENTRY_POINT_GROUP",
    "Registry",
    "RegistryError",
    "entry_point_registry",
    "plugin_name",
]
