"""The suite's flush after a ``transactional_db`` test (:mod:`tests.db_flush`) leaves the database as
Django's ``manage.py flush`` does: every table that holds a row emptied, the content types and
permissions ``post_migrate`` writes as it writes them."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth.models import Permission, User
from django.contrib.contenttypes.models import ContentType
from django.db import connection

from tests.db_flush import flush_written_tables
from tests.secapp.models import Bucket, Item, Note, Post

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]


def seeded() -> tuple[list[Any], list[Any]]:
    return (
        list(ContentType.objects.order_by("pk").values_list("pk", "app_label", "model")),
        list(Permission.objects.order_by("pk").values_list("pk", "codename", "content_type_id")),
    )


def test_only_the_tables_holding_rows_are_truncated_and_the_seeded_ones_are_kept() -> None:
    flush_written_tables(connection)  # the first flush of a session is Django's: what it leaves is the baseline
    before = seeded()
    assert before[0] and before[1]
    bucket = Bucket.objects.create(org_id="o")
    note = Note.objects.create(item=Item.objects.create(org_id="o", bucket=bucket, secret="s"))
    Post.objects.create(title="p")
    User.objects.create(username="u")

    written = ["auth_user", "secapp_bucket", "secapp_item", "secapp_note", "secapp_post"]
    assert flush_written_tables(connection) == written
    assert not Note.objects.filter(pk=note.pk).exists()
    assert (Bucket.objects.count(), Item.objects.count(), Post.objects.count(), User.objects.count()) == (0, 0, 0, 0)
    assert seeded() == before
    assert flush_written_tables(connection) == []  # nothing written since: nothing truncated


def test_a_changed_content_type_or_permission_is_flushed_and_written_again_by_django() -> None:
    flush_written_tables(connection)
    before = seeded()
    Permission.objects.filter(codename="view_post").delete()
    Post.objects.create(title="p")
    assert flush_written_tables(connection) == ["*"]
    # post_migrate wrote every permission back (new ids: the table was truncated)
    assert sorted(p[1] for p in seeded()[1]) == sorted(p[1] for p in before[1])
    assert Post.objects.count() == 0
    ContentType.objects.create(app_label="gone", model="thing")
    assert flush_written_tables(connection) == ["*"]
    assert not ContentType.objects.filter(app_label="gone").exists()
