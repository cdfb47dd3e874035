"""The load run's harness (``benchmarks/agentd.py --load``): a real ``run_harness`` whose
engine records each prompt it takes in its transcript (durably, as a harness would) and
nothing else, so the run can count what every engine saw."""

from __future__ import annotations

import trio

from tether import HarnessContext, Receiver, run_harness
from tether.harness import Command
from tether.wire import Prompt


async def engine(commands: Receiver[Command], ctx: HarnessContext) -> None:
    async for command in commands:
        if isinstance(command, Prompt):
            await ctx.transcript.append_message("user", command.text)
    await trio.lowlevel.checkpoint()


if __name__ == "__main__":
    raise SystemExit(run_harness(engine))
