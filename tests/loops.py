"""Tests on both loops: ``both_loops`` runs an ``async def`` test under ``trio.run`` and under
asyncio (``anyio.run`` with each backend), with the same assertions; its body waits with
anyio's functions, which work on either."""

from __future__ import annotations

import asyncio
import functools
import inspect
import textwrap
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import anyio
import pytest
import sniffio
import trio

LOOPS = ("trio", "asyncio")


def both_loops(test: Callable[..., Awaitable[None]]) -> Callable[..., None]:
    """``test`` as a plain test with a ``loop`` parameter, run once under each loop (its
    other parameters, fixtures included, are passed through)."""
    return _on_loops(test, LOOPS)


def both_loops_asyncio_slow(test: Callable[..., Awaitable[None]]) -> Callable[..., None]:
    """``both_loops``, with the asyncio run marked ``slow``: a test of several seconds whose
    asyncio half ``make test-slow`` (and CI) runs, keeping ``make test`` within its minutes."""
    return _on_loops(test, ("trio", pytest.param("asyncio", marks=pytest.mark.slow)))


def _on_loops(test: Callable[..., Awaitable[None]], loops: Sequence[object]) -> Callable[..., None]:
    def run(loop: str, **kwargs: Any) -> None:
        anyio.run(functools.partial(test, **kwargs), backend=loop)

    functools.update_wrapper(run, test)
    del run.__wrapped__  # pytest reads the signature below, not the test's
    signature = inspect.signature(test)
    loop = inspect.Parameter("loop", inspect.Parameter.KEYWORD_ONLY, annotation=str)
    params = [p.replace(kind=inspect.Parameter.KEYWORD_ONLY) for p in signature.parameters.values()]
    run.__signature__ = signature.replace(parameters=[loop, *params])  # type: ignore[attr-defined]
    return pytest.mark.parametrize("loop", loops)(run)


def run_on(loop: str, main: Callable[[], Awaitable[None]]) -> None:
    """``main()`` to its end under ``trio.run`` or ``asyncio.run`` themselves."""
    if loop == "trio":
        trio.run(main)
    else:
        asyncio.run(main())  # type: ignore[arg-type]


RUNNERS = {
    "trio": "import trio\ntrio.run(main)",
    "asyncio": "import asyncio\nasyncio.run(main())",
}


def program(code: str) -> str:
    """``code`` (which ends its ``main`` with ``RUN(main)``), run on the loop of this test."""
    return textwrap.dedent(code).replace("RUN(main)", RUNNERS[sniffio.current_async_library()])
