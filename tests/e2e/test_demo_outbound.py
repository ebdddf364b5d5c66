"""The demo's outbound part (``demo_project.shop.scenario_outbound``): org-acme's orders exported to a local
folder, and an ``orders.paid`` webhook delivered over HTTP to the demo's own receiver view, which verifies
it — and refuses a forged copy."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path
from typing import Any

import pytest

from demo_project.shop.models import Order
from demo_project.shop.outbound import RECEIVED
from demo_project.shop.scenario_outbound import ENDPOINT_ID, ORG, run_outbound_part
from ultimate_jobs.models import WebhookDelivery

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]


def test_the_outbound_part_exports_the_orders_and_delivers_a_verified_webhook(tmp_path: Path, settings: Any) -> None:
    settings.SHOP_EXPORT_DIR = str(tmp_path)
    Order.objects.create(org_id="org-globex", number="9001", total_cents=100)  # another org's: not exported
    text = "\n".join(run_outbound_part())
    folder = tmp_path / ORG / "demo"
    manifest = json.loads((folder / "manifest.json").read_text())
    assert (manifest["parts"], manifest["rows"]) == (2, 3)
    parts = b"".join((folder / f"part-{i:05d}.csv").read_bytes() for i in range(manifest["parts"])).decode()
    rows = list(csv.DictReader(io.StringIO(parts, newline="")))
    assert [(r["number"], r["total"]) for r in rows] == [("3001", "125.00"), ("3002", "9.90"), ("3003", "300.00")]
    assert f"3 order(s) in 2 part(s) + manifest.json, in {folder}" in text
    assert "    3003,placed,300.00,false" in text
    (got,) = RECEIVED
    assert (got.topic, json.loads(got.body)["number"]) == ("orders.paid", "3001")
    assert "'status': 204}" in text and "the view verified the signature" in text
    (delivery,) = WebhookDelivery.objects.filter(endpoint_id=ENDPOINT_ID)
    assert (delivery.status_code, delivery.ok, delivery.tenant_id) == (204, True, ORG)
    assert "the same delivery with its body changed: 401 X_WEBHOOK_SIGNATURE_INVALID" in text
