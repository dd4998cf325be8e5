"""Micro-batching: requests that arrive while the model is busy, or within ``max_wait_ms`` of the first one, are
routed together (one encoder forward, one reranker forward over all their pairs). On a CPU or a GPU one call on
many tasks costs far less than as many calls on one each, so under concurrency throughput rises and nobody waits
more than one batch. ``max_wait_ms=0`` and ``max_tasks=1`` give the unbatched server the benchmark compares."""
from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field

from .router import Hit, Router

log = logging.getLogger(__name__)


@dataclass
class _Request:
    tasks: list[str]
    k: int
    done: asyncio.Future = field(default_factory=lambda: asyncio.get_running_loop().create_future())


class MicroBatcher:
    """One worker routes queued requests in batches of at most ``max_tasks`` tasks, in a thread off the event loop."""

    def __init__(self, router: Router, max_wait_ms: float = 5.0, max_tasks: int = 64):
        self.router, self.max_wait, self.max_tasks = router, max_wait_ms / 1000, max(1, max_tasks)
        self.queue: asyncio.Queue[_Request] = asyncio.Queue()
        self.batches = 0
        self._worker: asyncio.Task | None = None

    async def route(self, tasks: list[str], k: int) -> list[list[Hit]]:
        if self._worker is None or self._worker.done():
            self._worker = asyncio.get_running_loop().create_task(self._run())
        request = _Request(tasks, k)
        await self.queue.put(request)
        return await request.done

    async def _collect(self) -> list[_Request]:
        batch = [await self.queue.get()]
        size = len(batch[0].tasks)
        deadline = asyncio.get_running_loop().time() + self.max_wait
        while size < self.max_tasks:
            try:
                wait = deadline - asyncio.get_running_loop().time()
                nxt = self.queue.get_nowait() if wait <= 0 else await asyncio.wait_for(self.queue.get(), wait)
            except (asyncio.QueueEmpty, asyncio.TimeoutError):
                break
            if size + len(nxt.tasks) > self.max_tasks:
                self.queue.put_nowait(nxt)  # next batch; order among waiting requests does not matter
                break
            batch.append(nxt)
            size += len(nxt.tasks)
        return batch

    async def _run(self) -> None:
        while True:
            batch = await self._collect()
            tasks = [t for r in batch for t in r.tasks]
            try:
                results = await asyncio.to_thread(self.router.route, tasks, max(r.k for r in batch))
            except Exception as exc:  # noqa: BLE001 - each caller gets the error, the worker goes on
                log.exception("routing a batch of %d tasks failed", len(tasks))
                for r in batch:
                    if not r.done.done():
                        r.done.set_exception(exc)
                continue
            self.batches += 1
            start = 0
            for r in batch:
                if not r.done.done():
                    r.done.set_result([hits[:r.k] for hits in results[start:start + len(r.tasks)]])
                start += len(r.tasks)
