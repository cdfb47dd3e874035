"""A small real harness: ``python -m tether.harness.example``.

Its engine runs a child agent for each prompt (which the harness recorded as the engine took
it) through ``ctx.tool`` and records the answer. The child agent is a Python script that
streams a line every 0.1 s, starts a ``setsid`` grandchild, and on SIGINT writes ``agent got
SIGINT`` to ``$TETHER_EXAMPLE_SIGNAL_FILE`` (if set) and exits 0 (with
``TETHER_EXAMPLE_STUBBORN=1`` it ignores SIGINT, so stopping it takes the SIGTERM step). With
``TETHER_EXAMPLE_WEDGE_FILE=path`` the first harness to see that file appear removes it and
blocks its whole process: a phantom for agentd to find. With
``TETHER_EXAMPLE_STRAY_CLONE=1`` the engine commits incident 004's bug: it upgrades its weak
sender and keeps the strong one. With ``TETHER_EXAMPLE_BACKEND=asyncio`` it runs under
``asyncio.run`` (the engine is written against anyio, so it is the same code). Settings come
from the environment that agentd sets (see ``run_harness``); the tests and the demo drive it.
"""

from __future__ import annotations

import logging
import os
import sys
import time

import anyio

from ..channels import Receiver
from ..wire import Prompt
from ._context import Command, HarnessContext
from ._runtime import run_harness

logger = logging.getLogger("tether.harness.example")

AGENT = """
import os, signal, subprocess, sys, time
def bye(*_):
    path = os.environ.get("TETHER_EXAMPLE_SIGNAL_FILE")
    if path:
        with open(path, "a") as f:
            f.write("agent got SIGINT\\n")
    sys.exit(0)
signal.signal(signal.SIGINT, signal.SIG_IGN if os.environ.get("TETHER_EXAMPLE_STUBBORN") else bye)
subprocess.Popen(["setsid", "sleep", "600"])
for i in range(int(sys.argv[1])):
    print(f"agent: thinking {i}", flush=True)
    time.sleep(0.1)
"""


async def engine(commands: Receiver[Command], ctx: HarnessContext) -> None:
    """Answer each prompt by running one child agent for it."""
    wedge = os.environ.get("TETHER_EXAMPLE_WEDGE_FILE")
    async with anyio.create_task_group() as nursery:
        if wedge:
            nursery.start_soon(_wedge_when, wedge)
        await _answer(commands, ctx)
        nursery.cancel_scope.cancel()


async def _wedge_when(path: str) -> None:
    """A test switch: once ``path`` exists, remove it and block the whole run, so the
    connection loop stops answering pings and signals go unread while the pid lives on (a
    phantom, and only one: the file is gone for the next harness)."""
    while True:
        await anyio.sleep(0.02)
        try:
            os.unlink(path)
        except FileNotFoundError:
            continue
        logger.warning("wedging this harness (test switch %s)", path)
        time.sleep(3600)  # noqa: ASYNC251


async def _answer(commands: Receiver[Command], ctx: HarnessContext) -> None:
    logger.info("engine started: %d dangling tool calls", len(ctx.transcript.dangling()))
    if ctx.interrupted is not None:  # its turn is sealed; this engine does not resume it
        logger.info("prompt %s was cut short by an earlier harness", ctx.interrupted.prompt_id)
    stray = ctx.requeue.upgrade() if os.environ.get("TETHER_EXAMPLE_STRAY_CLONE") else None
    async for command in commands:
        if not isinstance(command, Prompt):
            continue
        steps = str(command.meta.get("steps", 1_000_000))

        async def run_agent(steps: str = steps) -> int | None:
            child = await ctx.children.spawn([sys.executable, "-c", AGENT, steps], name="agent")
            return await child.wait()

        code = await ctx.tool("agent", {"prompt": command.text}, run_agent)
        await ctx.transcript.append_message("assistant", f"the agent exited with {code}")
    logger.info("engine: the command channel closed")
    del stray


def main() -> int:
    """Run the example engine as a harness."""
    return run_harness(engine, backend=os.environ.get("TETHER_EXAMPLE_BACKEND", "trio"))


if __name__ == "__main__":
    raise SystemExit(main())
