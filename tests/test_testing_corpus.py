"""The deadlock plugin's corpus (tests/torture/corpus.py), once: every program of the
detector's tests alone in a child pytest, each deadlock named and every working program
passing (``make torture`` runs it three times)."""

from __future__ import annotations

import pytest

from torture import corpus


def test_the_corpus_has_sixty_programs_of_both_kinds() -> None:
    found = corpus.programs()
    named = [p for p in found if p[3] is corpus.Expect.NAMED]
    assert len(found) >= 60
    assert len(named) >= 25
    assert len(found) - len(named) >= 25


@pytest.mark.slow
def test_every_corpus_program_is_judged_right_alone(capsys: pytest.CaptureFixture[str]) -> None:
    assert corpus.run(1, 1.0) == 0, capsys.readouterr().out
