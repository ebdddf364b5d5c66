"""A payout job whose input holds a secret at every depth a model allows: a top-level field, a nested
model's field, a list item and a dict value. Its body returns a secret object from one step, quotes a
secret in another step's output and in a progress note, then fails (while ``fail`` says so) with an
error that quotes every secret in several renderings.

>>> seen: list[Any] = []
>>> handle = declare_payout(seen, fail=True)
>>> handle.enqueue(payout_input())
"""

from __future__ import annotations

import json
from typing import Any
from urllib.parse import quote, quote_plus

import pydantic
from pydantic import SecretStr

from ultimate_jobs import JobRun, job
from ultimate_jobs.core.definition import JobHandle

SECRETS = {
    "api_key": "sk_live_top-5150-secret",
    "card": "tok_live_card-8080-secret",
    "backup": "bk_live_list-7777-secret",
    "header": "hdr_live_dict-5555-secret",
}


class Card(pydantic.BaseModel):
    holder: str
    token: SecretStr


class Payout(pydantic.BaseModel):
    org_id: str
    payout_id: int
    api_key: SecretStr
    card: Card
    backups: list[SecretStr]
    headers: dict[str, SecretStr]


def payout_input(payout_id: int = 77) -> dict[str, Any]:
    return {
        "org_id": "acme",
        "payout_id": payout_id,
        "api_key": SECRETS["api_key"],
        "card": {"holder": "Ada Lovelace", "token": SECRETS["card"]},
        "backups": [SECRETS["backup"]],
        "headers": {"authorization": SECRETS["header"]},
    }


def renderings(secret: str) -> set[str]:
    """Every way a leak could spell ``secret``: as is, repr/JSON escaped, URL-encoded, and a fragment."""
    forms = {secret, repr(secret)[1:-1], json.dumps(secret)[1:-1], quote(secret, safe=""), quote_plus(secret)}
    return forms | {secret.split("_live_", 1)[1]}  # "top-5150-secret": a fragment is a leak too


ALL_RENDERINGS = {form for secret in SECRETS.values() for form in renderings(secret)}


def declare_payout(seen: list[dict[str, Any]], *, fail: bool, name: str = "payout", attempts: int = 2) -> Any:
    """Declare the payout job; each attempt appends what its body read to ``seen``."""

    @job(
        name=name,
        input=Payout,
        queue="payouts",
        tenant=lambda i: i.org_id,
        idempotency_key=lambda i: f"payout:{i.payout_id}",
        retry={"attempts": attempts, "delay": "10s", "jitter": False},
    )
    def payout(run: JobRun[Payout]) -> str:
        card = run.step.run("authorize", lambda: run.input.card.token)  # a secret object, stored sealed
        header = run.input.headers["authorization"].get_secret_value()
        signed = run.step.run("sign", lambda: {"header": f"Bearer {header}", "nonce": 7})  # quotes a secret
        backup = run.input.backups[0].get_secret_value()
        run.progress(1, 2, note=f"retrying with {backup}")
        clear = [run.input.api_key.get_secret_value(), card.get_secret_value(), backup, header]
        seen.append({"clear": clear, "card": card, "signed": signed, "attempt": run.attempt})
        if fail:
            raise RuntimeError(f"declined: {clear!r} {json.dumps(clear)} {[quote(s) for s in clear]}")
        return "paid"

    handle: JobHandle[Payout, str] = payout
    return handle
