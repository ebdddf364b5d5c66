"""Secret input fields: kept in clear on the row the worker reads, masked on every surface that shows it.

A job marks a field secret by typing it ``SecretStr``, ``SecretBytes`` or ``Secret[T]`` in its pydantic
input model — at any depth (nested models, lists, dicts, optionals). The stored payload keeps the
value, because the body needs it at run time (:func:`dump_model` writes it out in clear; pydantic's
own JSON dump would store ``"**********"`` and lose it). Nothing else shows it: the operator surface
(``manage.py jobs``, the admin, the JSON views) reads rows through :func:`redact_input`, and scrubs
the clear values out of the free text a run left behind (errors, step outputs, progress notes) with
:func:`scrub`.

>>> class Deliver(BaseModel):
...     url: str
...     token: SecretStr
>>> redact_input(Deliver, {"url": "https://x", "token": "s3cr3t"})
{'url': 'https://x', 'token': '**********'}
"""

from __future__ import annotations

import dataclasses
import functools
import json
import typing
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from types import UnionType
from typing import Any, Union, get_args, get_origin
from urllib.parse import quote, quote_plus

import pydantic
from pydantic import BaseModel, Secret, SecretBytes, SecretStr
from pydantic_core import to_jsonable_python

MASK = "**********"
"""What a secret reads as on every operator surface — pydantic's own mask."""

MIN_SCRUB_LENGTH = 4
"""Clear values shorter than this are masked where the input holds them but not scrubbed out of free
text: replacing every ``"ab"`` in a stack trace would shred it and protect nothing."""

_SECRET_TYPES = (SecretStr, SecretBytes, Secret)
_SEQUENCES = (list, tuple, set, frozenset)


@dataclass(frozen=True, slots=True)
class SecretMask:
    """Where the secrets of one JSON value are: the whole value, some keys, every item, every value.

    ``models`` names structured types (pydantic models, dataclasses, TypedDicts) whose fields apply
    here; they are expanded when a value is walked, so a recursive model costs nothing up front and
    is masked at every depth its data reaches.
    """

    whole: bool = False
    fields: Mapping[str, SecretMask] = field(default_factory=dict)
    items: SecretMask | None = None
    values: SecretMask | None = None
    models: tuple[type, ...] = ()
    leaves: bool = False
    """Every scalar at any depth (text, numbers) is a secret; the structure (keys, lengths) is not."""

    def __bool__(self) -> bool:
        return (
            self.whole
            or self.leaves
            or bool(self.fields)
            or self.items is not None
            or self.values is not None
            or bool(self.models)
        )

    def field(self, key: str) -> SecretMask | None:
        """The mask of one key of a mapping: its field's, else every value's."""
        found = _merge([self.fields.get(key), *(_fields_of(m).get(key) for m in self.models)])
        return found if found is not None else self.values


def secret_mask(model: type[BaseModel] | None) -> SecretMask | None:
    """The secret positions of ``model``'s JSON payload, or ``None`` when it declares none."""
    return None if model is None else _mask_of(model)


UNDECLARED = SecretMask(leaves=True)
"""The mask of a job this process does not declare: with no model to say where its secrets are, every
scalar of its input is treated as one (fail closed) — a web process that never imports the job module,
or a job renamed while its dead letters remain, shows the input's shape and none of its values."""


def job_secret_mask(name: str) -> SecretMask | None:
    """The secret mask of the job registered as ``name`` (its input model's), or :data:`UNDECLARED` when
    no job of that name is registered in this process."""
    from . import registry  # lazily: the job declarations import this module

    handle = registry.lookup(name)
    if handle is None or not hasattr(handle, "input_model"):
        return UNDECLARED
    return secret_mask(handle.input_model)


def _is_secret(tp: Any) -> bool:
    return (isinstance(tp, type) and issubclass(tp, _SECRET_TYPES)) or get_origin(tp) is Secret


def _is_structured(tp: Any) -> bool:
    if not isinstance(tp, type):
        return False
    typed_dict = issubclass(tp, dict) and hasattr(tp, "__required_keys__")
    return issubclass(tp, BaseModel) or dataclasses.is_dataclass(tp) or typed_dict


def _args(tp: Any) -> tuple[Any, ...]:
    """The annotations inside ``tp`` (``Annotated``'s metadata and a tuple's ``...`` are not types)."""
    if get_origin(tp) is typing.Annotated:
        return get_args(tp)[:1]
    return tuple(arg for arg in get_args(tp) if arg is not Ellipsis)


def _mask_of(tp: Any) -> SecretMask | None:
    """The mask of a value annotated ``tp`` (``None`` when it holds no secret). Conservative: a union
    that may be a secret is masked whole, a tuple's items are masked as one."""
    if _is_secret(tp):
        return SecretMask(whole=True)
    origin = get_origin(tp)
    if origin is typing.Annotated or origin is Union or origin is UnionType:
        return _merge(_mask_of(arg) for arg in _args(tp))
    if origin in _SEQUENCES or _is_abc(origin, "Sequence", "Set", "AbstractSet", "MutableSequence", "Iterable"):
        items = _merge(_mask_of(arg) for arg in _args(tp))
        return SecretMask(items=items) if items else None
    if origin is dict or _is_abc(origin, "Mapping", "MutableMapping"):
        args = _args(tp)
        values = _mask_of(args[1]) if len(args) == 2 else None
        return SecretMask(values=values) if values else None
    if _is_structured(tp) and _contains_secret(tp, frozenset()):
        return SecretMask(models=(tp,))
    return None


def _contains_secret(tp: Any, seen: frozenset[Any]) -> bool:
    """Whether any value annotated ``tp`` can hold a secret (a cycle adds nothing a shorter path lacks)."""
    if _is_secret(tp):
        return True
    if get_origin(tp) is not None:
        return any(_contains_secret(arg, seen) for arg in _args(tp))
    if not _is_structured(tp) or tp in seen:
        return False
    return any(_contains_secret(annotation, seen | {tp}) for annotation, _ in _named(tp).values())


def _expand(mask: SecretMask) -> SecretMask:
    """``mask`` with every ``RootModel`` among its models replaced by its root's mask (a RootModel
    dumps as its root value, so its mask applies at this level, not to a ``"root"`` key)."""
    seen: set[type] = set()
    while True:
        roots = [m for m in mask.models if issubclass(m, pydantic.RootModel) and m not in seen]
        if not roots:
            return mask
        seen.update(roots)
        rest = tuple(m for m in mask.models if not issubclass(m, pydantic.RootModel))
        base = SecretMask(mask.whole, mask.fields, mask.items, mask.values, rest)
        mask = _merge([base, *(_mask_of(r.model_fields["root"].annotation) for r in roots)]) or SecretMask()


@functools.lru_cache(maxsize=1024)
def _fields_of(tp: type) -> dict[str, SecretMask]:
    """The masks of ``tp``'s fields that hold secrets, by field name and by alias."""
    fields: dict[str, SecretMask] = {}
    for name, (annotation, aliases) in _named(tp).items():
        mask = _mask_of(annotation)
        if mask:
            for key in (name, *aliases):
                fields[key] = mask
    return fields


def _named(tp: type) -> dict[str, tuple[Any, list[str]]]:
    """``{field: (annotation, aliases)}`` of a pydantic model, dataclass or TypedDict."""
    if issubclass(tp, BaseModel):
        return {
            name: (info.annotation, [a for a in (info.alias, info.serialization_alias) if isinstance(a, str)])
            for name, info in tp.model_fields.items()
        }
    try:
        hints = typing.get_type_hints(tp)
    except Exception:  # an unresolvable forward reference: nothing can be said about its fields
        return {}
    return {name: (hint, []) for name, hint in hints.items()}


def _is_abc(origin: Any, *names: str) -> bool:
    module = getattr(origin, "__module__", None)
    return module in ("collections.abc", "typing") and getattr(origin, "__name__", None) in names


def _merge(masks: Iterable[SecretMask | None]) -> SecretMask | None:
    merged: SecretMask | None = None
    for mask in masks:
        if not mask:
            continue
        if merged is None:
            merged = mask
            continue
        fields = dict(merged.fields)
        for key, sub in mask.fields.items():
            fields[key] = _merge((fields.get(key), sub)) or sub
        merged = SecretMask(
            whole=merged.whole or mask.whole,
            fields=fields,
            items=_merge((merged.items, mask.items)),
            values=_merge((merged.values, mask.values)),
            models=tuple(dict.fromkeys((*merged.models, *mask.models))),
        )
    return merged


def redact(mask: SecretMask | None, value: Any) -> Any:
    """``value`` (a JSON value) with every position ``mask`` names replaced by :data:`MASK`; a ``None``
    stays ``None`` (an unset secret reveals nothing). ``value`` is not modified."""
    if not mask or value is None:
        return value
    if mask.leaves:
        return _mask_leaves(value)
    mask = _expand(mask)
    if mask.whole:
        return MASK
    if isinstance(value, Mapping):
        return {key: redact(mask.field(key), item) for key, item in value.items()}
    if isinstance(value, list | tuple) and mask.items is not None:
        return [redact(mask.items, item) for item in value]
    return value


def secret_values(mask: SecretMask | None, value: Any) -> set[str]:
    """The clear text of every secret ``mask`` finds in ``value`` — what :func:`scrub` removes."""
    found: set[str] = set()
    for secret in _walk_secrets(mask, value):
        found.update(_texts(secret))
    return found


def _mask_leaves(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {key: _mask_leaves(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_mask_leaves(item) for item in value]
    return value if value is None or isinstance(value, bool) else MASK


def _walk_secrets(mask: SecretMask | None, value: Any) -> Iterator[Any]:
    if not mask or value is None:
        return
    if mask.leaves:
        yield value  # _texts() finds every scalar in it
        return
    mask = _expand(mask)
    if mask.whole:
        yield value
    elif isinstance(value, Mapping):
        for key, item in value.items():
            yield from _walk_secrets(mask.field(key), item)
    elif isinstance(value, list | tuple) and mask.items is not None:
        for item in value:
            yield from _walk_secrets(mask.items, item)


def _texts(value: Any) -> Iterator[str]:
    if isinstance(value, Mapping):
        for item in value.values():
            yield from _texts(item)
    elif isinstance(value, list | tuple):
        for item in value:
            yield from _texts(item)
    elif value is not None and not isinstance(value, bool):
        yield str(value)


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


def redact_input(model: type[BaseModel] | None, payload: Mapping[str, Any]) -> Any:
    """A stored payload as the operator surface shows it: ``model``'s secret fields masked."""
    return redact(secret_mask(model), payload)


def dump_model(value: BaseModel) -> Any:
    """``value`` as the JSON payload the row stores: pydantic's JSON dump, except that secrets are
    written in clear — the worker re-parses this payload and the body needs the real value."""
    if not _holds_secret(value.model_dump(mode="python")):
        return value.model_dump(mode="json")
    return to_jsonable_python(_reveal(value.model_dump(mode="python")))


def _holds_secret(value: Any) -> bool:
    if isinstance(value, _SECRET_TYPES):
        return True
    if isinstance(value, Mapping):
        return any(_holds_secret(v) for v in value.values())
    if isinstance(value, _SEQUENCES):
        return any(_holds_secret(v) for v in value)
    return False


def _reveal(value: Any) -> Any:
    if isinstance(value, _SECRET_TYPES):
        return _reveal(value.get_secret_value())
    if isinstance(value, Mapping):
        return {k: _reveal(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_reveal(v) for v in value]
    if isinstance(value, set | frozenset):
        return [_reveal(v) for v in value]
    return value
