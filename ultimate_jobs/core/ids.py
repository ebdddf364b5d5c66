"""Time-ordered UUIDs (version 7), generated in Python: ids sort by creation, so the claim and the
newest-first listing walk an index in insertion order."""

from __future__ import annotations

import os
import threading
import time
import uuid

_lock = threading.Lock()
_last_ms = 0
_counter = 0


def uuid7() -> uuid.UUID:
    """A UUIDv7: 48 bits of Unix ms, then a 12-bit counter that keeps ids minted in one millisecond
    by this process strictly increasing, then 62 random bits (RFC 9562, method 1)."""
    return uuid.UUID(int=_uuid7_int())


def _uuid7_int() -> int:
    global _last_ms, _counter
    with _lock:
        ms = time.time_ns() // 1_000_000
        if ms <= _last_ms:
            _counter += 1
            if _counter > 0xFFF:  # 4,096 ids in one ms: borrow the next millisecond
                _last_ms += 1
                _counter = 0
            ms = _last_ms
        else:
            _last_ms, _counter = ms, int.from_bytes(os.urandom(2), "big") & 0x3FF
        counter = _counter
    rand = int.from_bytes(os.urandom(8), "big") & ((1 << 62) - 1)
    return (ms & ((1 << 48) - 1)) << 80 | 0x7 << 76 | counter << 64 | 0b10 << 62 | rand


def new_id() -> str:
    """A fresh job or run id as text (``str(uuid7())``, formatted without building the UUID object)."""
    h = f"{_uuid7_int():032x}"
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"
