"""The hypothesis settings of the property-based tests, chosen by ``KOPF_SCHEDULER_FUZZ`` (default ``ci``).

- ``ci``: what ``make test`` runs. Derandomized (the examples are a function of each test's code, so a run is
  reproducible and never flaky), no example database (nothing written into the tree), no deadline (a cycle's
  time on 2 shared CPUs varies), few examples per test so the whole directory stays well under a minute.
- ``long``: a local hunt for new failures: random seeds, ~25x the examples, failures saved in ``.hypothesis/``
  and replayed first on the next run. ``KOPF_SCHEDULER_FUZZ=long pytest tests/unit/fuzz`` (add
  ``--hypothesis-seed=N`` to repeat one run, ``--hypothesis-show-statistics`` for the time per example).
- ``soak``: what ``make soak`` runs (bench/soak.py): random seeds, ``KOPF_SCHEDULER_FUZZ_EXAMPLES`` examples per
  test (default 50x ``ci``), no example database (a failure is printed with its ``@reproduce_failure`` blob).

A failure prints the shrunk example and, with ``print_blob``, a ``@reproduce_failure`` line; keep each one as an
explicit ``@example`` or a unit test (``test_regressions.py``) before fixing it.
"""

from __future__ import annotations

import os

from hypothesis import HealthCheck, Phase, settings

#: The per-test number of examples of the ``ci`` profile; each test scales it by its cost (``scaled``).
CI_EXAMPLES = 40

settings.register_profile(
    "ci",
    max_examples=CI_EXAMPLES,
    derandomize=True,
    database=None,
    deadline=None,
    print_blob=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    phases=(Phase.explicit, Phase.reuse, Phase.generate, Phase.shrink),
)
settings.register_profile(
    "long",
    max_examples=CI_EXAMPLES * 25,
    deadline=None,
    print_blob=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
settings.register_profile(
    "soak",
    max_examples=int(os.environ.get("KOPF_SCHEDULER_FUZZ_EXAMPLES") or CI_EXAMPLES * 50),
    database=None,
    deadline=None,
    print_blob=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
settings.load_profile(os.environ.get("KOPF_SCHEDULER_FUZZ", "ci"))


def scaled(factor: float) -> settings:
    """The loaded profile with ``factor`` times its examples (a cheap test runs more of them, in either profile)."""
    return settings(max_examples=max(1, int(settings.default.max_examples * factor)))
