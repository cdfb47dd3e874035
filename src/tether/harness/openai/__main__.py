"""``python -m tether.harness.openai --base-url URL --model NAME [--api-key-env VAR] [--system
TEXT] [--max-turns N]``: a harness for ``tether agentd`` driving an OpenAI-compatible model."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence

EX_USAGE, EX_UNAVAILABLE = 64, 69


def parser() -> argparse.ArgumentParser:
    """The harness's command line."""
    top = argparse.ArgumentParser(
        prog="python -m tether.harness.openai",
        description="A harness (run it under tether agentd) whose engine streams chat"
        " completions from an OpenAI-compatible server and runs the shell calls the model"
        " makes.",
        epilog="example:\n  tether agentd -- python -m tether.harness.openai"
        " --base-url http://127.0.0.1:8000/v1 --model qwen3",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )  # fmt: skip
    top.add_argument("--base-url", required=True, help="the API's base URL (requests go to"
                     " BASE_URL/chat/completions)")  # fmt: skip
    top.add_argument("--model", required=True, help="the model's name")
    top.add_argument("--api-key-env", default=None, metavar="VAR",
                     help="the environment variable holding the API key (none: no key"
                     " sent)")  # fmt: skip
    top.add_argument("--system", default=None, metavar="TEXT", help="a system message")
    top.add_argument("--max-turns", type=int, default=20, metavar="N",
                     help="model requests per prompt at most (default 20)")  # fmt: skip
    top.add_argument("--tool-timeout", type=float, default=600.0, metavar="SECONDS",
                     help="seconds a shell call may run (default 600)")  # fmt: skip
    top.add_argument("--stream-timeout", type=float, default=600.0, metavar="SECONDS",
                     help="seconds without a byte from the server before its request fails"
                     " (default 600); agentd's stall announcement comes first")  # fmt: skip
    return top


def main(argv: Sequence[str]) -> int:
    """Parse ``argv`` and run the harness; its exit code."""
    args = parser().parse_args(argv)
    api_key = None
    if args.api_key_env:
        api_key = os.environ.get(args.api_key_env)
        if not api_key:
            print(f"${args.api_key_env} is not set", file=sys.stderr)
            return EX_USAGE
    try:
        from . import ModelSettings, OpenAIEngine
    except ImportError as exc:
        print(f"{exc}: pip install 'tether[openai]'", file=sys.stderr)
        return EX_UNAVAILABLE
    from .._runtime import run_harness

    settings = ModelSettings(args.base_url, args.model, api_key, args.system,
                             max(1, args.max_turns), args.tool_timeout,
                             args.stream_timeout)  # fmt: skip
    return run_harness(OpenAIEngine(settings))


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
