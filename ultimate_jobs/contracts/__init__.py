"""What every backend answers, in one place: the records (:mod:`.jobs` for the hot path, :mod:`.operator`
for the operator's lists and actions, :mod:`.series` for the counters and samples, :mod:`.schedules` for
the scheduler, the backfill ledger and the rate schedules), the job lists' orders (:mod:`.ordering`), the
driver protocol (:mod:`.protocol`), and the event bus's and outbox store's protocols (:mod:`.events`,
:mod:`.outbox`). A driver is written against these modules alone."""
