# Two indexes on x_jobs that an earlier version of 0008 built (x_jobs_live_queue_idx, x_jobs_finished_idx)
# cost an insert on every claim and every settle (Postgres adds an entry to each index whose predicate the
# updated row matches), about a fifth more database work per job, and served statements that existing
# indexes serve as well: the stats count live states through x_jobs_state_queue_idx, and retention walks
# that index's (state, queue, created_at) ranges.
#
# 0008 no longer builds them, so this migration changes no model state: it drops them where they exist —
# a database that ran the earlier 0008 and not yet this migration — and finds nothing to drop on a fresh
# one. A database that ran both earlier versions has this migration recorded and is already in the final
# shape. Dropped CONCURRENTLY (so not in a transaction) on PostgreSQL: a plain DROP INDEX takes a lock that
# blocks every enqueue and settle until it is done.

from django.db import migrations

from ultimate_jobs.integration.migration_ops import DropIndexIfExists


class Migration(migrations.Migration):

    atomic = False

    dependencies = [
        ('ultimate_jobs', '0008_retention_indexes'),
    ]

    operations = [
        DropIndexIfExists(name='x_jobs_live_queue_idx'),
        DropIndexIfExists(name='x_jobs_finished_idx'),
    ]
