# The two indexes 0008 added to x_jobs cost an insert on every claim and every settle (Postgres adds an
# entry to each index whose predicate the updated row matches), about a fifth more database work per job,
# and served statements that existing indexes serve as well: the stats count live states through
# x_jobs_state_queue_idx, and retention walks that index's (state, queue, created_at) ranges.
#
# Dropped CONCURRENTLY (so not in a transaction) on PostgreSQL: a plain DROP INDEX takes a lock that
# blocks every enqueue and settle until it is done.

from django.contrib.postgres.operations import RemoveIndexConcurrently
from django.db import migrations


class RemoveIndexConcurrentlyOnPostgres(RemoveIndexConcurrently):
    """``RemoveIndexConcurrently`` on PostgreSQL, a plain index removal on another database."""

    def database_forwards(self, app_label, schema_editor, from_state, to_state):
        if schema_editor.connection.vendor == "postgresql":
            return super().database_forwards(app_label, schema_editor, from_state, to_state)
        return migrations.RemoveIndex.database_forwards(self, app_label, schema_editor, from_state, to_state)

    def database_backwards(self, app_label, schema_editor, from_state, to_state):
        if schema_editor.connection.vendor == "postgresql":
            return super().database_backwards(app_label, schema_editor, from_state, to_state)
        return migrations.RemoveIndex.database_backwards(self, app_label, schema_editor, from_state, to_state)


class Migration(migrations.Migration):

    atomic = False

    dependencies = [
        ('ultimate_jobs', '0008_retention_indexes'),
    ]

    operations = [
        RemoveIndexConcurrentlyOnPostgres(model_name='job', name='x_jobs_live_queue_idx'),
        RemoveIndexConcurrentlyOnPostgres(model_name='job', name='x_jobs_finished_idx'),
    ]
