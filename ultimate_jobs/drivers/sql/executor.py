"""What both SQL executors share: the alias check, and the type of a statement's parameters."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Literal

from django.db import connections

from ...errors import DriverUnavailableError

Params = Mapping[str, Any] | Sequence[Any] | None
Binding = Literal["django", "server", "prepared", "generic"]
"""How a statement may be bound: through Django's cursor, server-side, prepared on its connection, or
prepared and planned once for every later run (``"generic"``: the claim); a backend that binds every
statement alike ignores it."""


def checked_alias(alias: str, *, vendor: str, refusal: str) -> str:
    """``alias`` when it names a database of ``vendor`` in ``settings.DATABASES``; otherwise
    ``X_DRIVER_UNAVAILABLE`` (``refusal``, formatted with ``alias`` and the ``found`` vendor, when the vendor
    differs)."""
    if alias not in connections.settings:
        raise DriverUnavailableError(
            f"no database alias {alias!r} in settings.DATABASES; set ULTIMATE_JOBS['DATABASE'] to one that exists",
            {"alias": alias},
        )
    found = connections[alias].vendor
    if found != vendor:
        raise DriverUnavailableError(refusal.format(alias=alias, found=found), {"alias": alias})
    return alias
