"""The fault campaign (issue 26, ADR 0031): a seeded nemesis against a real daemon, its
harnesses, keepers, tools and transcripts, with invariants checked after every step.
``python tests/torture/run.py`` runs it; ``tests/test_torture.py`` runs a bounded slice."""
