"""What the job factories — ``backfill()``, ``export_rows()``, ``webhook()`` — share when they declare a job."""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any, TypeVar

BodyT = TypeVar("BodyT", bound=Callable[..., Any])


def factory_body(body: BodyT, kind: str, name: str) -> BodyT:
    """``body`` named ``<kind>[<name>]`` and placed in the module that called the factory (two frames up:
    the factory, then its caller), so the job's origin — what tells a second declaration of the name from
    the same one imported twice — is where the app declared it, not the factory's own module."""
    body.__module__ = sys._getframe(2).f_globals.get("__name__", "?")
    body.__qualname__ = body.__name__ = f"{kind}[{name}]"
    return body
