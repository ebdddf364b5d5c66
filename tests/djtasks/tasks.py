"""Django ``@task`` functions the ``JobsBackend`` tests enqueue (module level, as Django requires)."""

from __future__ import annotations

from typing import Any

try:  # Django 6.x
    from django.tasks import TaskContext, task
except ImportError:  # Django 5.2 with the django-tasks backport
    from django_tasks import TaskContext, task  # type: ignore[no-redef]

CALLS: list[Any] = []


class PaymentDeclined(Exception):
    """A failure of the test's own class (its path is read back from the stored traceback)."""


@task
def add(a: int, b: int) -> int:
    CALLS.append(("add", a, b))
    return a + b


@task(priority=10, queue_name="tasks-low")
def urgent(label: str) -> str:
    CALLS.append(("urgent", label))
    return label


@task(queue_name="tasks-low")
def relaxed(label: str, org: str | None = None) -> str:
    CALLS.append(("relaxed", label))
    return label


@task
def decline(order: str) -> None:
    CALLS.append(("decline", order))
    raise PaymentDeclined(f"card declined for {order}")


@task(takes_context=True)
def with_context(context: TaskContext, note: str) -> dict[str, Any]:
    CALLS.append(("with_context", context.attempt))
    return {"id": context.task_result.id, "attempt": context.attempt, "note": note}


@task
async def async_double(n: int) -> int:
    CALLS.append(("async_double", n))
    return n * 2


@task
def returns_set() -> object:
    return {1, 2}


def org_of(task: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> str | None:
    """The TENANT reader a test backend names: the ``org`` keyword, when given."""
    return kwargs.get("org")


@task
def noted_failure() -> None:
    """Fails with a message whose last line reads like a class (``Note: …``) and a PEP 678 note."""
    error = PaymentDeclined("declined\nNote: card expired")
    error.add_note("hint: retry later")
    raise error


@task(takes_context=True)
def reports_context(context: TaskContext) -> dict[str, Any]:
    """What the run's own result says while it runs."""
    seen = context.task_result
    enqueued_at = seen.enqueued_at.isoformat() if seen.enqueued_at is not None else None
    return {"status": str(seen.status), "enqueued_at": enqueued_at, "worker_ids": list(seen.worker_ids)}
