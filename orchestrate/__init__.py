"""harness.orchestrate: the deterministic runtime that runs agents and records evidence."""
