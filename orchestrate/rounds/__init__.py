"""Long-horizon audited rounds (issue 12): Manager / Executor / Auditor, one task at a time.

``spec`` reads a task's ``[tasks.rounds]`` table; ``texts`` keeps the texts every round
record binds by digest; ``prompts`` builds each role's context; ``roles`` runs one role
process; ``job`` is the round loop; ``rebuild`` recovers a task's rounds from its records;
``scripted_roles`` is the deterministic stand-in for the three roles (no model).
"""
