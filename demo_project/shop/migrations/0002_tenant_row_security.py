from django.db import migrations

from ultimate_jobs.guards.row_security import EnableTenantRowSecurity


class Migration(migrations.Migration):
    dependencies = [("shop", "0001_initial")]

    operations = [EnableTenantRowSecurity("Order")]
