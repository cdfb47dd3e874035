"""tether.wire: the codec (round trip, bad input, fuzz) and real Unix sockets (perms, peers)."""

from __future__ import annotations

import errno
import json
import os
import socket as pysocket
import struct
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
import trio
import trio.testing
from hypothesis import given, settings
from hypothesis import strategies as st

from helpers import python
from tether import ChannelClosed, wire
from tether.wire import (
    Bye,
    Connection,
    Error,
    Hello,
    Nudge,
    Ping,
    Pong,
    Prompt,
    ProtocolError,
    Superseded,
    UnsafeSocketPath,
    Welcome,
)
from tether.wire._budget import FRAME_TIMEOUT, FREE, FrameBudget
from tether.wire._codec import ping_frame
from tether.wire._control import starting

# --- the codec -------------------------------------------------------------------------------

_text = st.text(max_size=40)
_int = st.integers(-(2**53), 2**53)
_float = st.floats(allow_nan=False, allow_infinity=False)
_json = st.recursive(
    st.none() | st.booleans() | _int | _float | _text,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(_text, inner, max_size=4),
    max_leaves=12,
)
MESSAGES = st.one_of(
    st.builds(Hello, _text, _int, _int, _float),
    st.builds(Welcome, _text, _int, _float),
    st.builds(Superseded, _text, _int, _int),
    st.builds(Prompt, _text, _text, st.dictionaries(_text, _json, max_size=4)),
    st.just(Nudge()),
    st.builds(Ping, _int),
    st.builds(Pong, _int),
    st.builds(Bye, _text),
    st.builds(Error, _text),
)


@settings(max_examples=300)
@given(message=MESSAGES)
def test_every_message_round_trips(message: wire.Message) -> None:
    frame = wire.encode(message)
    (length,) = struct.unpack(">I", frame[:4])
    assert length == len(frame) - 4
    assert wire.decode(frame[4:]) == message


def test_the_type_tag_is_the_snake_case_class_name() -> None:
    body = json.loads(wire.encode(Superseded("s1", 6, 7))[4:])
    assert body == {"type": "superseded", "session": "s1", "epoch": 6, "current": 7}
    assert json.loads(wire.encode(Nudge())[4:]) == {"type": "nudge"}


@pytest.mark.parametrize(
    ("body", "reason"),
    [
        (b"{not json", "invalid JSON"),
        (b"[1, 2]", "must hold a JSON object"),
        (b'{"type": "teleport"}', "unknown message type 'teleport'"),
        (b'{"type": 7}', "unknown message type 7"),
        (b'{"type": "ping"}', "ping: missing field 'seq'"),
        (b'{"type": "ping", "seq": "1"}', "ping: field 'seq' must be a finite int"),
        (b'{"type": "ping", "seq": true}', "ping: field 'seq' must be a finite int"),
        (b'{"type": "welcome", "session": "s", "epoch": 1, "heartbeat": NaN}', "heartbeat"),
        (b'{"type": "prompt", "id": "p", "text": "t", "meta": []}', "'meta' must be a finite dict"),
        (b"\xff\xfe", "invalid JSON"),
        # issue 15, row 1: nothing a peer sends may raise anything but ProtocolError
        # (whether a 1,000-deep list parses depends on the recursion limit; never a crash)
        (b"[" * 1000 + b"]" * 1000, "nested deeper than 32|a frame must hold a JSON object"),
        (b'{"type":' + b"[" * 100_000 + b"]" * 100_000 + b"}", "nested deeper than 32"),
        (
            b'{"type":"hello","session":"s","epoch":1,"pid":1,"create_time":' + b"9" * 400 + b"}",
            "exceeds 64 bits",
        ),
        (b'{"type":"ping","seq":' + b"9" * 5000 + b"}", "exceeds 64 bits"),
        (b'{"type":"ping","seq":1e400}', "'seq' must be a finite int"),
        (b'{"type":[]}', "unknown message type"),
        (b'{"type":{"a":1}}', "unknown message type"),
        (
            b'{"type":"prompt","id":"p","text":"t","meta":{"a":' + b"[" * 40 + b"]" * 40 + b"}}",
            "32",
        ),
        (b'{"type":"prompt","id":"p","text":"t","meta":{"a":1e400}}', "not finite"),
        (b'{"type":"prompt","id":"p","text":"t","meta":{"a":' + b"9" * 30 + b"}}", "64 bits"),
        (b'{"type":"reply","result":{"a":[Infinity]}}', "not finite"),
    ],
)
def test_bad_bodies_raise_protocol_error_with_the_reason(body: bytes, reason: str) -> None:
    with pytest.raises(ProtocolError, match=reason):
        wire.decode(body)


@settings(max_examples=500)
@given(body=st.one_of(st.binary(max_size=300), _json.map(lambda v: json.dumps(v).encode())))
def test_decode_raises_nothing_but_protocol_error(body: bytes) -> None:
    try:
        message = wire.decode(body)
    except ProtocolError:
        return
    assert type(message) in wire._messages.MESSAGE_TYPES


def test_encode_refuses_what_the_peer_would_refuse() -> None:
    deep: list[object] = []
    for _ in range(40):
        deep = [deep]
    with pytest.raises(ProtocolError, match="nested deeper"):
        wire.encode(Prompt("p", "t", {"deep": deep}))
    with pytest.raises(ProtocolError, match="64 bits"):
        wire.encode(Prompt("p", "t", {"big": 2**64}))


def test_unknown_fields_are_ignored_and_ints_are_floats_where_floats_are_due() -> None:
    body = b'{"type": "welcome", "session": "s", "epoch": 1, "heartbeat": 1, "extra": 0}'
    assert wire.decode(body) == Welcome("s", 1, 1.0)


def test_frames_over_one_mebibyte_are_refused_both_ways() -> None:
    with pytest.raises(ProtocolError, match="exceeds"):
        wire.encode(Prompt("p", "x" * wire.MAX_FRAME, {}))
    assert len(wire.encode(Prompt("p", "x" * (wire.MAX_FRAME - 100), {}))) <= wire.MAX_FRAME + 4


# --- real sockets ----------------------------------------------------------------------------


@asynccontextmanager
async def server(
    handler: Any, directory: Path | None = None
) -> AsyncIterator[tuple[Path, list[BaseException]]]:
    """Serve ``handler`` on a socket in a fresh 0700 directory; collect handler exceptions."""
    with tempfile.TemporaryDirectory() as tmp:
        base = directory or Path(tmp)
        base.chmod(0o700)
        path = base / "agentd.sock"
        escaped: list[BaseException] = []

        async def recording(connection: Connection) -> None:
            try:
                await handler(connection)
            except (ProtocolError, ChannelClosed):
                raise
            except BaseException as exc:
                escaped.append(exc)
                raise

        async with trio.open_nursery() as nursery:
            await nursery.start(wire.serve, path, recording)
            yield path, escaped
            nursery.cancel_scope.cancel()


@asynccontextmanager
async def _pair(directory: Path) -> AsyncIterator[tuple[Connection, trio.SocketStream]]:
    """A served ``Connection`` and the raw stream at its other end."""
    directory.chmod(0o700)
    handed: list[Connection] = []
    arrived, done = trio.Event(), trio.Event()

    async def hold(connection: Connection) -> None:
        handed.append(connection)
        arrived.set()
        await done.wait()

    async with trio.open_nursery() as nursery:
        await nursery.start(wire.serve, directory / "s.sock", hold)
        raw = await trio.open_unix_socket(str(directory / "s.sock"))
        await arrived.wait()
        try:
            yield handed[0], raw
        finally:
            done.set()
            await raw.aclose()
            nursery.cancel_scope.cancel()


async def echo_welcome(connection: Connection) -> None:
    async for message in connection:
        if isinstance(message, Hello):
            await connection.send(Welcome(message.session, message.epoch, 1.0))
        elif isinstance(message, Ping):
            await connection.send(Pong(message.seq))


async def test_a_client_says_hello_and_is_welcomed() -> None:
    async with server(echo_welcome) as (path, escaped):
        assert path.stat().st_mode & 0o777 == 0o600
        async with await wire.connect(path) as client:
            assert client.peer.pid == os.getpid()
            await client.send(Hello("s1", 7, os.getpid(), 12.5))
            assert await client.receive() == Welcome("s1", 7, 1.0)
            await client.send(Ping(3))
            assert await client.receive() == Pong(3)
    assert escaped == []
    assert not path.exists(), "the socket file outlived its server"


async def test_a_bad_frame_closes_only_its_connection(caplog: pytest.LogCaptureFixture) -> None:
    async with (
        server(echo_welcome) as (path, escaped),
        await wire.connect(path) as good,
        await wire.connect(path) as bad,
    ):
        await bad._stream.send_all(struct.pack(">I", 9) + b"not json!")
        reply = await bad.receive()
        assert isinstance(reply, Error)
        assert reply.reason.startswith("invalid JSON")
        with trio.fail_after(5), pytest.raises(ChannelClosed):
            await bad.receive()
        await good.send(Ping(1))
        assert await good.receive() == Pong(1)
    assert escaped == []
    assert "invalid JSON" in caplog.text


async def test_an_oversized_header_and_a_cut_frame_are_protocol_errors() -> None:
    async with server(echo_welcome) as (path, _):
        async with await wire.connect(path) as client:
            await client._stream.send_all(struct.pack(">I", wire.MAX_FRAME + 1))
            reply = await client.receive()
            assert isinstance(reply, Error)
            assert "exceeds" in reply.reason
        async with await wire.connect(path) as client:
            await client._stream.send_all(wire.encode(Ping(1))[:6])
            await client._stream.send_eof()
            reply = await client.receive()
            assert isinstance(reply, Error)
            assert "cut mid-frame" in reply.reason


async def test_issue_26_a_frame_never_finished_is_refused_after_its_timeout(
    mock_clock: trio.testing.MockClock,
) -> None:
    """Half a frame, then silence: the server refuses it once ``FRAME_TIMEOUT`` passes from
    its first byte, and what it held of the frame budget is given back."""
    mock_clock.autojump_threshold = 0
    budgets: list[FrameBudget] = []

    async def receive(connection: Connection) -> None:
        assert connection._budget is not None
        budgets.append(connection._budget)
        await connection.receive()

    async with server(receive) as (path, _), await wire.connect(path) as client:
        await client._stream.send_all(struct.pack(">I", 100_000) + b"x" * 50_000)
        started = trio.current_time()
        reply = await client.receive()
        assert isinstance(reply, Error)
        assert "not finished within 10s (50004 of 100004 bytes)" in reply.reason
        assert trio.current_time() - started == pytest.approx(FRAME_TIMEOUT, abs=0.5)
        with pytest.raises(ChannelClosed):
            await client.receive()
    assert [budget.held for budget in budgets] == [0]


async def test_issue_26_half_written_frames_share_one_budget() -> None:
    """Beyond ``FREE`` bytes each, connections read only while the server's budget has
    room; a small frame always gets through, and a whole frame gives its share back."""
    budget = FrameBudget(limit=100_000)
    assert await budget.reserve(0, 10) == FREE  # a small read is never refused
    budget.adjust(-FREE)
    assert await budget.reserve(FREE, 65_536) == 65_536
    assert await budget.reserve(FREE, 65_536) == 100_000 - 65_536
    assert await budget.reserve(0, 65_536) == FREE  # over the limit, but small
    waiting: list[int] = []

    async def blocked() -> None:
        waiting.append(await budget.reserve(FREE, 1000))

    async with trio.open_nursery() as nursery:
        nursery.start_soon(blocked)
        await trio.testing.wait_all_tasks_blocked()
        assert waiting == []
        budget.adjust(-65_536 - FREE)
        await trio.testing.wait_all_tasks_blocked()
    assert waiting == [1000]


async def test_the_client_side_reports_a_cut_frame_and_a_clean_close() -> None:
    async def half_frame(connection: Connection) -> None:
        await connection._stream.send_all(wire.encode(Pong(1))[:5])

    async with server(half_frame) as (path, _), await wire.connect(path) as client:
        with pytest.raises(ProtocolError, match="cut mid-frame"):
            await client.receive()

    async def nothing(connection: Connection) -> None:
        return None

    async with server(nothing) as (path, _), await wire.connect(path) as client:
        with pytest.raises(ChannelClosed):
            await client.receive()


@settings(max_examples=150, deadline=None)
@given(
    payload=st.one_of(
        st.binary(max_size=200),
        st.tuples(MESSAGES, st.integers(0, 400), st.binary(min_size=1, max_size=3)).map(
            lambda t: _mutate(wire.encode(t[0]), t[1], t[2])
        ),
    )
)
def test_fuzz_the_server_only_ever_meets_protocol_errors_and_never_hangs(payload: bytes) -> None:
    async def run() -> None:
        async with server(echo_welcome) as (path, escaped):
            with trio.fail_after(5):
                async with await wire.connect(path) as client:
                    await client._stream.send_all(payload)
                    await client._stream.send_eof()
                    while True:  # the server answers what it can, then closes: never hangs
                        try:
                            await client.receive()
                        except (ChannelClosed, ProtocolError):
                            break
                # the server still serves
                async with await wire.connect(path) as other:
                    await other.send(Ping(9))
                    assert await other.receive() == Pong(9)
            assert escaped == []

    trio.run(run)


def _mutate(frame: bytes, at: int, junk: bytes) -> bytes:
    at %= len(frame) + 1
    return frame[:at] + junk + frame[at + len(junk) :]


# --- the socket's directory and its peers ----------------------------------------------------


async def test_an_unsafe_directory_is_refused_naming_the_problem(tmp_path: Path) -> None:
    loose = tmp_path / "loose"
    loose.mkdir(mode=0o755)
    loose.chmod(0o755)
    with pytest.raises(UnsafeSocketPath, match=r"has mode 0755; it must be 0700"):
        await wire.serve(loose / "s.sock", echo_welcome)
    with pytest.raises(UnsafeSocketPath, match="does not exist"):
        await wire.serve(tmp_path / "absent" / "s.sock", echo_welcome)
    private = tmp_path / "private"
    private.mkdir(mode=0o700)
    (private / "s.sock").write_text("not a socket")
    with pytest.raises(UnsafeSocketPath, match="is not a socket"):
        await wire.serve(private / "s.sock", echo_welcome)
    if os.getuid() == 0:
        foreign = tmp_path / "foreign"
        foreign.mkdir(mode=0o700)
        os.chown(foreign, 65534, 65534)
        with pytest.raises(UnsafeSocketPath, match="owned by uid 65534"):
            await wire.serve(foreign / "s.sock", echo_welcome)


async def test_a_second_server_on_a_live_socket_is_refused() -> None:
    async with server(echo_welcome) as (path, _):
        with pytest.raises(OSError, match="another server") as caught:
            await wire.serve(path, echo_welcome)
        assert caught.value.errno == errno.EADDRINUSE


async def test_a_stale_socket_file_is_replaced(tmp_path: Path) -> None:
    tmp_path.chmod(0o700)
    stale = tmp_path / "agentd.sock"
    import socket as pysocket

    sock = pysocket.socket(pysocket.AF_UNIX, pysocket.SOCK_STREAM)
    sock.bind(str(stale))
    sock.close()  # a server that died and left its socket file
    async with server(echo_welcome, tmp_path) as (path, _), await wire.connect(path) as client:
        await client.send(Ping(1))
        assert await client.receive() == Pong(1)


@pytest.mark.skipif(os.getuid() != 0, reason="needs root to connect as another uid")
async def test_a_peer_of_another_uid_is_refused_and_logged(
    caplog: pytest.LogCaptureFixture,
) -> None:
    async with server(echo_welcome) as (path, escaped):
        path.parent.chmod(0o755)  # loosened after start: the peer check still holds
        path.chmod(0o666)
        code = """
            import os, socket, struct, sys
            os.setgid(65534); os.setuid(65534)
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            s.connect(sys.argv[1])
            body = b'{"type":"ping","seq":1}'
            s.sendall(struct.pack(">I", len(body)) + body)
            answer = b""
            while chunk := s.recv(4096):
                answer += chunk
            sys.stdout.write(answer[4:].decode())
        """
        done = await trio.run_process(
            python(code, str(path)), capture_stdout=True, capture_stderr=True, check=False
        )
        path.parent.chmod(0o700)
    assert done.returncode == 0, done.stderr
    # Told why, and nothing else: the handler never saw its ping (no pong, no welcome).
    reason = f"uid 65534 may not use this agentd: only uid {os.getuid()} may connect"
    assert json.loads(done.stdout) == {"type": "error", "reason": reason, "code": 77}
    assert "refused a connection from pid" in caplog.text
    assert escaped == []


def test_a_full_listen_queue_is_server_busy_not_a_dead_socket(tmp_path: Path) -> None:
    """Issue 15, row 8: trio takes a non-blocking connect's EAGAIN for "in progress" and hands
    back a socket that was never connected; ``connect`` says the server is busy instead."""
    import socket as pysocket

    path = tmp_path / "full.sock"
    listener = pysocket.socket(pysocket.AF_UNIX, pysocket.SOCK_STREAM)
    listener.bind(str(path))
    listener.listen(1)  # and never accepts

    async def main() -> list[str]:
        outcomes = []
        for _ in range(4):
            try:
                connection = await wire.connect(path)
            except wire.ServerBusy as exc:
                outcomes.append(f"busy {errno.errorcode[exc.errno]}")
            else:
                assert connection.peer.pid == os.getpid()
                await connection.aclose()
                outcomes.append("connected")
        return outcomes

    try:
        outcomes = trio.run(main)
    finally:
        listener.close()
    assert outcomes[-1] == "busy EAGAIN"
    assert "connected" in outcomes


def test_connect_to_nothing_is_an_os_error(tmp_path: Path) -> None:
    async def main() -> None:
        with pytest.raises(FileNotFoundError):
            await wire.connect(tmp_path / "nobody.sock")

    trio.run(main)


async def test_a_cancelled_receive_loses_nothing_of_a_frame_half_arrived(tmp_path: Path) -> None:
    """The harness's loop cancels ``receive`` to beat on time; a frame whose header has
    arrived but not its body must be received whole afterwards."""
    frame = wire.encode(wire.Prompt("p1", "x" * 1000, {}))
    async with _pair(tmp_path) as (server, raw), trio.open_nursery() as nursery:
        await raw.send_all(frame[:10])
        scope = trio.CancelScope()

        async def receive() -> None:
            with scope:
                await server.receive()

        nursery.start_soon(receive)
        await trio.testing.wait_all_tasks_blocked()  # it holds the header, waits for the rest
        scope.cancel()
        await trio.testing.wait_all_tasks_blocked()
        assert scope.cancelled_caught
        await raw.send_all(frame[10:])
        assert await server.receive() == wire.Prompt("p1", "x" * 1000, {})


@given(st.integers(0, 2**63 - 1))
def test_the_ping_fast_path_frames_exactly_what_the_codec_does(seq: int) -> None:
    assert ping_frame(seq) == wire.encode(wire.Ping(seq))


async def test_send_nowait_says_when_the_socket_is_full(tmp_path: Path) -> None:
    async with _pair(tmp_path) as (server, raw):
        sent = 0
        while server.send_nowait(wire.encode(wire.Ping(sent + 1))):
            sent += 1
            assert sent < 1_000_000, "the socket never filled"
        received = bytearray()
        while len(received) < len(wire.encode(wire.Ping(1))) * min(sent, 9):
            received += await raw.receive_some(65536)
        assert received.startswith(wire.encode(wire.Ping(1)))


async def test_the_socket_file_appears_only_once_it_accepts(tmp_path: Path) -> None:
    """A client that connects the moment the file appears is never refused (a daemon that
    bound before it listened was taken for "no agentd" by a client started beside it); and
    the private name it was bound under is gone."""
    tmp_path.chmod(0o700)
    path = tmp_path / "agentd.sock"
    refused: list[int] = []
    stop = threading.Event()

    def watch() -> None:
        while not stop.is_set():
            if path.exists():
                with pysocket.socket(pysocket.AF_UNIX, pysocket.SOCK_STREAM) as sock:
                    try:
                        sock.connect(str(path))
                    except ConnectionRefusedError:
                        refused.append(1)
                    except FileNotFoundError:
                        pass
                while path.exists() and not stop.is_set():
                    pass

    watcher = threading.Thread(target=watch)
    watcher.start()
    try:
        for _ in range(50):
            async with trio.open_nursery() as nursery:
                await nursery.start(wire.serve, path, echo_welcome)
                nursery.cancel_scope.cancel()
            await trio.sleep(0.001)
    finally:
        stop.set()
        watcher.join()
    assert refused == []
    assert os.listdir(tmp_path) == []


def test_a_starting_daemon_is_found_by_the_socket_it_serves(tmp_path: Path) -> None:
    """What a client waits for (``starting``): a process of ours whose command line says
    ``agentd`` and whose socket, relative to its own working directory, is the one asked for."""
    tmp_path.chmod(0o700)
    pause = "import signal; signal.pause()"
    daemon = subprocess.Popen(
        [sys.executable, "-c", pause, "agentd", "--socket", "./run/../a.sock", "--", "agentd"],
        cwd=tmp_path,
    )
    try:
        deadline = time.monotonic() + 30
        while not starting(str(tmp_path / "a.sock")) and time.monotonic() < deadline:
            time.sleep(0.01)
        assert starting(str(tmp_path / "a.sock"))
        assert not starting(str(tmp_path / "b.sock"))
    finally:
        daemon.kill()
        daemon.wait()
    assert not starting(str(tmp_path / "a.sock"))
