"""Helpers shared by the kube tests: waiting for a condition with a deadline (never a bare sleep)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable


async def eventually(condition: Callable[[], object], *, within: float = 5.0, what: str = "condition") -> None:
    """Poll ``condition`` until it is truthy; fail the test after ``within`` seconds."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + within
    while not condition():
        if loop.time() > deadline:
            raise AssertionError(f"timed out after {within}s waiting for {what}")
        await asyncio.sleep(0.01)
