# The dashboard page's proxy over x_job_counters (no table of its own; its permissions gate the page).

from django.db import migrations


class Migration(migrations.Migration):
    dependencies = [
        ("ultimate_jobs", "0012_rate_limits"),
    ]

    operations = [
        migrations.CreateModel(
            name="Dashboard",
            fields=[],
            options={
                "verbose_name": "dashboard",
                "verbose_name_plural": "dashboard",
                "proxy": True,
                "indexes": [],
                "constraints": [],
            },
            bases=("ultimate_jobs.jobcounter",),
        ),
    ]
