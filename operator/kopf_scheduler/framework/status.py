"""Status: the verdict every extension point returns, with upstream's codes and reason strings.

Upstream's ``framework.Status`` carries a code, a list of human-readable reasons and the name of the plugin
that produced it. Reasons are what end up, counted per node, in the FailedScheduling text, so they are kept
verbatim and in order.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import IntEnum


class Code(IntEnum):
    """Upstream's status codes; the numeric values match ``framework.Code``."""

    SUCCESS = 0
    ERROR = 1
    UNSCHEDULABLE = 2
    UNSCHEDULABLE_AND_UNRESOLVABLE = 3
    WAIT = 4
    SKIP = 5
    PENDING = 6

    @property
    def label(self) -> str:
        """The name upstream prints for this code (metrics labels and logs)."""
        return _CODE_LABELS[self]


_CODE_LABELS = {
    Code.SUCCESS: "Success",
    Code.ERROR: "Error",
    Code.UNSCHEDULABLE: "Unschedulable",
    Code.UNSCHEDULABLE_AND_UNRESOLVABLE: "UnschedulableAndUnresolvable",
    Code.WAIT: "Wait",
    Code.SKIP: "Skip",
    Code.PENDING: "Pending",
}


@dataclass(frozen=True, slots=True)
class Status:
    """The outcome of one plugin call. Immutable, so plugins may share pre-built instances."""

    code: Code = Code.SUCCESS
    reasons: tuple[str, ...] = ()
    plugin: str = ""
    error: BaseException | None = field(default=None, compare=False)

    @classmethod
    def unschedulable(cls, *reasons: str, plugin: str = "", unresolvable: bool = False) -> Status:
        code = Code.UNSCHEDULABLE_AND_UNRESOLVABLE if unresolvable else Code.UNSCHEDULABLE
        return cls(code, tuple(reasons), plugin)

    @classmethod
    def as_error(cls, error: BaseException, *, plugin: str = "") -> Status:
        return cls(Code.ERROR, (str(error),), plugin, error)

    @classmethod
    def skip(cls, *, plugin: str = "") -> Status:
        """A plugin's Skip: one shared instance per plugin (PreFilter and PreScore skip several times a cycle)."""
        status = _SKIPS.get(plugin)
        if status is None:
            status = _SKIPS[plugin] = cls(Code.SKIP, (), plugin)
        return status

    def with_plugin(self, plugin: str) -> Status:
        """The same verdict attributed to ``plugin`` (the runtime stamps it; plugins need not)."""
        if self.plugin == plugin:
            return self
        return Status(self.code, self.reasons, plugin, self.error)

    @property
    def is_success(self) -> bool:
        return self.code is Code.SUCCESS

    @property
    def is_skip(self) -> bool:
        return self.code is Code.SKIP

    @property
    def is_rejected(self) -> bool:
        """Unschedulable or UnschedulableAndUnresolvable: the pod does not fit (not an error)."""
        return self.code in (Code.UNSCHEDULABLE, Code.UNSCHEDULABLE_AND_UNRESOLVABLE)

    @property
    def message(self) -> str:
        """Upstream's ``Status.Message()``: reasons joined with ", "."""
        return ", ".join(self.reasons)


#: The shared success verdict.
SUCCESS = Status()
#: :meth:`Status.skip`'s instances by plugin name.
_SKIPS: dict[str, Status] = {}
