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
    return _uuid7_ints(1)[0]


def _uuid7_ints(count: int) -> list[int]:
    """``count`` UUIDv7s as ints, in minting order: one lock, one clock read and one read of the OS's
    randomness for all of them."""
    global _last_ms, _counter
    stamps: list[tuple[int, int]] = []
    with _lock:
        ms = time.time_ns() // 1_000_000
        for _ in range(count):
            if ms <= _last_ms:
                _counter += 1
                if _counter > 0xFFF:  # 4,096 ids in one ms: borrow the next millisecond
                    _last_ms += 1
                    _counter = 0
            else:
                _last_ms, _counter = ms, int.from_bytes(os.urandom(2), "big") & 0x3FF
            stamps.append((_last_ms, _counter))
    rand = os.urandom(8 * count)
    return [
        (stamp & _MS_MASK) << 80
        | 0x7 << 76
        | counter << 64
        | 0b10 << 62
        | int.from_bytes(rand[8 * n : 8 * n + 8]) & _RAND_MASK
        for n, (stamp, counter) in enumerate(stamps)
    ]


_MS_MASK = (1 << 48) - 1
_RAND_MASK = (1 << 62) - 1


def new_id() -> str:
    """A fresh job or run id as text (``str(uuid7())``, formatted without building the UUID object)."""
    return _text(_uuid7_int())


def new_ids(count: int) -> list[str]:
    """``count`` fresh ids as text, in minting order — what ``count`` calls of :func:`new_id` answer, for
    a batch enqueue's price of one."""
    return [_text(value) for value in _uuid7_ints(count)]


def _text(value: int) -> str:
    h = f"{value:032x}"
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"


ID_SHAPE = "xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx"
"""A job id's canonical text: lowercase hex digits (``x``), dashed 8-4-4-4-12."""
_HEX = frozenset("0123456789abcdef")

SHORT_ID_CHARS = 12
"""How many characters of a job id its short form keeps: the last group of the canonical text. A UUIDv7
begins with its millisecond, so every job enqueued near one instant shares the start; its end is random
(48 bits), so the short form names one job in practice, as a shortened hash does in git."""


def short_id(job_id: str) -> str:
    """The short form of a job id that the console prints and ``jobs show``/``retry``/``cancel``/``promote``/
    ``remove`` take: its last :data:`SHORT_ID_CHARS` characters.

    >>> short_id("01a23394-407b-72a5-9f2e-3b4c5d6e7f80")
    '3b4c5d6e7f80'
    """
    return job_id[-SHORT_ID_CHARS:]


def starts_an_id(text: str) -> bool:
    """Whether some job id's canonical text starts with ``text`` (hex digits, dashes where the id has them)."""
    return len(text) <= len(ID_SHAPE) and _fits(text, ID_SHAPE[: len(text)])


def ends_an_id(text: str) -> bool:
    """Whether some job id's canonical text ends with ``text`` (hex digits, dashes where the id has them).

    >>> ends_an_id("3b4c5d6e7f80"), ends_an_id("2e3b4c5d6e7f80"), ends_an_id("9f2e-3b4c5d6e7f80")
    (True, False, True)
    """
    return len(text) <= len(ID_SHAPE) and _fits(text, ID_SHAPE[len(ID_SHAPE) - len(text) :])


def _fits(text: str, shape: str) -> bool:
    return all(ch == "-" if want == "-" else ch in _HEX for ch, want in zip(text, shape, strict=True))
