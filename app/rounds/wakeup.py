"""The wake-up that tells a round's listeners (console and candidate streams, on any
worker) that its log has grown. The log in the database is the truth; a wake-up may
also hand over the event itself with the id of the round's event before it (`prev`),
so that a stream holding exactly that one sends it on without reading the log back. A
stream that holds anything else (a wake-up lost, one without the event, a pile-up past
`PENDING_MAX`) reads `id > last seen`; so a lost wake-up costs at most the streams'
periodic re-read (`REREAD_S`), never an event. A wake-up for an event a stream has
already (the writer's own, then the feed's copy of it) wakes nothing.

Per process, a `Hub` keeps one asyncio.Event per waiting stream. Wake-ups reach it
- from writes in this process, after their commit (`publish`, from any thread);
- on PostgreSQL, from `LISTEN tracedojo_rounds`: every append sends `pg_notify` inside
  its transaction, delivered to every worker on every host at commit (one listening
  connection per worker, reconnecting, started with the app);
- on SQLite, whose workers share a file and nothing else, from a tail of the log: one
  cheap indexed query per worker every `poll_s` for ids past the last one seen.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections import defaultdict, deque

import orjson
from sqlalchemy import func, select, text

from app.db.base import Store
from app.db.staff import RoundEvent

log = logging.getLogger("tracedojo.wakeup")
CHANNEL = "tracedojo_rounds"
REREAD_S = 10.0  # a stream re-reads the log at least this often, and sends a keep-alive
PENDING_MAX = 1000  # events handed to one stream and not yet sent; past this it reads the log
NOTIFY_MAX = 7000  # bytes of event JSON a NOTIFY carries (PostgreSQL's payload limit is 8000)


class Waiter:
    """One stream's interest in one round: `kinds` None for every kind. Only a stream of
    every kind is handed events (`pending`: (id, prev, event or None)): a filtered one
    cannot tell from `prev` whether it missed an event of its kinds, so it reads."""

    def __init__(self, round_id: int, kinds: frozenset[str] | None):
        self.round_id, self.kinds = round_id, kinds
        self.event = asyncio.Event()
        self.seen = 0  # the highest event id this stream has sent or been handed
        self.pending: deque[tuple[int, int | None, dict | None]] = deque()
        self.must_read = False


class Hub:
    def __init__(self) -> None:
        self._waiters: dict[int, set[Waiter]] = defaultdict(set)
        self._loop: asyncio.AbstractEventLoop | None = None

    def bind(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop

    def subscribe(self, round_id: int, kinds: frozenset[str] | None = None) -> Waiter:
        """Register before reading the log: a wake-up between the read and the wait is kept."""
        w = Waiter(round_id, kinds)
        self._waiters[round_id].add(w)
        return w

    def unsubscribe(self, w: Waiter) -> None:
        ws = self._waiters.get(w.round_id)
        if ws is not None:
            ws.discard(w)
            if not ws:
                del self._waiters[w.round_id]

    def publish(self, round_id: int, kind: str | None = None, eid: int | None = None, prev: int | None = None,
                event: dict | None = None) -> None:
        """Wake the round's waiters for `kind` (None: all), handing over event `eid` (its
        JSON `event`, the round's previous event `prev`) where known. Safe from any thread."""
        loop = self._loop
        if loop is None or loop.is_closed():
            return
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        try:
            if running is loop:
                self._wake(round_id, kind, eid, prev, event)
            else:
                loop.call_soon_threadsafe(self._wake, round_id, kind, eid, prev, event)
        except RuntimeError:  # the loop closed meanwhile (shutdown)
            pass

    def wake_all(self) -> None:
        """After a gap in the wake-up feed (a listener reconnected): everyone re-reads."""
        loop = self._loop
        if loop is not None and not loop.is_closed():
            loop.call_soon_threadsafe(self._wake_all)

    def _wake_all(self) -> None:
        for ws in self._waiters.values():
            for w in ws:
                w.must_read = True
                w.event.set()

    def _wake(self, round_id: int, kind: str | None, eid: int | None = None, prev: int | None = None,
              event: dict | None = None) -> None:
        for w in self._waiters.get(round_id, ()):
            if eid is not None and eid <= w.seen:
                continue  # it has this one already
            if w.kinds is None:
                if eid is None or len(w.pending) >= PENDING_MAX:
                    w.must_read = True
                else:
                    w.pending.append((eid, prev, event))
                if eid is not None:
                    w.seen = eid
            # (a filtered stream's `seen` is what it has read: everything up to it is sent)
            if kind is None or w.kinds is None or kind in w.kinds:
                w.event.set()

    def rounds(self) -> int:
        return len(self._waiters)


HUB = Hub()


def notify_sql(db, round_id: int, kind: str, eid: int | None = None, prev: int | None = None,
               event: dict | None = None) -> None:
    """Inside an append's transaction on PostgreSQL: delivered to every listener at commit,
    not at all on rollback. The payload is `round kind id prev json`, the JSON left out
    when it is too long for a notification (the listeners' streams read that one)."""
    if db.bind.dialect.name == "postgresql":
        payload = f"{round_id} {kind}"
        if eid is not None:
            payload += f" {eid} {prev if prev is not None else -1}"
            body = orjson.dumps(event).decode() if event is not None else ""
            if len(body.encode()) <= NOTIFY_MAX:
                payload += " " + body
        db.execute(text("SELECT pg_notify(:c, :p)"), {"c": CHANNEL, "p": payload})


def parse_notify(payload: str) -> tuple[int, str | None, int | None, int | None, dict | None] | None:
    """(round, kind, id, prev, event) from a notification's payload; None if malformed."""
    parts = payload.split(" ", 4)
    if not parts[0].isdigit():
        return None
    kind = parts[1] if len(parts) > 1 and parts[1] else None
    eid = prev = event = None
    if len(parts) >= 4 and parts[2].isdigit() and parts[3].lstrip("-").isdigit():
        eid, prev = int(parts[2]), int(parts[3])
        if prev < 0:
            prev = None
        if len(parts) == 5:
            try:
                event = orjson.loads(parts[4])
            except orjson.JSONDecodeError:
                event = None
    return int(parts[0]), kind, eid, prev, event


class _Feed(threading.Thread):
    """A background thread feeding HUB from outside this process."""

    def __init__(self, name: str):
        super().__init__(name=name, daemon=True)
        self.stopping = threading.Event()

    def stop(self) -> None:
        self.stopping.set()


class PostgresListener(_Feed):
    def __init__(self, url: str):
        super().__init__("tracedojo-listen")
        self.url = url
        self.connected = threading.Event()

    def run(self) -> None:
        import psycopg
        from sqlalchemy.engine import make_url

        u = make_url(self.url)
        dsn = u.set(drivername="postgresql").render_as_string(hide_password=False)
        backoff = 0.2
        while not self.stopping.is_set():
            try:
                with psycopg.connect(dsn, autocommit=True, connect_timeout=5) as conn:
                    conn.execute(f"LISTEN {CHANNEL}")
                    self.connected.set()
                    backoff = 0.2
                    HUB.wake_all()  # whatever was appended while we were not listening
                    while not self.stopping.is_set():
                        for n in conn.notifies(timeout=0.5):
                            got = parse_notify(n.payload)
                            if got is not None:
                                HUB.publish(*got)
            except Exception as e:  # a restart, a network cut: listen again shortly
                self.connected.clear()
                if self.stopping.is_set():
                    return
                log.warning("round wake-up listener lost its connection (%s); reconnecting", str(e).splitlines()[0][:160])
                self.stopping.wait(backoff)
                backoff = min(backoff * 2, 5.0)


class LogTail(_Feed):
    """SQLite: the log's new ids, read every `poll_s` (other workers' appends)."""

    def __init__(self, store: Store, poll_s: float):
        super().__init__("tracedojo-tail")
        self.store, self.poll_s = store, poll_s

    def run(self) -> None:
        last = None
        while not self.stopping.wait(self.poll_s):
            try:
                with self.store.read() as db:
                    if last is None:
                        last = db.scalar(select(func.max(RoundEvent.id))) or 0
                        continue
                    rows = db.execute(select(RoundEvent.id, RoundEvent.round_id, RoundEvent.kind)
                                      .where(RoundEvent.id > last).order_by(RoundEvent.id).limit(5000)).all()
                for rid_, round_id, kind in rows:
                    HUB.publish(round_id, kind, rid_)  # no event: a stream that lacks it reads it
                    last = rid_
            except Exception as e:  # a locked or missing file: the streams' re-read covers it
                log.warning("round log tail failed: %s", str(e).splitlines()[0][:160])


def start_feed(store: Store, poll_s: float) -> _Feed | None:
    """The feed this database needs, started; None when this process alone writes."""
    if store.engine.dialect.name == "postgresql":
        feed: _Feed = PostgresListener(store.url)
    elif poll_s > 0:
        feed = LogTail(store, poll_s)
    else:
        return None
    feed.start()
    return feed
