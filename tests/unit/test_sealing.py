"""Sealed secrets: an envelope opens to what was sealed, only under the site's keys (a purpose-derived
key of ``SECRET_KEY`` or of a ``SECRET_KEY_FALLBACKS`` entry), and a secret object comes back as itself."""

from __future__ import annotations

import base64
import datetime
import enum
import json
import uuid
from typing import Annotated, Any, Literal

import pytest
from cryptography.fernet import Fernet, InvalidToken
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.kdf.hkdf import HKDF
from pydantic import BaseModel, ConfigDict, Field, Secret, SecretBytes, SecretStr
from pytest_django.fixtures import Settings

from ultimate_jobs.guards.redaction import secret_values
from ultimate_jobs.guards.sealing import (
    ENVELOPE_KEY,
    KEY_PURPOSE,
    is_envelope,
    model_may_hold_secret,
    seal,
    seal_object,
    unseal,
)
from ultimate_jobs.testing.conformance import raises_code

SECRET = "sk_live_0123456789"


def fernet_of(secret_key: str, purpose: bytes) -> Fernet:
    derived = HKDF(algorithm=hashes.SHA256(), length=32, salt=None, info=purpose).derive(secret_key.encode())
    return Fernet(base64.urlsafe_b64encode(derived))


@pytest.mark.parametrize("value", [SECRET, 12345, 1.5, True, None, {"a": [1, "b"]}, ["x", {"y": None}]])
def test_an_envelope_opens_to_the_json_value_it_sealed(value: Any) -> None:
    envelope = seal(value)
    assert is_envelope(envelope) and list(envelope) == [ENVELOPE_KEY]
    assert unseal(envelope) == value
    assert unseal({"outer": [envelope, 7]}) == {"outer": [value, 7]}


def test_the_token_holds_no_clear_text_and_each_seal_is_fresh() -> None:
    first, second = seal(SECRET), seal(SECRET)
    assert SECRET not in json.dumps(first) and first != second  # a random IV per seal


def test_the_key_is_derived_from_secret_key_for_this_purpose_only(settings: Settings) -> None:
    settings.SECRET_KEY = "the-site-key"
    token = seal(SECRET)[ENVELOPE_KEY]
    assert json.loads(fernet_of("the-site-key", KEY_PURPOSE).decrypt(token))["v"] == SECRET
    with pytest.raises(InvalidToken):
        fernet_of("the-site-key", b"another purpose").decrypt(token)


def test_a_key_rotated_the_django_way_still_opens_what_the_old_key_sealed(settings: Settings) -> None:
    settings.SECRET_KEY, settings.SECRET_KEY_FALLBACKS = "old-key", []
    sealed = {"card": {"token": seal(SECRET)}}
    settings.SECRET_KEY, settings.SECRET_KEY_FALLBACKS = "new-key", ["old-key"]
    assert unseal(sealed) == {"card": {"token": SECRET}}
    fresh = seal(SECRET)
    settings.SECRET_KEY, settings.SECRET_KEY_FALLBACKS = "new-key", []
    assert unseal(fresh) == SECRET  # new seals use the current key
    with raises_code("X_JOB_SECRET_UNREADABLE") as caught:
        unseal(sealed, what="charge: the input")
    message = caught.value.message
    assert message.startswith("charge: the input: the secret sealed at $.card.token opens with none")
    assert "SECRET_KEY_FALLBACKS" in message and "Fix:" in message
    assert caught.value.meta == {"path": "$.card.token"}
    assert secret_values(sealed) == set()  # a surface skips what it cannot open: it is masked anyway


def test_a_secret_object_comes_back_as_itself_when_restored() -> None:
    values = [SecretStr(SECRET), SecretBytes(b"\xff\x00raw"), Secret(12345), Secret(b"\xfe")]
    sealed = json.loads(json.dumps(values, default=seal_object))
    assert all(is_envelope(item) for item in sealed) and SECRET not in json.dumps(sealed)
    restored = unseal(sealed, restore=True)
    assert restored == values and [type(v) for v in restored] == [SecretStr, SecretBytes, Secret, Secret]
    assert unseal(sealed)[0] == SECRET
    with pytest.raises(TypeError):
        seal_object(object())


@pytest.mark.parametrize(
    ("value", "found"),
    [
        ({"row": 7, "note": "x", "ok": True, "none": None, "f": 1.5}, False),  # the flat payload: no walk
        ({"a": {"b": [1, {"c": [seal(SECRET)]}]}}, True),  # an envelope at any depth is found
        ([1, "x", [None, [seal(1)]]], True),
        ({"tuple": (1, seal(2))}, True),  # a container a JSON decoder never builds: the full walk decides
        ({"a": [{"b": {}}], "c": []}, False),
        ({ENVELOPE_KEY: "not a token"}, True),  # a key that only looks like an envelope: unseal refuses it
    ],
)
def test_may_hold_envelope_finds_an_envelope_at_any_depth_and_none_in_a_plain_payload(value: Any, found: bool) -> None:
    from ultimate_jobs.guards.sealing import may_hold_envelope

    assert may_hold_envelope(value) is found
    if not found:
        assert unseal(value) is value  # a payload with no envelope comes back as it is: nothing rebuilt


class Colour(enum.Enum):
    RED = "red"


class PlainData(BaseModel):
    n: int
    name: str | None = None
    when: datetime.datetime | None = None
    ids: list[uuid.UUID] = []
    weights: dict[str, float] = {}
    pair: tuple[int, ...] = ()
    colour: Colour = Colour.RED
    kind: Literal["a", "b"] = "a"
    size: Annotated[int, Field(gt=0)] = 1


class Node(BaseModel):
    value: int = 0
    children: list[Node] = []


class Holds(BaseModel):
    inner: list[dict[str, SecretStr]]


class Nested(BaseModel):
    holder: Holds | None = None


class Loose(BaseModel):
    model_config = ConfigDict(extra="allow")
    n: int


@pytest.mark.parametrize("model", [PlainData, Node])
def test_a_model_of_plain_data_cannot_hold_a_secret(model: type[BaseModel]) -> None:
    assert not model_may_hold_secret(model)


@pytest.mark.parametrize(
    "annotation",
    [SecretStr, SecretBytes, Secret[int], Any, object, list, dict[str, Any], Nested, Annotated[SecretStr, "x"]],
)
def test_a_field_that_declares_a_secret_or_does_not_rule_one_out_may_hold_one(annotation: Any) -> None:
    model = type("Probe", (BaseModel,), {"__annotations__": {"field": annotation}})
    assert model_may_hold_secret(model)
    assert model_may_hold_secret(Loose)  # extra="allow": any extra field may be a secret
