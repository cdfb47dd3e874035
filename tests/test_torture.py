"""The bounded slice of the fault campaign (issue 26, ADR 0033) that ``make test`` runs: one
seed for at most ``SLICE`` seconds of steps against a real daemon, harnesses, keepers, tools
and transcripts, then every invariant once the faults are undone. ``make torture`` runs the
whole campaign. The seed is fresh on every run (drawn by ``conftest.py`` and shown in the
session's header); ``TETHER_TORTURE_SEED=N`` replays one."""

from __future__ import annotations

import os

import pytest

from torture import campaign

SLICE = 24.0
"""Seconds of steps (then the campaign settles: about 10 s more); ``make torture`` runs the
whole campaign, and each step's mechanisms are the same."""


@pytest.mark.early
async def test_a_slice_of_the_fault_campaign_finds_no_violation() -> None:
    seed = int(os.environ.get("TETHER_TORTURE_SEED") or campaign.fresh_seed())
    report = await campaign.run(seed, 100_000, seconds=SLICE)
    print(report.text())
    replay = f"TETHER_TORTURE_SEED={seed} pytest tests/test_torture.py; {report.replay()}"
    assert report.violations == [], f"{report.text()}\n  or: {replay}"
    assert report.steps >= 50
    assert sum(report.checks.values()) > report.steps
