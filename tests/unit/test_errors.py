"""Every error class and code of the spec, and the retry classification registry."""

from __future__ import annotations

import pytest

from ultimate_jobs import errors
from ultimate_jobs.errors import (
    CodedError,
    UltimateError,
    code_of,
    register_error_retry,
    retry_after_seconds_of,
    retry_class,
    retry_classes,
)

# The spec's "Error classes" table, copied row by row: (class, code).
SPEC_ERROR_CLASSES = [
    ("BackfillAppliedError", "X_BACKFILL_APPLIED"),
    ("BackfillEnvironmentError", "X_BACKFILL_ENVIRONMENT"),
    ("BackfillMigrationPendingError", "X_BACKFILL_MIGRATION_PENDING"),
    ("BackfillPendingError", "X_BACKFILL_PENDING"),
    ("BackfillRunningError", "X_BACKFILL_RUNNING"),
    ("BackfillStalledError", "X_BACKFILL_STALLED"),
    ("BackfillUnknownError", "X_BACKFILL_UNKNOWN"),
    ("CancelUnsupportedError", "X_JOB_NOT_CANCELLABLE"),
    ("ClaimQueuesEmptyError", "X_JOB_CLAIM_QUEUES_EMPTY"),
    ("ConcurrencyUnenforceableError", "X_JOB_CONCURRENCY_UNENFORCEABLE"),
    ("DriverUnavailableError", "X_DRIVER_UNAVAILABLE"),
    ("ExportPartTooLargeError", "X_EXPORT_PART_TOO_LARGE"),
    ("ExportRowInvalidError", "X_EXPORT_ROW_INVALID"),
    ("IdempotencyRequiredError", "X_IDEMPOTENCY_REQUIRED"),
    ("JobAbortedError", "X_ABORTED"),
    ("JobConcurrencyInvalidError", "X_JOB_DECLARATION_INVALID"),
    ("JobConcurrencyKeyInvalidError", "X_JOB_DECLARATION_INVALID"),
    ("JobDeclarationInvalidError", "X_JOB_DECLARATION_INVALID"),
    ("JobDrainedError", "X_DRAINING"),
    ("JobDuplicateError", "X_JOB_DUPLICATE"),
    ("JobKeyBusyError", "X_JOB_KEY_BUSY"),
    ("JobMaxAttemptsError", "X_JOB_MAX_ATTEMPTS"),
    ("JobNameTakenError", "X_JOB_DUPLICATE"),
    ("JobNotCancellableError", "X_JOB_NOT_CANCELLABLE"),
    ("JobNotFoundError", "X_JOB_NOT_FOUND"),
    ("JobNotPromotableError", "X_JOB_NOT_PROMOTABLE"),
    ("JobNotRemovableError", "X_JOB_NOT_REMOVABLE"),
    ("JobNotRequeueableError", "X_JOB_NOT_REQUEUEABLE"),
    ("JobOnSettledFailedError", "X_JOB_ON_SETTLED_FAILED"),
    ("JobPageInvalidError", "X_JOB_PAGE_INVALID"),
    ("JobRowStatusUnknownError", "X_JOB_ROW_STATUS_UNKNOWN"),
    ("JobSlotLostError", "X_JOB_SLOT_LOST"),
    ("JobTenantRequiredError", "X_JOB_TENANT_REQUIRED"),
    ("JobTenantMismatchError", "X_JOB_TENANT_MISMATCH"),
    ("JobTimeoutError", "X_JOB_TIMEOUT"),
    ("LeaseLostError", "X_JOB_LEASE_LOST"),
    ("OutboxNoTxError", "X_OUTBOX_NO_TX"),
    ("StepDuplicateError", "X_STEP_DUPLICATE"),
    ("WebhookDeliveryFailedError", "X_WEBHOOK_DELIVERY_FAILED"),
    ("WebhookDeliveryRejectedError", "X_WEBHOOK_DELIVERY_REJECTED"),
    ("WebhookDeliveryThrottledError", "X_WEBHOOK_DELIVERY_THROTTLED"),
    ("WebhookEndpointDisabledError", "X_WEBHOOK_ENDPOINT_DISABLED"),
    ("WebhookEndpointInvalidError", "X_WEBHOOK_ENDPOINT_INVALID"),
    ("WebhookEndpointUnknownError", "X_WEBHOOK_ENDPOINT_UNKNOWN"),
    ("WebhookEventInvalidError", "X_WEBHOOK_EVENT_INVALID"),
    ("WebhookEventUnknownError", "X_WEBHOOK_EVENT_UNKNOWN"),
]

# Codes of features this build does not have yet (exports, webhooks, action bridges): the codes
# are fixed — their retry classification is in the table — and their classes come with the features.
RESERVED_CODES = [
    "X_ACTION_JOB_UNBRIDGED",
]

# The spec's "Errors" table: every code some class must carry.
SPEC_ERROR_CODES = [
    "X_IDEMPOTENCY_REQUIRED",
    "X_STEP_DUPLICATE",
    "X_JOB_DUPLICATE",
    "X_JOB_TIMEOUT",
    "X_JOB_MAX_ATTEMPTS",
    "X_OUTBOX_NO_TX",
    "X_DRIVER_UNAVAILABLE",
    "X_ABORTED",
    "X_JOB_LEASE_LOST",
    "X_JOB_SLOT_LOST",
    "X_JOB_NOT_CANCELLABLE",
    "X_JOB_NOT_FOUND",
    "X_JOB_CONCURRENCY_UNENFORCEABLE",
    "X_JOB_KEY_BUSY",
    "X_JOB_DECLARATION_INVALID",
    "X_JOB_NOT_REMOVABLE",
    "X_JOB_NOT_PROMOTABLE",
    "X_JOB_PAGE_INVALID",
    "X_JOB_ON_SETTLED_FAILED",
    "X_NOT_IMPLEMENTED",
]


@pytest.mark.parametrize(("name", "code"), SPEC_ERROR_CLASSES)
def test_every_spec_class_exists_with_exactly_its_code(name: str, code: str) -> None:
    cls = getattr(errors, name, None)
    assert isinstance(cls, type), f"ultimate_jobs.errors has no {name}"
    assert issubclass(cls, UltimateError)
    err = cls("what to do next", {"job": "charge"})
    assert err.code == code
    assert err.message == "what to do next"
    assert err.meta == {"job": "charge"}
    assert str(err) == f"{code}: what to do next"
    assert err.as_dict() == {"code": code, "message": "what to do next", "meta": {"job": "charge"}}


@pytest.mark.parametrize("code", RESERVED_CODES)
def test_a_reserved_code_has_no_class_until_its_feature_lands(code: str) -> None:
    carriers = [n for n, c in vars(errors).items() if isinstance(c, type) and getattr(c, "default_code", None) == code]
    assert carriers == [], f"{code} is carried by {carriers}: list the class in SPEC_ERROR_CLASSES with its feature"


def test_classes_sharing_a_code_stay_distinct() -> None:
    assert not issubclass(errors.JobNameTakenError, errors.JobDuplicateError)
    assert not issubclass(errors.JobDuplicateError, errors.JobNameTakenError)
    assert errors.JobNameTakenError("x").code == errors.JobDuplicateError("x").code == "X_JOB_DUPLICATE"


@pytest.mark.parametrize("code", SPEC_ERROR_CODES)
def test_every_spec_code_has_a_class(code: str) -> None:
    carriers = [
        cls
        for cls in vars(errors).values()
        if isinstance(cls, type) and issubclass(cls, CodedError) and cls.default_code == code
    ]
    assert carriers, f"no class carries {code}"


def test_ultimate_error_takes_any_code() -> None:
    err = UltimateError("X_INVOICE_REJECTED", "the gateway refused the card", {"invoice": 7})
    assert (err.code, err.message, err.meta) == ("X_INVOICE_REJECTED", "the gateway refused the card", {"invoice": 7})
    assert UltimateError().code == "X_ULTIMATE"
    assert UltimateError("X_A").message == "X_A"


# -- retry classification ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("code", "cls"),
    [
        ("X_TIMEOUT", "retryable"),
        ("X_DRAINING", "retryable"),
        ("X_RATE_LIMITED", "retry-after"),
        ("X_OVERLOADED", "retry-after"),
        ("X_WEBHOOK_DELIVERY_THROTTLED", "retry-after"),
        ("X_JOB_KEY_BUSY", "terminal"),
        ("X_VALIDATION", "terminal"),
        ("X_JOB_TENANT_MISMATCH", "terminal"),
    ],
)
def test_the_spec_classifications_ship(code: str, cls: str) -> None:
    assert retry_class(UltimateError(code, "x")) == cls
    assert retry_classes()[code] == cls


def test_register_error_retry_classifies_an_app_code(retry_table: None) -> None:
    assert retry_class(UltimateError("X_INVOICE_REJECTED")) is None
    register_error_retry({"X_INVOICE_REJECTED": "terminal", "X_GATEWAY_BUSY": "retry-after", "X_FLAKY": "retryable"})
    assert retry_class(UltimateError("X_INVOICE_REJECTED")) == "terminal"
    assert retry_class(UltimateError("X_GATEWAY_BUSY")) == "retry-after"
    assert retry_class(UltimateError("X_FLAKY")) == "retryable"
    assert retry_classes()["X_GATEWAY_BUSY"] == "retry-after"


@pytest.mark.parametrize(
    "table",
    [{"X_A": "fatal"}, {"X_A": None}, {"": "terminal"}, {7: "terminal"}, {"X_A": "terminal", "X_B": "Terminal"}],
)
def test_register_error_retry_refuses_a_bad_row_and_registers_nothing(retry_table: None, table: dict) -> None:
    before = retry_classes()
    with pytest.raises(UltimateError) as caught:
        register_error_retry(table)
    assert caught.value.code == "X_INVARIANT"
    assert retry_classes() == before


def test_unclassified_and_foreign_errors_have_no_class() -> None:
    assert retry_class(UltimateError("X_NOBODY_CLASSIFIED_THIS")) is None
    assert retry_class(ValueError("boom")) is None
    assert retry_class(KeyError("k")) is None


def test_a_foreign_error_with_a_code_attribute_is_not_classified() -> None:
    """Only an UltimateError's code is read: a library exception that happens to carry ``.code`` keeps
    the backoff path (spec: "anything that is not an UltimateError — the backoff schedule, unchanged")."""

    class HttpError(Exception):
        def __init__(self, code: object) -> None:
            super().__init__(code)
            self.code = code

    assert retry_class(HttpError("X_VALIDATION")) is None
    assert retry_class(HttpError(404)) is None


def test_code_of() -> None:
    assert code_of(errors.JobTimeoutError("late")) == "X_JOB_TIMEOUT"
    assert code_of(ValueError("x")) is None
    assert code_of(None) is None


@pytest.mark.parametrize(
    ("meta", "seconds"),
    [
        ({"retryAfterSeconds": 30}, 30.0),
        ({"retryAfterSeconds": 1.5}, 1.5),
        ({"retry_after_seconds": 12}, 12.0),
        ({"retryAfterSeconds": 0}, None),
        ({"retryAfterSeconds": -4}, None),
        ({"retryAfterSeconds": "30"}, None),
        ({"retryAfterSeconds": True}, None),
        ({}, None),
    ],
)
def test_retry_after_seconds_of(meta: dict, seconds: float | None) -> None:
    assert retry_after_seconds_of(UltimateError("X_RATE_LIMITED", "slow down", meta)) == seconds


def test_retry_after_seconds_of_a_foreign_error() -> None:
    assert retry_after_seconds_of(ValueError("x")) is None
