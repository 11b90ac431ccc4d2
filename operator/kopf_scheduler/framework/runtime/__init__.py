"""The framework runtime: one profile's plugins, run at each extension point with upstream's rules.

Upstream's counterpart is the package ``pkg/scheduler/framework/runtime`` (``framework.go``: ``frameworkImpl``).
:class:`Framework` (:mod:`.framework`) constructs a profile's plugins and is made of one runner per group of
extension points: PreFilter and Filter with nominated pods (:mod:`.filtering`), PreScore and Score
(:mod:`.scoring`), Reserve, Permit and the binding cycle (:mod:`.binding`); :mod:`.common` holds what they share.
The runners are bases of the one class, so a call costs what a method call costs: the Filter and Score loops
run per pod over thousands of nodes.

The hot path is vectorised: a Filter plugin judges an array of node-table slots at once and the runtime runs
plugins in profile order on the shrinking set of still-feasible nodes (upstream's first-failing-plugin
attribution, one call per plugin instead of one per node and plugin). The verdict types, the waiting pods and
the nominator protocol have their own modules (``verdicts``, ``waiting_pods``, ``interface``).
"""

from kopf_scheduler.framework.runtime.binding import MAX_PERMIT_TIMEOUT
from kopf_scheduler.framework.runtime.framework import Framework, FrameworkError, SearchStart

__all__ = ["MAX_PERMIT_TIMEOUT", "Framework", "FrameworkError", "SearchStart"]
