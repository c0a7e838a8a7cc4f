"""The parts of one run, split by job so each stays small and reviewable.

``core`` holds the run's state and the only way to change it (queued audit records, legal
transitions); ``start`` records the run's policy, ``resume`` rebuilds a crashed run from its
audit store, ``batch`` runs one batch's agent and ``landing`` decides what its changes become
(lineage, scope and capsule, gates with integrity snapshots, merge). The tick loop that ties
them together is ``harness.orchestrate.runtime.Runtime``, the public entry point.
"""
