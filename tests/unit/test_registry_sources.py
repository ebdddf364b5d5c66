"""The registry's sources: names a worker runs that no ``@job`` registered. The ``django.tasks`` backend is
one, added at start-up, so the job core never imports the adapter."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from ultimate_jobs.core import registry


@pytest.fixture
def sources() -> Iterator[None]:
    saved = dict(registry._sources)
    try:
        yield
    finally:
        registry._sources.clear()
        registry._sources.update(saved)


def test_the_app_adds_the_django_tasks_source_at_start_up() -> None:
    from ultimate_jobs.django_tasks import TASKS_SOURCE

    assert registry._sources["django.tasks"] is TASKS_SOURCE
    assert {"default", "tasks-low"} <= registry.source_queues()  # tests.settings: the backend's QUEUES


def test_a_name_no_job_holds_is_asked_of_each_source_and_the_first_answer_wins(sources: None) -> None:
    asked: list[str] = []

    def nothing(name: str) -> None:
        asked.append(name)

    registry.add_source(registry.Source("a-nothing", resolve=nothing, queues=lambda: {"q1"}))
    registry.add_source(registry.Source("b-found", resolve=lambda name: f"handle:{name}", queues=lambda: {"q2"}))
    assert registry.resolve_elsewhere("shop.tasks.send") == "handle:shop.tasks.send"
    assert "shop.tasks.send" in asked
    assert {"q1", "q2"} <= registry.source_queues()


def test_no_source_answers_none(sources: None) -> None:
    registry._sources.clear()
    assert registry.resolve_elsewhere("nobody.declared.this") is None
    assert registry.source_queues() == set()
