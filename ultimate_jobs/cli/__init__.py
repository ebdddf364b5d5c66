"""``manage.py jobs``: the operator CLI — parsing and rendering over :mod:`ultimate_jobs.operator`.

Every subcommand calls one operator function and prints its record: a human table by default, or with
``--json`` exactly the record's ``as_dict()``. Exit codes a script can read:

- ``0`` — done;
- ``1`` — an operator error: ``CODE: message`` and its fix on stderr, or ``{"error": {"code",
  "message", "meta", "fix"}}`` on stdout with ``--json``;
- ``2`` — the arguments do not parse (usage on stderr).

>>> call_command("jobs", "list", "--state", "dead", "--json", stdout=out)
"""

from .commands import Output, run
from .parsing import EXIT_ERROR, EXIT_OK, EXIT_USAGE, UsageParser, add_subcommands

__all__ = ["EXIT_ERROR", "EXIT_OK", "EXIT_USAGE", "Output", "UsageParser", "add_subcommands", "run"]
