"""Property-based tests (hypothesis) of the cycle, the queue, the cache and the profiles (issue 39, "Fuzzing").

What is generated (``strategies.py``): pods with every field a plugin reads, nodes, SchedulerProfile specs valid
and invalid, and orders of cluster events; what must hold whatever they are (``invariants.py``) is said in each
test module. The settings profiles (``conftest.py``): ``ci`` by default (few examples, derandomized, no deadline),
``long`` for a local hunt: ``KOPF_SCHEDULER_FUZZ=long pytest tests/unit/fuzz``.
"""
