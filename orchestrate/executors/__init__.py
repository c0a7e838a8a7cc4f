"""Where a batch's agent phase runs: locally as a supervised child process, or shipped to a
Ray cluster (``ray_executor``, optional extra ``harness-verify[ray]``).

``unit`` turns the agent phase into a path-independent, picklable value and runs it on any
machine; ``gitbundle`` moves the base out and the batch branch back as git bundles, refusing a
returned bundle that is not exactly the batch's branch on top of its base. Nothing here imports
Ray at module level: ``harness.orchestrate`` works without it.
"""
