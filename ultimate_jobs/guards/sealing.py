"""Sealed secrets: a secret is stored as an envelope only the site's keys open, never in clear.

A secret of a job's input — a ``SecretStr``, ``SecretBytes`` or ``Secret[T]`` field at any depth —
and a step output that holds one are stored as an *envelope* in place of the value::

    {"$uj.secret": "gAAAAABm…"}

a JSON object whose only key is :data:`ENVELOPE_KEY` and whose value is a Fernet token (AES-CBC with
an HMAC-SHA256, from ``cryptography``) of the value. The key is derived from Django's ``SECRET_KEY``
with HKDF-SHA256 under a purpose of its own, so the raw ``SECRET_KEY`` never encrypts anything; each
key of ``SECRET_KEY_FALLBACKS`` is derived the same way and still opens envelopes, so a key rotation
done Django's way keeps every pending job runnable. An envelope no configured key opens is
``X_JOB_SECRET_UNREADABLE``.

The key ``"$uj.secret"`` is reserved: an input or a step output that holds it in clear is refused.

>>> envelope = seal("s3cr3t")
>>> is_envelope(envelope), unseal(envelope)
(True, 's3cr3t')
"""

from __future__ import annotations

import base64
import collections.abc
import datetime
import decimal
import enum
import functools
import json
import types
import typing
import uuid
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from cryptography.fernet import Fernet, InvalidToken, MultiFernet
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.kdf.hkdf import HKDF
from django.conf import settings
from pydantic import BaseModel, Secret, SecretBytes, SecretStr
from pydantic_core import to_jsonable_python

from ..errors import CodedError, JobSecretUnreadableError, ValidationError

ENVELOPE_KEY = "$uj.secret"
"""The one key of an envelope; reserved, so no clear payload can be mistaken for a sealed value."""

KEY_PURPOSE = b"ultimate_jobs.guards.sealing.v1"
"""The HKDF ``info`` the sealing keys are derived under: a key of their own, not ``SECRET_KEY`` itself."""

_SECRET_TYPES = (SecretStr, SecretBytes, Secret)
_SEQUENCES = (list, tuple, set, frozenset)
_SCALARS = frozenset({str, int, float, bool, type(None)})
_KINDS = {SecretStr: "SecretStr", SecretBytes: "SecretBytes", Secret: "Secret"}


# -- keys --------------------------------------------------------------------------------------


@functools.lru_cache(maxsize=8)
def _keyring(current: str | bytes, fallbacks: tuple[str | bytes, ...]) -> MultiFernet:
    """The Fernet of each key, the current one first (it seals; every one opens)."""
    return MultiFernet([_derive(key) for key in (current, *fallbacks)])


def _derive(secret_key: str | bytes) -> Fernet:
    raw = secret_key.encode() if isinstance(secret_key, str) else secret_key
    derived = HKDF(algorithm=hashes.SHA256(), length=32, salt=None, info=KEY_PURPOSE).derive(raw)
    return Fernet(base64.urlsafe_b64encode(derived))


def _fernet() -> MultiFernet:
    return _keyring(settings.SECRET_KEY, tuple(getattr(settings, "SECRET_KEY_FALLBACKS", ())))


# -- one value ---------------------------------------------------------------------------------


def seal(value: Any, kind: str = "json") -> dict[str, str]:
    """An envelope of ``value`` (a JSON value, or bytes) under the current key. ``kind`` names the secret
    object :func:`unseal` rebuilds with ``restore=True`` (``"SecretStr"``, ``"SecretBytes"``,
    ``"Secret"``); ``"json"`` comes back as the value itself."""
    plain: dict[str, Any] = {"t": kind, "v": value}
    if isinstance(value, bytes):
        plain.update(v=base64.b64encode(value).decode(), b=True)
    text = json.dumps(plain, allow_nan=False, separators=(",", ":"))
    return {ENVELOPE_KEY: _fernet().encrypt(text.encode()).decode()}


def is_envelope(value: Any) -> bool:
    """Whether ``value`` is an envelope: a mapping whose only key is :data:`ENVELOPE_KEY`, a token."""
    return isinstance(value, Mapping) and len(value) == 1 and isinstance(value.get(ENVELOPE_KEY), str)


def seal_object(value: Any) -> dict[str, str]:
    """An envelope of a pydantic secret object that :func:`unseal` rebuilds as that object
    (``TypeError`` for anything else: the ``default`` of a ``json.dumps``)."""
    kind = next((name for cls, name in _KINDS.items() if isinstance(value, cls)), None)
    if kind is None:
        raise TypeError(f"Object of type {type(value).__name__} is not JSON serializable")
    return seal(value.get_secret_value(), kind)


def _open(token: str, restore: bool, what: str, path: str) -> Any:
    try:
        plain = json.loads(_fernet().decrypt(token))
    except (InvalidToken, ValueError, TypeError) as exc:
        raise JobSecretUnreadableError(
            f"{what}: the secret sealed at {path} opens with none of this site's keys — it was sealed under a "
            "SECRET_KEY this process no longer has. Fix: add that key to SECRET_KEY_FALLBACKS (Django's key "
            "rotation), then retry the job: python manage.py jobs retry <id>",
            {"path": path},
        ) from exc
    kind, value = plain.get("t"), plain.get("v")
    if plain.get("b"):
        value = base64.b64decode(value)
    if not restore or kind == "json":
        return value
    if kind == "SecretStr":
        return SecretStr(value)
    if kind == "SecretBytes":
        return SecretBytes(value)
    return Secret(value)


# -- whole payloads ----------------------------------------------------------------------------


def unseal(value: Any, *, restore: bool = False, what: str = "the input") -> Any:
    """``value`` (a JSON value) with every envelope opened: its clear JSON value, or with ``restore`` the
    secret object :func:`seal_object` sealed. ``X_JOB_SECRET_UNREADABLE`` names the first envelope no
    configured key opens (``what`` says whose: the input, a step's output). A value with no envelope
    comes back as it is."""
    if not may_hold_envelope(value):
        return value
    return _unseal(value, restore, what, "$")


def may_hold_envelope(value: Any) -> bool:
    """Whether ``value`` (a JSON value) has :data:`ENVELOPE_KEY` as a key at any depth: the cheap test every
    claimed row's input passes through (plain ``dict``/``list`` walked by exact type, as a JSON decoder
    builds them), so a payload with no secret costs no walk that builds anything."""
    kind = type(value)
    if kind is dict:
        if ENVELOPE_KEY in value:
            return True
        items = value.values()
    elif kind is list:
        items = value
    else:
        return kind not in _SCALARS and isinstance(value, Mapping | list | tuple)  # another container: walk it
    # a flat payload of scalars (the common one) costs a type test per value, and no generator
    for item in items:  # noqa: SIM110
        if type(item) not in _SCALARS and may_hold_envelope(item):
            return True
    return False


def _unseal(value: Any, restore: bool, what: str, path: str) -> Any:
    if is_envelope(value):
        opened = _open(value[ENVELOPE_KEY], restore, what, path)
        return _unseal(opened, restore, what, path) if isinstance(opened, dict | list) else opened
    if isinstance(value, Mapping):
        return {key: _unseal(item, restore, what, f"{path}.{key}") for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_unseal(item, restore, what, f"{path}[{n}]") for n, item in enumerate(value)]
    return value


def sealed_values(value: Any) -> Iterator[Any]:
    """The clear JSON value of every envelope in ``value`` that a configured key opens (the others are
    skipped: a surface that shows a row masks them and has nothing of theirs to scrub)."""
    if not may_hold_envelope(value):
        return
    for node in nodes(value, stop=is_envelope):
        if is_envelope(node):
            try:
                yield unseal(node)
            except JobSecretUnreadableError:
                continue


def nodes(value: Any, *, stop: Callable[[Any], bool] = lambda _: False) -> Iterator[Any]:
    """Every scalar of ``value`` (a JSON value), and every mapping ``stop`` picks (not walked into)."""
    if isinstance(value, Mapping) and not stop(value):
        for item in value.values():
            yield from nodes(item, stop=stop)
    elif isinstance(value, list | tuple):
        for item in value:
            yield from nodes(item, stop=stop)
    else:
        yield value


def refuse_reserved(
    value: Any, what: str, *, error: type[CodedError] = ValidationError, meta: Mapping[str, Any] | None = None
) -> None:
    """``error`` (``X_VALIDATION``) when ``value`` (clear, or a model's python dump) holds
    :data:`ENVELOPE_KEY` as a key of its own: a clear value must never read as a sealed one."""
    path = reserved_path(value)
    if path is not None:
        raise error(
            f"{what} holds the key {ENVELOPE_KEY!r} at {path}; ultimate_jobs reserves it for sealed secrets. "
            "Fix: rename that key",
            {**(meta or {}), "path": path},
        )


def reserved_path(value: Any, path: str = "$") -> str | None:
    """Where ``value`` holds :data:`ENVELOPE_KEY` as a key of its own (the first place, inside secret
    values and models too), else ``None``."""
    if isinstance(value, _SECRET_TYPES):
        return reserved_path(value.get_secret_value(), path)
    if isinstance(value, BaseModel):
        return reserved_path(value.model_dump(mode="python"), path)
    if isinstance(value, Mapping):
        if ENVELOPE_KEY in value:
            return path
        found = (reserved_path(item, f"{path}.{key}") for key, item in value.items())
    elif isinstance(value, _SEQUENCES):
        found = (reserved_path(item, f"{path}[{n}]") for n, item in enumerate(value))
    else:
        return None
    return next((p for p in found if p is not None), None)


# -- pydantic models ---------------------------------------------------------------------------


def seal_model(value: BaseModel, *, what: str = "the input") -> Any:
    """``value`` as the JSON payload a row stores: pydantic's JSON dump, with every secret in an envelope
    of its clear JSON value (pydantic's own dump would store ``"**********"`` and lose it).
    ``X_VALIDATION`` when it holds the reserved key (:func:`refuse_reserved`)."""
    dumped = value.model_dump(mode="python")
    refuse_reserved(dumped, what)
    if not _holds_secret(dumped):
        return value.model_dump(mode="json")
    return to_jsonable_python(_seal_secrets(dumped))


_PLAIN_TYPES = (
    str, int, float, bool, bytes, type(None), datetime.date, datetime.time, datetime.timedelta, uuid.UUID,
    decimal.Decimal, enum.Enum,
)  # fmt: skip
"""Field types that can never hold a secret (a ``datetime`` is a ``date``; an ``Enum`` member is a constant)."""

_CONTAINERS = frozenset({
    list, tuple, set, frozenset, dict, typing.Union, types.UnionType, collections.abc.Sequence,
    collections.abc.Mapping, collections.abc.Set, collections.abc.Iterable, collections.abc.MutableMapping,
    collections.abc.MutableSequence,
})  # fmt: skip
"""Generic origins whose values are only their arguments' (``list[T]``, ``dict[K, V]``, ``T | None``…)."""


def model_may_hold_secret(model: type[BaseModel]) -> bool:
    """Whether an instance of ``model`` can hold a secret, judged from its declaration once: a
    ``SecretStr``/``SecretBytes``/``Secret[T]`` field at any depth — or any field whose type does not rule
    one out (``Any``, ``object``, a bare ``list``, a class this does not know, an unresolved forward
    reference, ``extra="allow"``). ``False`` only when every field is plain data, so an enqueue of a job
    whose input model answers ``False`` stores pydantic's JSON dump without walking it for secrets."""
    return _model_may_hold(model, set())


def _model_may_hold(model: type[BaseModel], seen: set[type[BaseModel]]) -> bool:
    if model in seen:
        return False  # a recursive model: its fields are being judged already
    seen.add(model)
    if model.model_config.get("extra") == "allow":
        return True
    return any(_type_may_hold(field.annotation, seen) for field in model.model_fields.values())


def _type_may_hold(annotation: Any, seen: set[type[BaseModel]]) -> bool:
    origin = typing.get_origin(annotation)
    if origin is typing.Annotated:
        return _type_may_hold(typing.get_args(annotation)[0], seen)
    if origin is typing.Literal:
        return False
    if origin is not None:
        if origin not in _CONTAINERS:
            return True  # Secret[T], or a generic this does not know
        return any(_type_may_hold(arg, seen) for arg in typing.get_args(annotation) if arg is not Ellipsis)
    if isinstance(annotation, type):
        if issubclass(annotation, BaseModel):
            return _model_may_hold(annotation, seen)
        return not issubclass(annotation, _PLAIN_TYPES)
    return annotation is not None


def clear_model(value: BaseModel) -> Any:
    """``value``'s JSON dump with every secret in clear: what its model validates back into it."""
    return to_jsonable_python(_reveal(value.model_dump(mode="python")))


def _holds_secret(value: Any) -> bool:
    if isinstance(value, _SECRET_TYPES):
        return True
    if isinstance(value, Mapping):
        return any(_holds_secret(v) for v in value.values())
    if isinstance(value, _SEQUENCES):
        return any(_holds_secret(v) for v in value)
    return False


def _seal_secrets(value: Any) -> Any:
    if isinstance(value, _SECRET_TYPES):
        return seal(to_jsonable_python(_reveal(value)))
    if isinstance(value, Mapping):
        return {k: _seal_secrets(v) for k, v in value.items()}
    if isinstance(value, _SEQUENCES):
        return [_seal_secrets(v) for v in value]
    return value


def _reveal(value: Any) -> Any:
    if isinstance(value, _SECRET_TYPES):
        return _reveal(value.get_secret_value())
    if isinstance(value, BaseModel):  # a Secret[Model]'s value
        return _reveal(value.model_dump(mode="python"))
    if isinstance(value, Mapping):
        return {k: _reveal(v) for k, v in value.items()}
    if isinstance(value, _SEQUENCES):
        return [_reveal(v) for v in value]
    return value
