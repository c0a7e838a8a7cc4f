"""The parts of one run, split by job so each stays small and reviewable.

``core`` holds the run's state and the only way to change it (queued audit records, legal
transitions); ``start`` records the run's policy, ``resume`` rebuilds a crashed run from its
audit store, ``job`` is one batch in flight (worktree, supervised agent, gates, never blocking),
``agents`` starts its agent (locally or on an executor), ``budgets`` holds the run's ledger,
and ``retire`` records a finished batch in batch order and decides what its changes become
(lineage, scope and capsule, gate verdicts with integrity snapshots, merge, retries). The
tick loop that ties them together is ``harness.orchestrate.runtime.Runtime``, the public
entry point.
"""
