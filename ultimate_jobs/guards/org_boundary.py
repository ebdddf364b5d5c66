"""A run's work stays in its org: the jobs it enqueues and the jobs it reads.

Inside a run the executor installs the job's org (:mod:`ultimate_jobs.core.scope`). There:

- every enqueue is for the run's org. A request whose tenant is another org is
  ``X_TENANCY_ACTOR_MISMATCH`` at the caller, before any statement runs, on every path that writes a job
  row — ``handle.enqueue``, ``enqueue_as``, a router's ``enqueue_many`` (``django.tasks``, the factories),
  the outbox's stage, a step's or a backfill handle's enqueue — because each passes
  :func:`~ultimate_jobs.guards.admission.check_request`, which calls :func:`check_enqueue_org`. A request
  for a job with no tenant (``tenant="none"``) carries no org and passes. In a run with no org
  (``tenant="none"``) an enqueue for an org is ``X_TENANCY_ACTOR_ORG_REQUIRED``;
- reading or acting on one job (``django.tasks`` ``get_result``, the operator's ``inspect_job``, retry,
  cancel, remove, promote) refuses a job of another org the same way (:func:`check_job_org`); lists and
  bulk actions are confined to the run's org (:func:`confine_tenant_filter`), and the views over every
  org's jobs — queues, stats, workers, tasks, the outbox, the backfill ledger, pausing — are refused
  (:func:`refuse_fleet_view`).

Inside ``cross_tenant(reason, fn)`` and outside any run (a view, the shell, the operator's CLI) nothing
here checks anything. No refusal names the other org.

>>> with acting_as(Actor(org_id="org-1")):
...     charge.enqueue({"org_id": "org-2", "order_id": 7})   # X_TENANCY_ACTOR_MISMATCH
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..core.scope import UNGUARDED, guarded_scope_org
from ..errors import TenancyActorMismatchError, TenancyActorOrgRequiredError

CROSS_TENANT_FIX = "wrap the call in cross_tenant(reason, fn) when the work genuinely spans orgs"


def guarded() -> bool:
    """Whether the code runs in a run's org scope (not outside any run, not inside ``cross_tenant``)."""
    return guarded_scope_org() is not UNGUARDED


def check_enqueue_org(tenant_id: str | None, *, job: str) -> None:
    """Refuse, inside a run, an enqueue of ``job`` for an org other than the run's (a run with no org: for
    any org). A request with no tenant passes: the job belongs to no org."""
    _check_org(
        tenant_id,
        no_org=f"{job}: this run acts under no org (tenant='none') and the enqueue is for an org; a run that "
        "starts work for orgs says so",
        other=lambda org: (
            f"{job}: the enqueue is for another org than the one this run acts under ({org}); a "
            "run enqueues work for its own org (take it from run.tenant_id, not from data), or"
        ),
        meta={"job": job},
    )


def check_job_org(tenant_id: str | None, *, job_id: str) -> None:
    """Refuse, inside a run, reading or acting on job ``job_id`` when it belongs to another org (a run with
    no org: to any org). A job with no tenant passes."""
    _check_org(
        tenant_id,
        no_org=f"job {job_id} belongs to an org and this run acts under none (tenant='none')",
        other=lambda org: (
            f"job {job_id} belongs to another org than the one this run acts under ({org}); a run "
            "reads and acts on its own org's jobs only, or"
        ),
        meta={"job_id": job_id},
    )


def _check_org(tenant_id: str | None, *, no_org: str, other: Callable[[str], str], meta: dict[str, Any]) -> None:
    org = guarded_scope_org()
    if org is UNGUARDED or not tenant_id:
        return
    if org is None:
        raise TenancyActorOrgRequiredError(f"{no_org}; {CROSS_TENANT_FIX}", meta)
    if tenant_id != org:
        raise TenancyActorMismatchError(f"{other(str(org))} {CROSS_TENANT_FIX}", {**meta, "actor_org": org})


def confine_tenant_filter(tenant_id: str | None, *, what: str) -> str | None:
    """The tenant filter of a list or a bulk action: ``tenant_id`` outside a run; inside one, the run's org
    (``tenant_id`` left out, or the run's own). A filter naming another org is refused, and so is every
    list in a run with no org (it would span every org)."""
    org = guarded_scope_org()
    if org is UNGUARDED:
        return tenant_id
    if org is None:
        raise TenancyActorOrgRequiredError(
            f"{what} spans every org's jobs and this run acts under no org (tenant='none'); {CROSS_TENANT_FIX}",
            {"operation": what},
        )
    if tenant_id is not None and tenant_id != org:
        raise TenancyActorMismatchError(
            f"{what}: the tenant filter names another org than the one this run acts under ({org}); leave "
            f"tenant_id out (a run lists its own org's jobs), or {CROSS_TENANT_FIX}",
            {"operation": what, "actor_org": org},
        )
    return str(org)


def refuse_fleet_view(what: str) -> None:
    """Refuse, inside a run, a view or action over every org's jobs (queues, stats, workers, tasks, the
    outbox, the backfill ledger, pausing)."""
    org = guarded_scope_org()
    if org is UNGUARDED:
        return
    if org is None:
        raise TenancyActorOrgRequiredError(
            f"{what} spans every org's jobs and this run acts under no org (tenant='none'); {CROSS_TENANT_FIX}",
            {"operation": what},
        )
    raise TenancyActorMismatchError(
        f"{what} spans every org's jobs and this run acts under one ({org}); {CROSS_TENANT_FIX}",
        {"operation": what, "actor_org": org},
    )
