"""kopf's private internals, behind one guarded seam: every hook the operator puts into kopf beyond its public API.

kopf has no setting for any of these, so each replaces (or reads) one name inside kopf's private modules
(``kopf._cogs``, ``kopf._core``) or one default of aiohttp's that kopf relies on. No other module of the package
imports or names a private kopf module (``tests/unit/test_architecture.py``); ``handlers.py`` installs the hooks
from its start-up handler, before kopf starts any watch, and uses kopf's public API otherwise.

The guard: the hooks are tied to kopf's internals as of the tested releases, :data:`TESTED_KOPF` (also the
dependency range in ``pyproject.toml``). :func:`check_kopf_version` refuses to start with any other kopf, and
``tests/unit/test_handlers.py`` drives each hook through kopf's real code and fails when kopf's internals
change shape.
"""

from __future__ import annotations

import contextlib
import importlib.metadata
import logging
import re
import types
from collections.abc import AsyncIterator, Awaitable, Callable, Collection
from typing import Any

import aiohttp
import kopf
import kopf._cogs.clients.api as kopf_api
import kopf._cogs.clients.fetching as kopf_fetching
import kopf._cogs.clients.watching as kopf_watching
import kopf._core.reactor.queueing as kopf_queueing
from kopf._cogs.aiokits import aiotasks, aiotoggles
from kopf._cogs.structs import bodies, references
from kopf._core.intents import handlers as kopf_handlers

from kopf_scheduler import json_codec

#: The kopf releases these hooks are tested with (the pinned one: constraints.txt), as a requirement specifier.
TESTED_KOPF = ">=1.45.2,<1.46"
_TESTED_FROM, _TESTED_BELOW = (1, 45, 2), (1, 46)

#: The logger of kopf's peering ("Pausing operations in favour of ...", "Resuming operations").
PEERING_LOGGER = "kopf._core.engines.peering"


class KopfVersionError(RuntimeError):
    """The installed kopf is not one the hooks are tested with."""


def check_kopf_version(installed: str | None = None) -> None:
    """Raise :class:`KopfVersionError` unless ``installed`` (default: the installed kopf) is in :data:`TESTED_KOPF`.

    The hooks below replace names inside kopf's private modules; another kopf may have moved them, in which case
    the operator would run with kopf's slow paths, or break in ways no test saw. The process checks at start-up.
    """
    version = installed if installed is not None else importlib.metadata.version("kopf")
    if not _in_tested_range(version):
        raise KopfVersionError(
            f"kopf {version} is installed, but kopf-scheduler is tested with kopf{TESTED_KOPF} only: it hooks into "
            f"kopf's internals (kopf_scheduler/kopf_hooks.py); install a kopf in that range"
        )


def _in_tested_range(version: str) -> bool:
    """``version`` (PEP 440) is in :data:`TESTED_KOPF`: a pre-release of its lower bound is not."""
    match = re.match(r"v?(\d+)\.(\d+)(?:\.(\d+))?(.*)", version.strip())
    if match is None:
        return False
    release = tuple(int(number or 0) for number in match.groups()[:3])
    pre_release = re.match(r"[-_.]?(a|b|c|rc|alpha|beta|pre|preview|dev)", match.group(4)) is not None
    return _TESTED_FROM <= release < _TESTED_BELOW and not (pre_release and release == _TESTED_FROM)


def peering_logger() -> logging.Logger:
    """kopf's peering logger (its module's name): the CLI keeps it at the operator's level while it quiets the
    rest of kopf, since its pause and resume lines say which replica is active."""
    return logging.getLogger(PEERING_LOGGER)


def decode_json_with_json_codec() -> None:
    """kopf's watch-stream lines and LIST pages are decoded by :mod:`json_codec` (orjson) from now on.

    kopf decodes each watch line with the module-level ``json.loads`` of ``kopf._cogs.clients.api`` and each
    LIST page with aiohttp's ``ClientResponse.json()``, whose decoder defaults to the standard library's: at
    5000 nodes those decoders cost ≈ 4% of the operator's CPU per scheduled pod and most of kopf's LIST at
    start-up (py-spy, docs/benchmarks.md). kopf has no setting for it, so both names are pointed at
    ``json_codec.loads`` (the same values; what orjson refuses still goes through the standard library).
    Pinned by tests/unit/test_handlers.py, which fails when kopf or aiohttp stops decoding through these names.
    """
    # kopf's module imports ``json`` (unexported) and calls ``json.loads`` on it: a namespace stands in for the module.
    kopf_api.json = types.SimpleNamespace(loads=json_codec.loads)  # type: ignore[attr-defined,assignment]  # see above
    kwdefaults = aiohttp.ClientResponse.json.__kwdefaults__
    assert kwdefaults is not None, "aiohttp's ClientResponse.json() has no keyword defaults"
    kwdefaults["loads"] = json_codec.loads


#: Our reconciling LIST's resourceVersion of a path when it can stand in for kopf's LIST, else None.
VersionForWatch = Callable[[str], Awaitable[str | None]]


def start_watches_from_our_lists(version_for_watch: VersionForWatch) -> None:
    """kopf's watch of a kind we reconcile starts from our reconciling LIST, not from a LIST of its own.

    kopf lists a kind before watching it (at start and after each pause) and hands every listed object to the
    handlers one by one, with its per-object machinery: at 50000 pending pods that took 20 s, three times our
    LIST of the same pods, which the cache needs anyway (``version_for_watch``, the app's
    ``EventHandlers.version_for_watch``, says when ours can stand in; docs/benchmarks.md). kopf has no setting
    for it, so its watcher's LIST (``kopf._cogs.clients.watching.fetching.fetch_objs``) is replaced: where ours
    stands in, kopf gets an empty LIST at our resourceVersion and watches from there; elsewhere (other kinds,
    label or field selectors, a 410 re-list) kopf's own LIST runs. Pinned by tests/unit/test_handlers.py, which
    drives kopf's real watch through it and fails when kopf stops listing through this name.
    """
    kopf_lists = kopf_fetching.fetch_objs

    async def fetch_objs(
        *,
        settings: kopf.OperatorSettings,
        resource: references.Resource,
        namespace: references.Namespace,
        logger: Any,
    ) -> AsyncIterator[tuple[Collection[bodies.RawBody], str]]:
        watching = settings.watching
        selectors = (watching.label_selectors, watching.field_selectors, watching.shard_selectors)
        narrowed = any(selector.collect(resource) for selector in selectors)  # our LIST is of every object
        version = None if narrowed else await version_for_watch(resource.get_url(namespace=namespace))
        if version is not None:
            yield [], version
            return
        async for chunk in kopf_lists(settings=settings, resource=resource, namespace=namespace, logger=logger):
            yield chunk

    # kopf's watching module reads ``fetching.fetch_objs`` (an unexported module global) at each LIST: a namespace
    # stands in for the module.
    kopf_watching.fetching = types.SimpleNamespace(fetch_objs=fetch_objs)  # type: ignore[attr-defined,assignment]  # see above


def tell_pauses_to(follow_pauses: Callable[[aiotoggles.ToggleSet], None]) -> None:
    """``follow_pauses`` learns of kopf's pause toggles, so that the cache follows the cluster while the replica is
    paused (the app's ``SchedulerApp.follow_pauses``, ``standby.py``).

    kopf tells no handler about its pauses; every watcher of a served kind passes the operator's
    ``operator_paused`` toggles to ``streaming_block`` (``kopf._cogs.clients.watching``) before it lists or
    watches, and waits there while the replica is paused, so the first watcher hands them over. Pinned by
    tests/unit/test_handlers.py, which drives kopf's real watcher through it and fails when kopf stops pausing
    through this name.
    """
    kopf_block = kopf_watching.streaming_block

    @contextlib.asynccontextmanager
    async def streaming_block(
        *,
        resource: references.Resource,
        namespace: references.Namespace,
        operator_paused: aiotoggles.ToggleSet | None = None,
    ) -> AsyncIterator[aiotasks.Future]:
        if operator_paused is not None:
            follow_pauses(operator_paused)
        async with kopf_block(resource=resource, namespace=namespace, operator_paused=operator_paused) as waiter:
            yield waiter

    kopf_watching.streaming_block = streaming_block


def deliver_on_event_straight(
    registry: kopf.OperatorRegistry, memo: Any, *, module: str, logger: logging.Logger
) -> None:
    """A kind served by ``module``'s ``@kopf.on.event`` handlers alone gets its events straight from kopf's stream.

    For every object kopf starts a worker task with its own queue, and for every event it recalls the object's
    memory, wraps the body, builds three loggers, detects causes, matches handlers, builds 20-odd kwargs and
    applies an empty patch: ≈ 20 times the CPU of our handler itself, ≈ 0.35–0.5 ms per pod event
    (``python -m bench.event_delivery``; a third of a scheduled pod's CPU at 5000 nodes, docs/benchmarks.md).
    None of it serves an on.event-only kind: nothing is kept per object, no patch is written, a handler's error
    is logged and ignored, and our handlers never await (they hand the event to the cache and the queues), so
    per-object concurrency has nothing to overlap. For such a kind the watcher kopf spawns
    (``kopf._core.reactor.queueing.watcher``) is replaced by a loop over kopf's own watch stream
    (``infinite_watch``: its LISTs, pauses, bookmarks and 410 re-lists as they were) that awaits the kind's
    handlers on each event in stream order, with the keywords they read (``event``, ``type``, ``memo``,
    ``resource``, ``logger``); a failing handler is logged on ``logger``. Every other kind (SchedulerProfiles,
    kopf's peerings, any handler with a filter) keeps kopf's watcher. Pinned by tests/unit/test_handlers.py,
    which drives kopf's real orchestration through it and fails when kopf stops spawning watchers through this
    name.
    """
    kopf_watcher = kopf_queueing.watcher

    async def watcher(
        *,
        namespace: references.Namespace,
        settings: kopf.OperatorSettings,
        resource: references.Resource,
        processor: kopf_queueing.WatchStreamProcessor,
        operator_paused: aiotoggles.ToggleSet | None = None,
        operator_indexed: aiotoggles.ToggleSet | None = None,
        resource_indexed: aiotoggles.Toggle | None = None,
    ) -> None:
        direct = on_event_handlers_only(registry, resource, module=module) if resource_indexed is None else []
        if not direct:
            await kopf_watcher(
                namespace=namespace,
                settings=settings,
                resource=resource,
                processor=processor,
                operator_paused=operator_paused,
                operator_indexed=operator_indexed,
                resource_indexed=resource_indexed,
            )
            return
        stream = kopf_watching.infinite_watch(
            settings=settings, resource=resource, namespace=namespace, operator_paused=operator_paused
        )
        await _deliver(stream, direct, memo=memo, resource=resource, logger=logger)

    kopf_queueing.watcher = watcher


async def _deliver(
    stream: AsyncIterator[Any],
    handlers: list[kopf_handlers.WatchingHandler],
    *,
    memo: Any,
    resource: references.Resource,
    logger: logging.Logger,
) -> None:
    """Each watch event to each handler, in stream order; a failing handler is logged and ignored, as kopf does
    for on.event handlers."""
    async for event in stream:
        if isinstance(event, kopf_watching.Bookmark) or event.get("type") == "BOOKMARK":
            continue
        kind = event.get("type")
        for handler in handlers:
            try:
                await handler.fn(event=event, type=kind, memo=memo, resource=resource, logger=logger)  # type: ignore[call-arg,misc]  # kopf's WatchingFn protocol lists every kwarg kopf passes; ours read these
            except Exception:
                logger.exception("handler %s failed on a %s event of %s; ignored", handler.id, kind, resource)


def on_event_handlers_only(
    registry: kopf.OperatorRegistry, resource: references.Resource, *, module: str
) -> list[kopf_handlers.WatchingHandler]:
    """The kind's watching handlers when they are all ``module``'s, unfiltered, and the kind has no other handlers
    (change, daemon, index, webhook); otherwise none (kopf's machinery serves the kind).

    Reads the registry's per-purpose sub-registries (``_changing``, ``_spawning``, ``_indexing``, ``_webhooks``,
    ``_watching``): kopf offers no public way to ask which handlers a resource has.
    """
    others = (registry._changing, registry._spawning, registry._indexing, registry._webhooks)
    if any(kind.has_handlers(resource=resource) for kind in others):
        return []
    matching = [
        handler
        for handler in registry._watching.get_all_handlers()
        if handler.selector is not None and handler.selector.check(resource)
    ]
    if any(_filtered(handler) or getattr(handler.fn, "__module__", None) != module for handler in matching):
        return []
    return matching


def _filtered(handler: kopf_handlers.WatchingHandler) -> bool:
    return any(getattr(handler, name, None) for name in ("labels", "annotations", "when", "field", "value"))


__all__ = [
    "PEERING_LOGGER",
    "TESTED_KOPF",
    "KopfVersionError",
    "VersionForWatch",
    "check_kopf_version",
    "decode_json_with_json_codec",
    "deliver_on_event_straight",
    "on_event_handlers_only",
    "peering_logger",
    "start_watches_from_our_lists",
    "tell_pauses_to",
]
