"""The wake-up that tells a round's listeners (console and candidate streams, on any
worker) that its log has grown. It carries no data: the log in the database is the
truth, and a woken stream reads `id > last seen` from it. So a lost wake-up costs at
most the streams' periodic re-read (`REREAD_S`), never an event.

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
from collections import defaultdict

from sqlalchemy import func, select, text

from app.db.base import Store
from app.db.staff import RoundEvent

log = logging.getLogger("tracedojo.wakeup")
CHANNEL = "tracedojo_rounds"
REREAD_S = 10.0  # a stream re-reads the log at least this often, and sends a keep-alive


class Waiter:
    """One stream's interest in one round: `kinds` None for every kind."""

    def __init__(self, round_id: int, kinds: frozenset[str] | None):
        self.round_id, self.kinds = round_id, kinds
        self.event = asyncio.Event()


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

    def publish(self, round_id: int, kind: str | None = None) -> None:
        """Wake the round's waiters for `kind` (None: all). Safe from any thread."""
        loop = self._loop
        if loop is None or loop.is_closed():
            return
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        try:
            if running is loop:
                self._wake(round_id, kind)
            else:
                loop.call_soon_threadsafe(self._wake, round_id, kind)
        except RuntimeError:  # the loop closed meanwhile (shutdown)
            pass

    def wake_all(self) -> None:
        """After a gap in the wake-up feed (a listener reconnected): everyone re-reads."""
        loop = self._loop
        if loop is not None and not loop.is_closed():
            loop.call_soon_threadsafe(lambda: [w.event.set() for ws in self._waiters.values() for w in ws])

    def _wake(self, round_id: int, kind: str | None) -> None:
        for w in self._waiters.get(round_id, ()):
            if kind is None or w.kinds is None or kind in w.kinds:
                w.event.set()

    def rounds(self) -> int:
        return len(self._waiters)


HUB = Hub()


def notify_sql(db, round_id: int, kind: str) -> None:
    """Inside an append's transaction on PostgreSQL: delivered to every listener at commit,
    not at all on rollback."""
    if db.bind.dialect.name == "postgresql":
        db.execute(text("SELECT pg_notify(:c, :p)"), {"c": CHANNEL, "p": f"{round_id} {kind}"})


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
                            rid, _, kind = n.payload.partition(" ")
                            if rid.isdigit():
                                HUB.publish(int(rid), kind or None)
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
                    HUB.publish(round_id, kind)
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
