"""The ``tether`` command: ``demo``, ``run``, ``agentd``, ``ps``, ``start``, ``send``, ``stop``,
``reset``, ``events``, ``logs`` and ``transcript show|repair``.

Each command imports what it needs when it runs: ``tether run`` never imports trio, so it
starts as fast as the interpreter does.
"""

from __future__ import annotations

import os
import sys

TYPE_CHECKING = False  # ``collections.abc`` and ``typing`` cost start-up time
if TYPE_CHECKING:
    import signal
    from collections.abc import Sequence
else:
    import _signal as signal  # without its enums: see tether._procfs


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``tether`` console script; returns the exit code."""
    args = list(sys.argv[1:] if argv is None else argv)
    if args[:1] == ["run"]:
        from .._procfs import CATCHABLE  # standard library only, and needed next anyway

        # Before anything else runs: a signal from now on waits for ``Init`` to forward it.
        mask = signal.pthread_sigmask(signal.SIG_BLOCK, CATCHABLE)
        from ._run import main as run

        code = run(args[1:], mask)
        if argv is None:  # the command itself: skip the interpreter's teardown, as tini has none
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(code)
        return code
    from ._main import main as everything_else

    return everything_else(args)


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
