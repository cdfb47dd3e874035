"""tether.channels is typed: mypy --strict rejects a str sent on a Sender[int]."""

from __future__ import annotations

import textwrap

import pytest

_SNIPPET = """
    import tether

    async def main() -> None:
        tx, rx = tether.channel(int, 1)
        await tx.send(1)
        await tx.send("one")
        number: int = await rx.recv()
        text: str = await rx.recv()
        reply_tx, reply_rx = tether.oneshot(int)
        reply_tx.send("x")
        state_tx, state_rx = tether.watch(0)
        state_tx.send("x")
        maybe: tether.Sender[int] | None = tx.downgrade().upgrade()
"""


@pytest.fixture(scope="module")
def mypy_report(tmp_path_factory: pytest.TempPathFactory) -> list[str]:
    workdir = tmp_path_factory.mktemp("typing")
    snippet = workdir / "snippet.py"
    snippet.write_text(textwrap.dedent(_SNIPPET))
    api = pytest.importorskip("mypy.api", reason="mypy comes with the dev extra")
    stdout, stderr, _ = api.run(
        ["--strict", "--no-incremental", "--cache-dir", str(workdir / "cache"), str(snippet)]
    )
    assert not stderr, stderr
    return [line.split(": error: ", 1)[1] for line in stdout.splitlines() if ": error: " in line]


def test_mypy_rejects_a_str_on_a_sender_of_int(mypy_report: list[str]) -> None:
    assert any('"send" of "Sender" has incompatible type "str"' in e for e in mypy_report)


def test_mypy_types_what_recv_returns(mypy_report: list[str]) -> None:
    assert any('(expression has type "int", variable has type "str")' in e for e in mypy_report)


def test_mypy_checks_oneshot_and_watch(mypy_report: list[str]) -> None:
    assert any('"send" of "OneshotSender"' in e for e in mypy_report)
    assert any('"send" of "WatchSender"' in e for e in mypy_report)


def test_mypy_finds_exactly_the_planted_errors(mypy_report: list[str]) -> None:
    assert len(mypy_report) == 4, "\n".join(mypy_report)
