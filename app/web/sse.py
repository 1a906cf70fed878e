"""A round's event log as Server-Sent Events: `id:` is the event's monotonic id, so a
browser that reconnects (EventSource does by itself, sending `Last-Event-ID`) or reloads
(and passes `?after=` from its page's data) gets exactly what it has not seen.

The stream holds no database connection while it waits: it reads `id > last` in the
thread pool, sends, and sleeps on its wake-up (app/rounds/wakeup.py) or `REREAD_S`,
whichever comes first, sending a keep-alive comment on the timeout. A stream of every
kind sends the events its wake-ups hand it while they follow on from the last one it
sent (each names the round's event before it), and reads the log only when they do
not. It ends itself after `MAX_STREAM_S` (the browser reconnects at once and resumes),
so a restart or a deploy never waits on a stream that would otherwise stay open for
the whole round.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable

import orjson
from fastapi import HTTPException, Request
from fastapi.responses import StreamingResponse
from starlette.concurrency import run_in_threadpool

from app.rounds import live
from app.rounds.wakeup import HUB, REREAD_S

MAX_STREAM_S = 300.0
BATCH = 500
RETRY_MS = 1000  # how soon EventSource reconnects after the stream ends or drops


def resume_from(request: Request) -> int:
    """Where to start: the Last-Event-ID header (a reconnect) wins over ?after= (a page
    that loaded the state up to that id); else from the start."""
    raw = request.headers.get("last-event-id") or request.query_params.get("after") or "0"
    if not (raw.isascii() and raw.isdigit() and len(raw) < 19):
        raise HTTPException(400, f"Last-Event-ID / after must be an event id (digits), got {raw[:24]!r}")
    return int(raw)


def frame(e: dict) -> bytes:
    return b"id: %d\nevent: %s\ndata: %s\n\n" % (e["id"], e["kind"].encode(), orjson.dumps(e))


def _handed(waiter, last: int) -> tuple[list[dict], bool]:
    """The handed events that follow on from `last`, and whether the log must be read
    (a gap: a wake-up lost, or one that came without its event)."""
    out = []
    while waiter.pending:
        eid, prev, e = waiter.pending.popleft()
        if eid <= last:
            continue
        if e is None or prev != last:
            return out, True
        out.append(e)
        last = eid
    return out, False


async def _events(store, round_pk: int, after: int, kinds: frozenset[str] | None,
                  extra: Callable[[dict], bytes] | None) -> AsyncIterator[bytes]:
    waiter = HUB.subscribe(round_pk, kinds)
    started = time.monotonic()
    last = after
    read = True  # the log, not the wake-ups: at the start, after a gap, and every REREAD_S
    try:
        yield b"retry: %d\n\n" % RETRY_MS
        while time.monotonic() - started < MAX_STREAM_S:
            waiter.event.clear()  # before the read: a wake-up during the read is kept
            if read or waiter.must_read or kinds is not None:
                waiter.pending.clear()  # what comes in during the read is kept (and skipped if read)
                waiter.must_read = False
                batch = await run_in_threadpool(live.events, store, round_pk, last, kinds, BATCH)
                read = len(batch) == BATCH
            else:
                batch, read = _handed(waiter, last)
            for e in batch:
                yield frame(e)
                last = e["id"]
            waiter.seen = max(waiter.seen, last)
            if batch and extra is not None:
                yield await run_in_threadpool(extra, batch[-1])
            if read or waiter.pending or waiter.must_read:
                continue
            try:
                await asyncio.wait_for(waiter.event.wait(), REREAD_S)
            except asyncio.TimeoutError:
                yield b": keep-alive\n\n"
                read = True
    finally:
        HUB.unsubscribe(waiter)


def stream(request: Request, store, round_pk: int, kinds: frozenset[str] | None = None,
           extra: Callable[[dict], bytes] | None = None) -> StreamingResponse:
    """The response; `extra(last event)` adds a frame after each batch (an htmx fragment
    of the state after it), called in the thread pool."""
    after = resume_from(request)
    return StreamingResponse(_events(store, round_pk, after, kinds, extra), media_type="text/event-stream",
                             headers={"Cache-Control": "no-store", "X-Accel-Buffering": "no"})
