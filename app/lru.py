"""A least-recently-used cache bounded in bytes, that builds each missing value once.

Counting entries is no bound: one instance is 2 MB, another (a million slices) 300 MB.
Each value's size is asked again when the cache is trimmed, since an instance grows as
its rank traces are built on demand. Concurrent requests for the same missing key wait
for the one build in progress instead of building it again (a new round's page, its
timeline and its tools arrive together).
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from concurrent.futures import Future
from typing import Callable, Generic, Hashable, TypeVar

V = TypeVar("V")


class ByteLRU(Generic[V]):
    def __init__(self, max_bytes: int, size_of: Callable[[V], int], max_building: int = 2):
        self.max_bytes = max_bytes
        self._size_of = size_of
        self._items: OrderedDict[Hashable, V] = OrderedDict()
        self._building: dict[Hashable, Future] = {}
        self._lock = threading.Lock()
        # Builds at once in this process: each may hold hundreds of MB while it runs.
        self._build_slots = threading.BoundedSemaphore(max_building)

    def get(self, key: Hashable, build: Callable[[], V]) -> V:
        with self._lock:
            if key in self._items:
                self._items.move_to_end(key)
                return self._items[key]
            pending = self._building.get(key)
            if pending is None:
                pending = self._building[key] = Future()
                mine = True
            else:
                mine = False
        if not mine:
            return pending.result()
        try:
            with self._build_slots:
                value = build()
        except BaseException as e:
            with self._lock:
                del self._building[key]
            pending.set_exception(e)
            raise
        with self._lock:
            del self._building[key]
            self._items[key] = value
            self._trim()
        pending.set_result(value)
        return value

    def _trim(self) -> None:
        """Drop the least recently used until the rest fits; the newest always stays (a
        value larger than the whole budget is still served, just not kept beside others)."""
        total = sum(self._size_of(v) for v in self._items.values())
        while total > self.max_bytes and len(self._items) > 1:
            _, old = self._items.popitem(last=False)
            total -= self._size_of(old)
