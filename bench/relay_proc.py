"""One ultimate_jobs outbox relay process, as ``manage.py jobs_relay`` builds it, speaking the bench's
READY/GO protocol (:mod:`bench.common`): ``python -m bench.relay_proc``.

It builds the relay from settings (``DJANGO_SETTINGS_MODULE=bench.settings``), opens its database
connection, prints ``READY``, waits for ``GO`` and then runs ``relay.run()`` until SIGTERM drains it.
"""

from __future__ import annotations

import os
import sys


def main() -> int:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "bench.settings")

    import django

    from bench.common import announce_ready_and_wait_for_go

    django.setup()
    from django.db import connection

    from ultimate_jobs.outbox import relay_from_settings

    relay = relay_from_settings()
    connection.ensure_connection()
    announce_ready_and_wait_for_go()
    relay.run()
    return 0


if __name__ == "__main__":
    sys.exit(main())
