"""The bounded slice of the model campaign (issue 34, ``tests/torture/model.py``) that ``make
test`` runs: one seed for 8 s of random model replies (failures among them) while the
harness is SIGKILLed, SIGTERMed and SIGSTOPped; ``make torture`` runs more seeds, longer.
``TETHER_MODEL_SEED`` picks another seed."""

from __future__ import annotations

import os

import pytest

from torture import model


@pytest.mark.early
async def test_a_slice_of_the_model_campaign_finds_no_violation(orphans_settled: None) -> None:
    seed = int(os.environ.get("TETHER_MODEL_SEED", "1"))
    steps, found = await model.run(seed, 8.0)
    assert found == [], found
    assert steps >= 20
