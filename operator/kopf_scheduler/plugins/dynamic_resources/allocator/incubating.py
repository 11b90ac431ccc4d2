"""The allocator of one scheduling cycle: its inputs, the CEL selectors it compiled, the requests it read, and
the searches it keeps per node.

Upstream counterpart: ``structured/internal/incubating/allocator_incubating.go`` (``Allocator``, ``NewAllocator``,
``Allocate``); one ``Allocate`` call is :class:`~.allocation.Allocation`.
"""

from __future__ import annotations

import functools
import json
import uuid
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from kopf_scheduler.plugins.dynamic_resources.allocator.allocated import AllocatedState
from kopf_scheduler.plugins.dynamic_resources.allocator.allocation import Allocation
from kopf_scheduler.plugins.dynamic_resources.allocator.common import (
    CompiledSelectorLike,
    CounterSets,
    Features,
    SelectorCompiler,
)
from kopf_scheduler.plugins.dynamic_resources.allocator.requests import (
    Request,
    claim_spec_devices,
    read_request,
    read_subrequests,
    request_class_names,
)
from kopf_scheduler.plugins.dynamic_resources.allocator.slice_index import NodeSearches, SliceIndex


def _answer(results: list[dict[str, Any]] | None) -> Callable[[], list[dict[str, Any]]] | None:
    return None if results is None else (lambda: results)


class Allocator:
    """Upstream ``incubating.Allocator``: built once per scheduling cycle, ``allocate`` runs per node.

    ``index`` (the plugin's, kept between cycles) replaces ``slices``; it must have been built from the
    current slices with the same features."""

    def __init__(
        self,
        *,
        features: Features,
        allocated: AllocatedState,
        classes: Mapping[str, Mapping[str, Any]],
        slices: Sequence[Mapping[str, Any]],
        cel: SelectorCompiler,
        new_share_id: Callable[[], str] | None = None,
        index: SliceIndex | None = None,
    ) -> None:
        self.features = features
        self.allocated = allocated
        self.classes = classes
        self.index = index if index is not None else SliceIndex(slices, features)
        self.cel = cel
        self.new_share_id = new_share_id or (lambda: str(uuid.uuid4()))
        self.available_counters: dict[str, CounterSets] = {}
        self._compiled: dict[str, CompiledSelectorLike | Exception] = {}
        #: The most claims an ``allocate`` call made sure the Python stack has room for.
        self.recursion_room_for = 0
        #: Claims signatures by the identities of the claims (held), see :meth:`_signature`.
        self._signatures: dict[tuple[int, ...], tuple[list[Mapping[str, Any]], str]] = {}
        #: Requests and subrequests read once per cycle, by the identity of the claim's raw request (held).
        self._requests: dict[int, tuple[Mapping[str, Any], Request, list[Request]]] = {}

    def allocate(
        self, node: Mapping[str, Any], claims: Sequence[Mapping[str, Any]], *, deadline: float | None = None
    ) -> list[dict[str, Any]] | None:
        """One AllocationResult per claim, or None when the claims do not fit this node.

        Raises :class:`AllocationError` for problems with a claim or class, :class:`NodeAllocationError` when
        only invalid pools stood in the way and :class:`AllocationTimeout` once ``time.monotonic()`` passes
        ``deadline``.

        A search that succeeded or failed on a node of plain pools is kept (see :class:`NodeSearches`) and
        answers again while the node's devices in use and the claims' requests are the same; the results
        are then rebuilt for the claims given (fresh objects, as a search's)."""
        found = self.allocate_deferred(node, claims, deadline=deadline)
        return None if found is None else found()

    def allocate_deferred(
        self, node: Mapping[str, Any], claims: Sequence[Mapping[str, Any]], *, deadline: float | None = None
    ) -> Callable[[], list[dict[str, Any]]] | None:
        """:meth:`allocate`, with the results behind a call: a kept search builds them only when asked (the
        plugin needs those of the node Reserve picks, and Score those of prioritized lists)."""
        searches = self._searches_for(node, claims)
        if searches is None:
            return _answer(Allocation(self, node, claims, deadline).run())
        kept_searches, key = searches
        if key in kept_searches.found:
            kept = kept_searches.found[key]
            return None if kept is None else functools.partial(kept.results_for, list(claims))
        search = Allocation(self, node, claims, deadline)
        results = search.run()
        if results is None:
            kept_searches.keep(key, None)
        elif not any(result.share_id is not None for found in search.results for result in found):
            kept_searches.keep(key, search)
        return _answer(results)

    def _searches_for(
        self, node: Mapping[str, Any], claims: Sequence[Mapping[str, Any]]
    ) -> tuple[NodeSearches, tuple[str, tuple[int, ...]]] | None:
        """The node's kept searches and this search's key, or None when it cannot be kept: devices shared or
        with consumed capacity in use (their state is more than in use or not), or claims without a signature."""
        if self.allocated.capacity or self.allocated.shared_devices:
            return None
        signature = self._signature(claims)
        if signature is None:
            return None
        self.index.node_devices(node)
        searches = self.index.searches(node)
        if searches is None:
            return None
        return searches, (signature, searches.in_use(self.allocated))

    def _signature(self, claims: Sequence[Mapping[str, Any]]) -> str | None:
        """What the search reads of the claims and their classes, as text (once per list of claims; a new list
        per node, as the extended-resource claim's variants, is not kept)."""
        # The kept entry holds its claims alive, so equal identities are the same objects.
        ids = tuple(map(id, claims))
        kept = self._signatures.get(ids)
        if kept is not None:
            return kept[1]
        if len(self._signatures) >= 2:
            return None
        specs = [claim_spec_devices(claim) for claim in claims]
        class_names = sorted(
            {name for spec in specs for request in spec.get("requests") or () for name in request_class_names(request)}
        )
        classes = {name: self.classes.get(name) for name in class_names}
        try:
            signature = json.dumps([specs, classes], sort_keys=True, default=str)
        except (TypeError, ValueError):
            return None
        self._signatures[ids] = (list(claims), signature)
        return signature

    def request_of(self, raw: Mapping[str, Any]) -> Request:
        return self._parsed(raw)[1]

    def subrequests_of(self, raw: Mapping[str, Any]) -> list[Request]:
        return self._parsed(raw)[2]

    def _parsed(self, raw: Mapping[str, Any]) -> tuple[Mapping[str, Any], Request, list[Request]]:
        cached = self._requests.get(id(raw))
        if cached is None or cached[0] is not raw:
            cached = self._requests[id(raw)] = (raw, read_request(raw), read_subrequests(raw))
        return cached

    def compiled(self, expression: str) -> CompiledSelectorLike | Exception:
        if expression not in self._compiled:
            try:
                self._compiled[expression] = self.cel.compile(expression)
            except Exception as err:  # the error becomes upstream's compile error
                self._compiled[expression] = err
        return self._compiled[expression]
