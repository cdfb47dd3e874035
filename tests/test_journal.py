"""tether.journal: durable tool calls, sealing, repair, locking and disk errors, on real files."""

from __future__ import annotations

import errno
import json
import os
import platform
import re
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import anyio
import anyio.lowlevel
import pytest
import trio
from hypothesis import given, settings
from hypothesis import strategies as st

from helpers import python, tmpfs
from loops import both_loops, program
from tether import JournalError, ToolCall, ToolResult, Transcript, _aio
from tether.journal import MAX_DEPTH, Event, Message, scan

ISO_UTC = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z$")


@both_loops
async def test_entries_round_trip_with_monotonic_seq_and_utc_timestamps(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    async with await Transcript.open(path) as tr:
        call = await tr.tool_call("bash", {"cmd": "ls -l", "n": [1, 2]})
        await tr.append_message("assistant", "listing ✓")
        result = await tr.tool_result(call.id, {"stdout": "a\nb"}, "ok")
        await tr.event("note", {"x": 1})
        written = list(tr.entries)
    assert [e.seq for e in written] == [1, 2, 3, 4]
    assert all(ISO_UTC.match(e.ts) for e in written)
    assert result.call_id == call.id
    async with await Transcript.open(path) as again:
        assert list(again.entries) == written
        assert again.repair is None
        assert again.dangling() == []
    lines = path.read_bytes().splitlines()
    assert [json.loads(line)["type"] for line in lines] == [
        "tool_call",
        "message",
        "tool_result",
        "event",
    ]
    assert isinstance(written[1], Message)
    assert isinstance(written[3], Event)


@pytest.fixture(params=["kernel", "thread"])
def sync_path(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Run the test with appends synced by the kernel's AIO, then on the worker thread."""
    monkeypatch.setenv("TETHER_AIO", "1" if request.param == "kernel" else "0")
    return str(request.param)


def _kernel_sync_here() -> bool:
    return sys.platform == "linux" and platform.machine() in ("x86_64", "aarch64")


@both_loops
async def test_a_tool_call_is_on_disk_when_it_returns(tmp_path: Path, sync_path: str) -> None:
    path = tmp_path / "t.jsonl"
    async with await Transcript.open(path) as tr:
        assert tr._sink is not None
        assert tr._sink.kernel_sync == (sync_path == "kernel" and _kernel_sync_here())
        call = await tr.tool_call("rm", {"path": "/tmp/x"})
        assert scan(path.read_bytes()).entries[-1].id == call.id
        assert tr.dangling() == [call]


def plain_jsonl(data: bytes, *, torn_tail: bool = False) -> list[dict[str, object]]:
    """The objects of ``data`` read as any JSONL reader would, line by line; fails on a NUL
    byte or a line that is not JSON (but a torn last line when ``torn_tail``)."""
    assert b"\0" not in data, "a NUL byte: no other reader takes this for JSON lines"
    lines = data.split(b"\n")
    last = lines.pop()  # after the final newline: empty, unless the last line is torn
    assert torn_tail or not last, f"a line without its newline: {last[:60]!r}"
    return [json.loads(line) for line in lines]


@both_loops
async def test_a_live_transcript_is_plain_jsonl_and_grows_with_each_append(
    tmp_path: Path, sync_path: str
) -> None:
    """Issue 28: while written, the file is what it claims at every instant (``jq``, ``tail
    -f``, a log shipper read it), and closing changes nothing."""
    path = tmp_path / "t.jsonl"
    sizes = []
    async with await Transcript.open(path) as tr:
        calls = []
        for i in range(3):
            calls.append(await tr.tool_call("tool", {"i": i}))
            live = path.read_bytes()
            assert [r["id"] for r in plain_jsonl(live)] == [c.id for c in calls]
            sizes.append(len(live))
    assert sizes == sorted(set(sizes)), "the file did not grow with each append"
    assert path.read_bytes() == live


@both_loops
async def test_a_zero_tail_left_by_a_killed_writer_is_the_end_not_damage(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    async with await Transcript.open(path) as tr:
        calls = [await tr.tool_call("tool", {"i": i}) for i in range(3)]
    path.write_bytes(path.read_bytes() + bytes(5000))  # what a writer before 0.x killed leaves
    async with await Transcript.open(path) as tr:
        assert tr.repair is None
        plain_jsonl(path.read_bytes())  # cut off as soon as it is opened for writing
        assert [e.id for e in tr.entries] == [c.id for c in calls]
        call = await tr.tool_call("after", {})
    assert [e.id for e in scan(path.read_bytes()).entries][-1] == call.id


@both_loops
async def test_resume_seals_every_dangling_call_with_the_reason(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    async with await Transcript.open(path) as tr:
        calls = [await tr.tool_call("tool", {"i": i}) for i in range(3)]
    async with await Transcript.open(path, resume=True) as resumed:
        sealed = [e for e in resumed.entries if isinstance(e, ToolResult)]
        assert [r.call_id for r in sealed] == [c.id for c in calls]
        assert {r.status for r in sealed} == {"interrupted"}
        assert {r.reason for r in sealed} == {"session resumed after an unclean shutdown"}
        assert resumed.dangling() == []
    async with await Transcript.open(path) as tr:
        call = await tr.tool_call("tool", {})
    async with await Transcript.open(path, resume=True, reason="SIGTERM from pid 42") as again:
        (last,) = [e for e in again.entries if isinstance(e, ToolResult) and e.call_id == call.id]
        assert last.reason == "SIGTERM from pid 42"


@both_loops
async def test_tool_result_refuses_unknown_answered_and_invalid(tmp_path: Path) -> None:
    async with await Transcript.open(tmp_path / "t.jsonl") as tr:
        call = await tr.tool_call("tool", {})
        with pytest.raises(ValueError, match="no tool call"):
            await tr.tool_result("call_nope", None)
        with pytest.raises(ValueError, match="status"):
            await tr.tool_result(call.id, None, "maybe")
        await tr.tool_result(call.id, None, "error")
        with pytest.raises(ValueError, match="already has a result"):
            await tr.tool_result(call.id, None)


@both_loops
async def test_a_result_for_an_unknown_call_is_kept_and_reported(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "t.jsonl"
    line = {"type": "tool_result", "id": "r1", "seq": 1, "ts": "2026-11-29T00:00:00.000000Z"}
    path.write_text(json.dumps({**line, "call_id": "ghost", "status": "ok", "output": 1}) + "\n")
    async with await Transcript.open(path) as tr:
        assert [r.call_id for r in tr.unmatched_results] == ["ghost"]
        assert len(tr.entries) == 1
    assert "answers no open call ghost" in caplog.text


async def _write_sample(path: Path, count: int) -> list[ToolCall]:
    async with await Transcript.open(path) as tr:
        return [await tr.tool_call("tool", {"i": i, "pad": "x" * (i % 7)}) for i in range(count)]


@both_loops
async def test_a_torn_last_line_is_quarantined_byte_for_byte(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    calls = await _write_sample(path, 3)
    torn = b'{"type":"tool_call","id":"call_torn","seq":4,"ts":"2026'
    with path.open("ab") as f:
        f.write(torn)
    async with await Transcript.open(path) as tr:
        assert tr.repair is not None
        assert tr.repair.quarantined_bytes == len(torn)
        assert Path(tr.repair.quarantine).read_bytes() == torn
        assert [e.id for e in tr.entries[:3]] == [c.id for c in calls]
        event = tr.entries[3]
        assert isinstance(event, Event)
        assert event.kind == "quarantined"
        assert event.data["bytes"] == len(torn)
        assert "torn last line" in event.data["reason"]
    async with await Transcript.open(path) as again:
        assert again.repair is None


@both_loops
async def test_a_corrupt_middle_line_is_quarantined_alone_and_later_entries_stay(
    tmp_path: Path,
) -> None:
    """Issue 15, row 10: one bad line costs that line only, never the entries after it."""
    path = tmp_path / "t.jsonl"
    calls = await _write_sample(path, 5)
    lines = path.read_bytes().splitlines(keepends=True)
    bad = b'{"type":"tool_call","id":"c","seq":3,"ts":"x","name":7,"args":{}}\n'
    offset = len(b"".join(lines[:2]))
    lines[2] = bad
    path.write_bytes(b"".join(lines))
    async with await Transcript.open(path) as tr:
        assert tr.repair is not None
        assert tr.repair.kept_entries == 4
        assert "field 'name'" in tr.repair.reason
        assert [(d.offset, d.length) for d in tr.repair.damage] == [(offset, len(bad))]
        assert Path(tr.repair.quarantine).read_bytes() == bad
        kept = [e.id for e in tr.entries if isinstance(e, ToolCall)]
        assert kept == [c.id for c in calls[:2] + calls[3:]]
        event = tr.entries[-1]
        assert isinstance(event, Event)
        assert event.data["spans"] == [[offset, len(bad)]]
    assert path.read_bytes().startswith(b"".join(lines[:2] + lines[3:]))
    async with await Transcript.open(path) as again:
        assert again.repair is None


@both_loops
async def test_a_finished_call_after_a_corrupt_line_is_never_sealed_again(
    tmp_path: Path,
) -> None:
    """Issue 15, row 10: an ``ok`` result that survives keeps its call answered, so a resumed
    engine does not run a finished tool with side effects again."""
    path = tmp_path / "t.jsonl"
    async with await Transcript.open(path) as tr:
        await tr.append_message("user", "deploy it")
        call = await tr.tool_call("deploy", {"to": "prod"})
        await tr.tool_result(call.id, {"deployed": True}, "ok")
    lines = path.read_bytes().splitlines(keepends=True)
    lines[0] = b"\x00garbage\xff\n"
    path.write_bytes(b"".join(lines))
    async with await Transcript.open(path, resume=True) as resumed:
        assert resumed.dangling() == []
        results = [e for e in resumed.entries if isinstance(e, ToolResult)]
        assert [(r.call_id, r.status) for r in results] == [(call.id, "ok")]


@both_loops
async def test_seals_say_what_happened(tmp_path: Path) -> None:
    """Issue 28: a call whose result line was damaged is ``result_lost`` (never sealed as
    interrupted: the tool ran), a call awaiting approval is never sealed, any other open call
    is ``interrupted``; and a resume adds its seals after the bytes it found, changing none."""
    path = tmp_path / "t.jsonl"
    async with await Transcript.open(path) as tr:
        done = await tr.tool_call("deploy", {"to": "prod"})
        await tr.tool_result(done.id, {"deployed": True}, "ok")
        asking = await tr.tool_call("rm", {"path": "/"}, awaiting="approval")
        cut = await tr.tool_call("bash", {"cmd": "make test"})
        await tr.append_message("assistant", "waiting")
    lines = path.read_bytes().splitlines(keepends=True)
    lines[1] = lines[1].replace(b'"ok"', b'"o\xffk"')  # one flipped byte in the ok result
    path.write_bytes(b"".join(lines))
    async with await Transcript.open(path, resume=True) as resumed:
        assert resumed.awaiting() == [asking]
        assert resumed.dangling() == []
        repaired = path.read_bytes()
    found = {e.call_id: e for e in scan(repaired).entries if isinstance(e, ToolResult)}
    assert found[done.id].status == "result_lost"
    assert found[done.id].reason is not None
    assert "its result line was damaged; the bytes are in t.jsonl.corrupt-" in found[done.id].reason
    assert (found[cut.id].status, found[cut.id].reason) == (
        "interrupted",
        "session resumed after an unclean shutdown",
    )
    assert asking.id not in found
    assert json.loads(repaired.splitlines()[1])["awaiting"] == "approval"
    before = path.read_bytes()
    async with await Transcript.open(path, resume=True):
        pass
    assert path.read_bytes() == before  # nothing left to seal: not a byte changed


@both_loops
async def test_a_resume_only_appends(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    async with await Transcript.open(path) as tr:
        await tr.append_message("user", "go")
        await tr.tool_call("bash", {"cmd": "sleep 1"})
    before = path.read_bytes()
    async with await Transcript.open(path, resume=True):
        pass
    after = path.read_bytes()
    assert after.startswith(before)
    assert [json.loads(line)["status"] for line in after[len(before) :].splitlines()] == [
        "interrupted"
    ]


@both_loops
async def test_a_prompt_is_recorded_once_and_its_id_survives_a_reopen(tmp_path: Path) -> None:
    """ADR 0034: a user message may record a prompt's id; a second record of the id is refused,
    the id is known again after a reopen, and a message without one keeps its old line."""
    path = tmp_path / "t.jsonl"
    async with await Transcript.open(path) as tr:
        await tr.append_message("user", "plain")
        await tr.append_message("user", "fix it", prompt_id="p1")
        with pytest.raises(ValueError, match="already recorded"):
            await tr.append_message("user", "fix it again", prompt_id="p1")
        assert (tr.has_prompt("p1"), tr.has_prompt("p2")) == (True, False)
    lines = [json.loads(line) for line in path.read_text().splitlines() if line.strip("\x00")]
    assert "prompt_id" not in lines[0]
    assert lines[1]["prompt_id"] == "p1"
    assert len(lines) == 2
    async with await Transcript.open(path) as again:
        assert again.has_prompt("p1")


@pytest.mark.parametrize(
    "line",
    [
        b'{"type":[],"id":"x","seq":9,"ts":"t"}',
        b'{"type":{"a":1},"id":"x","seq":9,"ts":"t"}',
        b'{"type":"message","id":"x","seq":9,"ts":"t","role":"user","content":'
        + b"[" * 5000
        + b"]" * 5000
        + b"}",
        b"[" * 5000 + b"]" * 5000,
        b'{"type":"tool_result","id":"x","seq":9,"ts":"t","call_id":1,"status":"ok","output":1}',
        b'{"type":"tool_result","id":"x","seq":9,"ts":"t","call_id":"c","status":[],"output":1}',
        b'{"type":"event","id":"x","seq":1e999,"ts":"t","kind":"k","data":{}}',
    ],
)
@both_loops
async def test_any_malformed_line_is_corruption_never_an_exception(
    tmp_path: Path, line: bytes
) -> None:
    """Issue 15, row 9: wrong types and absurd depth are damage for show, repair and open."""
    path = tmp_path / "t.jsonl"
    await _write_sample(path, 2)
    with path.open("ab") as f:
        f.write(line + b"\n")
    await _write_sample_more(path)
    found = scan(path.read_bytes())
    assert len(found.damage) == 1
    assert len(found.entries) == 3
    async with await Transcript.open(path) as tr:
        assert tr.repair is not None
        assert Path(tr.repair.quarantine).read_bytes() == line + b"\n"
        assert len([e for e in tr.entries if isinstance(e, ToolCall)]) == 3


async def _write_sample_more(path: Path) -> None:
    """Append one more call after whatever is in ``path`` (by hand: the file may be damaged,
    and opening it would repair it)."""
    with path.open("ab") as f:
        f.write(
            json.dumps(
                {
                    "type": "tool_call",
                    "id": "call_last",
                    "seq": 99,
                    "ts": "t",
                    "name": "n",
                    "args": {},
                }
            ).encode()
            + b"\n"
        )


@both_loops
async def test_an_entry_nested_past_the_limit_is_refused_on_write(tmp_path: Path) -> None:
    deep: dict[str, object] = {}
    inner = deep
    for _ in range(MAX_DEPTH):
        inner["x"] = {}
        inner = inner["x"]  # type: ignore[assignment]
    async with await Transcript.open(tmp_path / "t.jsonl") as tr:
        with pytest.raises(ValueError, match="nests deeper"):
            await tr.tool_call("deep", deep)
        call = await tr.tool_call("shallow", {"x": {"y": [1, [2]]}})
        assert tr.dangling() == [call]  # the refused call changed nothing


@settings(max_examples=60, deadline=None)
@given(data=st.data())
def test_any_cut_or_torn_tail_reopens_to_an_exact_prefix(
    tmp_path_factory: pytest.TempPathFactory, data: st.DataObject
) -> None:
    workdir = tmp_path_factory.mktemp("cut")
    path = workdir / "t.jsonl"
    calls = trio.run(_write_sample, path, 12)
    original = path.read_bytes()
    cut = data.draw(st.integers(0, len(original)), label="cut")
    tail = data.draw(st.binary(max_size=40).filter(lambda b: b"\n" not in b), label="tail")
    # A writer killed while it reserved space, or after, leaves zeros of any length, and a
    # page written back out of order may sit among them.
    zeros = bytes(data.draw(st.integers(0, 9000), label="zeros"))
    stray = data.draw(st.binary(max_size=20).filter(lambda b: b"\n" not in b), label="stray")
    damaged = original[:cut] + tail + zeros + (stray + zeros if stray.strip(b"\0") else b"")
    path.write_bytes(damaged)
    complete = original[:cut].count(b"\n")  # the entries whose whole line survived the cut

    async def reopen() -> tuple[list[str], Path | None, int]:
        async with await Transcript.open(path) as tr:
            ids = [e.id for e in tr.entries if isinstance(e, ToolCall)]
            quarantine = Path(tr.repair.quarantine) if tr.repair else None
            return ids, quarantine, len(tr.entries)

    ids, quarantine, _ = trio.run(reopen)
    assert ids == [c.id for c in calls[:complete]]
    kept = original[: original[:cut].rfind(b"\n") + 1] if complete else b""
    moved = quarantine.read_bytes() if quarantine else b""
    assert kept + moved == damaged.rstrip(b"\0"), "bytes were lost or invented"


# A writer on the test's loop (``program``), acknowledging each call on stdout.
WRITER = """
    import sys, tether
    async def main():
        async with await tether.Transcript.open(sys.argv[1]) as tr:
            for i in range(100_000):
                call = await tr.tool_call("tool", {"i": i, "blob": "x" * int(sys.argv[2])})
                print(call.id, flush=True)
    RUN(main)
"""


@pytest.mark.parametrize(
    ("acks", "blob"), [(1, 200_000), (7, 200_000), (30, 200_000), (40, 100), (400, 100)]
)
@both_loops
async def test_kill_9_mid_stream_keeps_every_acknowledged_call(
    tmp_path: Path, acks: int, blob: int, sync_path: str
) -> None:
    path = tmp_path / "t.jsonl"
    writer = subprocess.Popen(
        python(program(WRITER), str(path), str(blob)), stdout=subprocess.PIPE, text=True
    )
    try:
        assert writer.stdout is not None
        acknowledged = [writer.stdout.readline().strip() for _ in range(acks)]
    finally:
        writer.send_signal(signal.SIGKILL)
        writer.communicate()
    # As any reader finds it, before tether repairs anything: at worst a torn last line.
    assert [r["id"] for r in plain_jsonl(path.read_bytes(), torn_tail=True)][:acks] == acknowledged
    async with await Transcript.open(path) as tr:
        ids = [e.id for e in tr.entries if isinstance(e, ToolCall)]
        assert ids[:acks] == acknowledged
        assert all(isinstance(e, ToolCall | Event) for e in tr.entries)
        if tr.repair is not None:
            assert tr.repair.reason.startswith("a torn last line")
            assert b"\0" not in Path(tr.repair.quarantine).read_bytes(), "zeros were damage"


@both_loops
async def test_concurrent_writers_in_one_process_serialize(tmp_path: Path, sync_path: str) -> None:
    path = tmp_path / "t.jsonl"
    async with await Transcript.open(path) as tr, anyio.create_task_group() as nursery:
        for w in range(20):

            async def writer(w: int = w) -> None:
                for i in range(10):
                    await tr.append_message("user", f"{w}-{i}")

            nursery.start_soon(writer)
    async with await Transcript.open(path) as again:
        assert [e.seq for e in again.entries] == list(range(1, 201))
        assert again.repair is None


@both_loops
async def test_a_second_writer_is_refused_naming_the_holder(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    holder = subprocess.Popen(
        python(
            """
            import sys, trio, tether
            async def main():
                async with await tether.Transcript.open(sys.argv[1]):
                    print("holding", flush=True)
                    sys.stdin.readline()
            trio.run(main)
            """,
            str(path),
        ),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None
        assert holder.stdout.readline().strip() == "holding"
        with pytest.raises(JournalError, match=f"being written by pid {holder.pid}") as caught:
            await Transcript.open(path)
        assert caught.value.errno == errno.EBUSY
        assert caught.value.filename == str(path)
    finally:
        holder.communicate("\n", timeout=10)
    async with await Transcript.open(path):  # released with its holder; now ours
        with pytest.raises(JournalError, match=f"pid {os.getpid()}"):
            await Transcript.open(path)


@both_loops
async def test_the_lock_file_goes_with_its_holder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 43, row 5: a closed transcript (and ``transcript repair``) left ``<path>.lock``.
    It is removed as its holder lets go; a stale one (a SIGKILLed holder's) is taken over and
    removed too; and one its holder removed between our open and our ``flock`` is opened anew,
    so two writers never hold two files of one name."""
    path = tmp_path / "t.jsonl"
    lock_path = tmp_path / "t.jsonl.lock"
    async with await Transcript.open(path) as transcript:
        assert lock_path.exists()
        await transcript.append_message("user", "hello")
    assert not lock_path.exists()
    lock_path.write_text("4242\n")  # what a SIGKILLed holder leaves: unlocked
    async with await Transcript.open(path):
        assert lock_path.read_text() == f"{os.getpid()}\n"
    assert not lock_path.exists()

    from tether.journal import _disk

    real_flock, removed = _disk.fcntl.flock, []

    def flock_after_a_holder_let_go(fd: int, operation: int) -> None:
        if not removed:  # the holder we opened behind removes the file, then we lock it
            removed.append(True)
            os.unlink(lock_path)
        real_flock(fd, operation)

    monkeypatch.setattr(_disk.fcntl, "flock", flock_after_a_holder_let_go)
    async with await Transcript.open(path):
        opened = os.stat(lock_path)  # the file the path names is the one held
        with pytest.raises(JournalError, match="being written by pid"):
            await Transcript.open(path)
        assert os.stat(lock_path).st_ino == opened.st_ino
    assert removed
    assert not lock_path.exists()


@both_loops
async def test_a_missing_transcript_without_create_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(JournalError) as caught:
        await Transcript.open(tmp_path / "absent.jsonl", create=False)
    assert caught.value.errno == errno.ENOENT


@pytest.fixture
def tiny_disk(tmp_path: Path) -> Iterator[Path]:
    """A real 64 KiB filesystem (tmpfs), to fill up; skipped where mounting is not allowed."""
    with tmpfs(tmp_path / "tiny", "64k") as mount:
        yield mount


@both_loops
async def test_a_full_disk_raises_journal_error_and_leaves_no_torn_line(
    tiny_disk: Path, sync_path: str
) -> None:
    path = tiny_disk / "t.jsonl"
    async with await Transcript.open(path) as tr:

        async def fill() -> None:
            for i in range(1000):
                await tr.tool_call("tool", {"i": i, "blob": "x" * 4000})

        with pytest.raises(JournalError) as caught:
            await fill()
        assert caught.value.errno == errno.ENOSPC
        assert caught.value.filename == str(path)
        acknowledged = len(tr.entries)
        with pytest.raises(JournalError, match="an earlier append failed"):
            await tr.append_message("user", "after the failure")
    async with await Transcript.open(path) as again:
        assert again.repair is None, "the failed append left a torn line"
        assert len(again.entries) == acknowledged


@both_loops
async def test_a_read_only_filesystem_raises_journal_error(tiny_disk: Path) -> None:
    path = tiny_disk / "t.jsonl"
    async with await Transcript.open(path) as tr:
        await tr.append_message("user", "hello")
    subprocess.run(["mount", "-o", "remount,ro", str(tiny_disk)], check=True)
    try:
        with pytest.raises(JournalError) as caught:
            await Transcript.open(path)
        assert caught.value.errno == errno.EROFS
        assert str(tiny_disk) in str(caught.value.filename)
    finally:
        subprocess.run(["mount", "-o", "remount,rw", str(tiny_disk)], check=True)


def _fill(directory: Path, leave: int = 0) -> Path:
    """Fill the filesystem of ``directory`` with one file, then free ``leave`` pages of it."""
    filler = directory / "filler"
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        with pytest.raises(OSError, match="No space") as full:  # noqa: PT012 - ends by raising
            while True:
                os.write(fd, b"\0" * 4096)
        assert full.value.errno == errno.ENOSPC
    finally:
        os.close(fd)
    if leave:
        os.truncate(filler, max(0, filler.stat().st_size - leave * 4096))
    return filler


@both_loops
async def test_a_full_disk_at_open_is_a_journal_error_and_the_lock_is_released(
    tiny_disk: Path,
) -> None:
    """Issue 15, row 11: the lock file's write fails on a full disk; the error is typed and the
    lock is not left held, so the same process opens the transcript once space is back."""
    path = tiny_disk / "t.jsonl"
    filler = _fill(tiny_disk)
    with pytest.raises(JournalError) as caught:
        await Transcript.open(path)
    assert caught.value.errno == errno.ENOSPC
    filler.unlink()
    async with await Transcript.open(path) as tr:
        await tr.append_message("user", "space is back")


@both_loops
async def test_a_repair_that_runs_out_of_space_leaves_no_quarantine_file(tiny_disk: Path) -> None:
    path = tiny_disk / "t.jsonl"
    async with await Transcript.open(path) as tr:
        await tr.append_message("user", "hello")
    torn = b'{"type":"message","id":"m","seq":2,"ts":"t","role":"user","content":"' + b"x" * 12000
    with path.open("ab") as f:
        f.write(torn)
    filler = _fill(tiny_disk, leave=1)  # room for the lock file, not for the quarantine
    for _ in range(2):
        with pytest.raises(JournalError) as caught:
            await Transcript.open(path)
        assert caught.value.errno == errno.ENOSPC
        assert list(tiny_disk.glob("t.jsonl.corrupt-*")) == []
    filler.unlink()
    async with await Transcript.open(path) as tr:
        assert tr.repair is not None
        assert Path(tr.repair.quarantine).read_bytes() == torn
        assert [e.seq for e in tr.entries] == [1, 2]


FORKER = """
    import os, sys, trio, tether
    async def append(path):
        async with await tether.Transcript.open(path) as tr:
            await tr.tool_call("tool", {})
            return tr._sink.kernel_sync
    parent = trio.run(append, sys.argv[1] + "/parent.jsonl")
    pid = os.fork()
    if pid == 0:
        child = trio.run(append, sys.argv[1] + "/child.jsonl")
        os._exit(0 if child == parent else 3)
    print(parent, os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]))
"""


def test_a_forked_child_appends_on_its_own_aio_ring(tmp_path: Path) -> None:
    """The kernel's AIO context belongs to the process that made it: a forked child makes
    its own, and its appends are durable on the same path as its parent's."""
    done = subprocess.run(
        python(FORKER, str(tmp_path)), capture_output=True, text=True, timeout=60, check=True
    )
    assert done.stdout.split()[1] == "0", done.stderr
    assert [e.type for e in scan((tmp_path / "child.jsonl").read_bytes()).entries] == ["tool_call"]


@pytest.mark.skipif(not _kernel_sync_here(), reason="the kernel's AIO path is Linux x86_64/aarch64")
@both_loops
async def test_a_full_aio_ring_or_a_failed_kernel_sync_keep_the_journal_exact(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A ring with no room sends the sync to the worker thread, and the entry is durable all
    the same; a sync the kernel fails (EIO) is a JournalError, the file is cut back to its
    last durable entry, and the transcript refuses more until reopened."""
    path = tmp_path / "t.jsonl"
    async with await Transcript.open(path) as tr:
        assert tr._sink is not None
        assert tr._sink.kernel_sync
        monkeypatch.setattr(_aio._Ring, "submit", lambda self, iocb: False)
        full = await tr.tool_call("ring-full", {})
        monkeypatch.undo()

        async def failed_sync(self: _aio.KernelSync) -> bool:
            raise OSError(errno.EIO, "I/O error")

        monkeypatch.setattr(_aio.KernelSync, "datasync", failed_sync)
        with pytest.raises(JournalError) as caught:
            await tr.tool_call("eio", {})
        assert caught.value.errno == errno.EIO
        with pytest.raises(JournalError, match="an earlier append failed"):
            await tr.tool_call("after", {})
    monkeypatch.undo()
    async with await Transcript.open(path) as again:
        assert again.repair is None, "the failed append left a torn line"
        assert [e.id for e in again.entries] == [full.id]


@pytest.mark.skipif(not _kernel_sync_here(), reason="the kernel's AIO path is Linux x86_64/aarch64")
@both_loops
async def test_a_kernel_sync_cancelled_while_in_flight_is_answered_and_the_cancel_waits(
    tmp_path: Path,
) -> None:
    """Cancelled while the kernel syncs, ``datasync`` still waits for the answer (a sync
    submitted must be reaped, or the next one reads its answer), returns, and the cancellation
    is delivered at the next checkpoint."""
    fd = os.open(tmp_path / "f", os.O_WRONLY | os.O_CREAT, 0o600)
    sync = _aio.KernelSync.open(fd)
    assert sync is not None
    answered = False
    try:
        with anyio.CancelScope() as scope:
            scope.cancel()
            os.write(fd, b"x")
            answered = await sync.datasync()
            await anyio.lowlevel.checkpoint()
            pytest.fail("the cancellation was lost")
        assert answered, "the cancelled sync was abandoned"
        assert scope.cancelled_caught
        assert await sync.datasync(), "the cancelled sync's answer was left in the ring"
    finally:
        sync.close()
        os.close(fd)


@both_loops
async def test_a_cancelled_task_s_tool_call_writes_nothing_and_raises(
    tmp_path: Path, sync_path: str
) -> None:
    path = tmp_path / "t.jsonl"
    async with await Transcript.open(path) as tr:
        kept = await tr.tool_call("first", {})
        with anyio.CancelScope() as scope:
            scope.cancel()
            await tr.tool_call("never", {})
        assert scope.cancelled_caught
        assert [e.id for e in tr.entries] == [kept.id]
        assert await tr.tool_call("after", {})
    lines = scan(path.read_bytes()).entries
    assert [e.name for e in lines if isinstance(e, ToolCall)] == ["first", "after"]
    assert len(lines) == 2
