"""Secrets on the operator surface: a sealed secret reads as the mask, and its value is scrubbed out of
free text.

A job marks a field secret by typing it ``SecretStr``, ``SecretBytes`` or ``Secret[T]`` in its pydantic
input model — at any depth (nested models, lists, dicts, optionals). The row never holds it in clear:
enqueue stores it sealed (an envelope only the site's keys open, :mod:`ultimate_jobs.guards.sealing`), and so
is a step output that holds a secret. Every surface that shows a row (``manage.py jobs``, the admin,
the JSON views) reads it through :func:`redact`, which shows each envelope as :data:`MASK` — no job
declaration needed, so a process that never imports the job module shows exactly the secret fields
masked and every other field as it is — and scrubs the secrets' clear values out of the free text a
run left behind (errors, step outputs, progress notes, keys) with :func:`scrub`.

>>> redact({"url": "https://x", "token": {"$uj.secret": "gAAAAABm…"}})
{'url': 'https://x', 'token': '**********'}
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Mapping
from typing import Any
from urllib.parse import quote, quote_plus

from .sealing import is_envelope, nodes, sealed_values

MASK = "**********"
"""What a secret reads as on every operator surface — pydantic's own mask."""

MIN_SCRUB_LENGTH = 4
"""Clear values shorter than this are masked where the input holds them but not scrubbed out of free
text: replacing every ``"ab"`` in a stack trace would shred it and protect nothing."""


def redact(value: Any) -> Any:
    """``value`` (a JSON value: a row's input, a step's output) with every sealed secret replaced by
    :data:`MASK`. ``value`` is not modified."""
    if is_envelope(value):
        return MASK
    if isinstance(value, Mapping):
        return {key: redact(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [redact(item) for item in value]
    return value


def secret_values(value: Any) -> set[str]:
    """The clear text of every sealed secret in ``value`` (a row's input) that this site's keys open —
    what :func:`scrub` removes from the row's free text."""
    found: set[str] = set()
    for clear in sealed_values(value):
        found.update(_texts(clear))
    return found


def _texts(value: Any) -> Iterator[str]:
    return (str(leaf) for leaf in nodes(value) if leaf is not None and not isinstance(leaf, bool))


def scrub(value: Any, secrets: Iterable[str]) -> Any:
    """``value`` (a string or a JSON value) with every occurrence of each secret of at least
    :data:`MIN_SCRUB_LENGTH` characters replaced by :data:`MASK`, at any depth. Keys are kept.

    Each secret is looked for in every way a message commonly quotes it (:func:`renderings`): as it is,
    as ``repr()`` and JSON escape it (a ``KeyError`` message, a quote or backslash in the secret), and
    URL-encoded — and each of those escaped once more (a repr of a message that quoted it)."""
    forms = {form for secret in secrets for form in renderings(secret)}
    needles = sorted(forms, key=len, reverse=True)
    return _scrub(value, needles) if needles else value


def renderings(secret: str) -> set[str]:
    """The texts :func:`scrub` removes for ``secret``: the secret, its ``repr()`` and JSON escapes, its
    URL encodings, and the repr/JSON escape of each of those — every one at least MIN_SCRUB_LENGTH long."""
    forms = {secret, repr(secret)[1:-1], json.dumps(secret)[1:-1], quote(secret, safe=""), quote_plus(secret)}
    forms |= {repr(form)[1:-1] for form in list(forms)} | {json.dumps(form)[1:-1] for form in list(forms)}
    return {form for form in forms if len(form) >= MIN_SCRUB_LENGTH}


def _scrub(value: Any, needles: list[str]) -> Any:
    if isinstance(value, str):
        for needle in needles:
            if needle in value:
                value = value.replace(needle, MASK)
        return value
    if isinstance(value, Mapping):
        return {key: _scrub(item, needles) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_scrub(item, needles) for item in value]
    return value
