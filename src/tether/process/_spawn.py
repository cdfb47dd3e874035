"""Starting one child: a new session, a clean signal mask, default dispositions, marked env.

``os.posix_spawn`` does this without a ``preexec_fn`` (unsafe once threads exist): ``setsid``
gives the child its own session and process group, ``setsigmask=()`` clears a mask inherited
from a harness that blocked SIGTERM to read it from a signalfd (a blocked mask survives fork and
exec; subprocess and trio keep it), and ``setsigdef`` undoes ignored dispositions such as
Python's SIGPIPE. posix_spawn has no ``chdir``, so a ``cwd`` goes through ``/bin/sh -c 'cd'``
and ``exec``, after tether has checked both the directory and the program.
"""

from __future__ import annotations

import errno
import os
import shutil
from collections.abc import Mapping, Sequence
from typing import Self, cast

from .._procfs import CATCHABLE

DEFAULT_DISPOSITIONS = CATCHABLE
"""The signals a child gets back at their default (``setsigdef``)."""
_CHDIR_THEN_EXEC = 'cd -- "$0" && exec "$@"'


class SpawnError(OSError):
    """A child could not be started; ``program`` names what was to run, ``errno`` why.

    Nothing was left running. As ``OSError`` itself does, one with ``ENOENT`` is also a
    ``FileNotFoundError`` and one with ``EACCES`` a ``PermissionError``, so code written for
    ``subprocess`` (or the MCP SDK's client) catches it as it would theirs.
    """

    def __new__(cls, program: str, code: int, detail: str | None = None) -> Self:
        kind = _KINDS.get(code, cls) if cls is SpawnError else cls
        message = f"cannot execute {program!r}: {detail or os.strerror(code)}"
        return super().__new__(cast("type[Self]", kind), code, message)

    def __init__(self, program: str, code: int, detail: str | None = None) -> None:
        super().__init__(code, f"cannot execute {program!r}: {detail or os.strerror(code)}")
        self.program = program
        """The program that could not be started."""


class _NotFound(SpawnError, FileNotFoundError):
    """A ``SpawnError`` for ``ENOENT``: the program or the working directory is missing."""


class _Denied(SpawnError, PermissionError):
    """A ``SpawnError`` for ``EACCES``: not executable, or a directory."""


for _kind in (_NotFound, _Denied):  # tracebacks and reprs name the public class
    _kind.__name__ = _kind.__qualname__ = "SpawnError"
    _kind.__module__ = "tether.process"
_KINDS: dict[int, type[SpawnError]] = {errno.ENOENT: _NotFound, errno.EACCES: _Denied}


def resolve(program: str, env: Mapping[str, str], cwd: str | None) -> str:
    """The path that will be executed for ``program``, as ``execvp`` would find it.

    Raises:
        SpawnError: not found, not a file, or not executable.
    """
    if "/" in program:
        path = os.path.join(cwd, program) if cwd is not None else program
        if not os.path.exists(path):
            raise SpawnError(program, errno.ENOENT)
        if os.path.isdir(path):
            raise SpawnError(program, errno.EACCES, "is a directory")
        if not os.access(path, os.X_OK):
            raise SpawnError(program, errno.EACCES)
        return os.path.abspath(path)
    search = env.get("PATH", os.defpath)
    found = _FOUND.get((program, search))
    if found is None or not os.access(found, os.X_OK):
        found = shutil.which(program, path=search)
        if found is None:
            raise SpawnError(program, errno.ENOENT, "not found on PATH")
        if os.path.isabs(found):  # a relative PATH entry depends on the working directory
            if len(_FOUND) >= 256:
                _FOUND.clear()
            _FOUND[(program, search)] = found
    return found


_FOUND: dict[tuple[str, str], str] = {}
"""Programs found on a ``PATH`` before, as a shell's hash table keeps them (a new program
earlier on the ``PATH`` is seen once the old one goes or 256 others were looked up)."""


def prepare(argv: Sequence[str], env: Mapping[str, str], cwd: str | None) -> tuple[str, list[str]]:
    """The path to execute and its arguments for ``argv`` in ``cwd``, checked first.

    Raises:
        SpawnError: the program or ``cwd`` is unusable.
        ValueError: ``argv`` is empty.
    """
    if not argv:
        raise ValueError("argv must name a program")
    program = argv[0]
    if cwd is not None and not os.path.isdir(cwd):
        raise SpawnError(program, errno.ENOENT, f"working directory {cwd!r} does not exist")
    path = resolve(program, env, cwd)
    if cwd is None:
        return path, list(argv)
    return "/bin/sh", ["/bin/sh", "-c", _CHDIR_THEN_EXEC, cwd, path, *argv[1:]]


def spawn_process(
    argv: Sequence[str],
    env: Mapping[str, str],
    cwd: str | None,
    *,
    output: int | None = None,
    fds: Mapping[int, int] | None = None,
) -> int:
    """Start ``argv`` in a new session with a clean signal state; its pid.

    With ``output`` (an open file descriptor) the child's stdout and stderr go there and its
    stdin is ``/dev/null``: a daemon's children must not hold its terminal. ``fds`` maps the
    child's descriptor numbers to ours, dup'ed into it.

    Raises:
        SpawnError: the program or ``cwd`` is unusable, or the kernel refused to execute it.
        ValueError: ``argv`` is empty.
    """
    path, args = prepare(argv, env, cwd)
    program = argv[0]
    try:
        return os.posix_spawn(
            path,
            args,
            dict(env),
            setsid=True,
            setsigmask=(),
            setsigdef=DEFAULT_DISPOSITIONS,
            file_actions=_redirect(output) + _dup(fds or {}) + strays(set(fds or ())),
        )
    except OSError as exc:
        raise SpawnError(program, exc.errno or errno.EIO) from exc


def strays(keep: set[int]) -> list[tuple[int, ...] | tuple[int, int, str, int, int]]:
    """Close actions for every inheritable descriptor of ours above 2 but those in ``keep``:
    a child gets its stdio and what it was passed, as under ``subprocess``'s ``close_fds``
    (``posix_spawn`` has no ``closefrom``, and a descriptor a library left inheritable would
    otherwise keep a pipe or a socket of ours open in every tool)."""
    actions: list[tuple[int, ...] | tuple[int, int, str, int, int]] = []
    for name in os.listdir("/proc/self/fd"):
        fd = int(name)
        if fd <= 2 or fd in keep:
            continue
        try:
            if os.get_inheritable(fd):
                actions.append((os.POSIX_SPAWN_CLOSE, fd))
        except OSError:
            continue  # the listing's own descriptor, closed since
    return actions


def _dup(fds: Mapping[int, int]) -> list[tuple[int, ...] | tuple[int, int, str, int, int]]:
    return [(os.POSIX_SPAWN_DUP2, ours, target) for target, ours in fds.items()]


def _redirect(output: int | None) -> list[tuple[int, ...] | tuple[int, int, str, int, int]]:
    if output is None:
        return []
    return [
        (os.POSIX_SPAWN_OPEN, 0, os.devnull, os.O_RDONLY, 0),
        (os.POSIX_SPAWN_DUP2, output, 1),
        (os.POSIX_SPAWN_DUP2, output, 2),
    ]
