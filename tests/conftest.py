"""Suite-wide guards.

Every async test must clean up after itself: a task still pending after the test's fixtures are torn
down is a leak (a watch nobody stops, a controller left running) and fails the test that left it.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest


@pytest.fixture(autouse=True)
async def no_leftover_tasks() -> AsyncIterator[None]:
    before = set(asyncio.all_tasks())
    yield
    current = asyncio.current_task()
    # Closing connections may need one more turn of the loop; give it a few before judging.
    for _ in range(5):
        leftover = [t for t in asyncio.all_tasks() if t is not current and t not in before and not t.done()]
        if not leftover:
            return
        await asyncio.sleep(0.01)
    names = ", ".join(sorted(t.get_name() + ":" + repr(t.get_coro())[:80] for t in leftover))
    for task in leftover:
        task.cancel()
    pytest.fail(f"the test left {len(leftover)} asyncio task(s) running: {names}")
