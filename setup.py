"""The build's one step that setup.cfg cannot say: the long description.

PyPI shows the README without the repository around it, so a relative link there (``docs/jobs.md``,
``bench/README.md``) would lead nowhere. The long description is the README with every relative link made
absolute against the ``Source`` project URL of setup.cfg; links within the page (``#install``) and
absolute ones are kept as written. Everything else about the package is in setup.cfg.
"""

from __future__ import annotations

import configparser
import re
from pathlib import Path

from setuptools import setup

HERE = Path(__file__).resolve().parent
LINK = re.compile(r"(\]\()([^)\s]+)(\))")
"""A Markdown inline link's target: ``[text](target)``."""


def source_url() -> str:
    """The ``Source`` entry of ``project_urls`` in setup.cfg, ending with a slash."""
    config = configparser.ConfigParser(interpolation=None)
    config.read(HERE / "setup.cfg", encoding="utf-8")
    for line in config["metadata"]["project_urls"].strip().splitlines():
        label, _, url = line.partition("=")
        if label.strip() == "Source":
            return url.strip().rstrip("/") + "/"
    raise SystemExit("setup.cfg: project_urls names no Source; the README's relative links need it")


def long_description() -> str:
    """The README with its relative links made absolute against :func:`source_url`."""
    base = source_url()

    def absolute(match: re.Match[str]) -> str:
        target = match.group(2)
        if target.startswith("#") or re.match(r"^[a-z][a-z0-9+.-]*:", target):
            return match.group(0)
        return f"{match.group(1)}{base}{target.removeprefix('./')}{match.group(3)}"

    return LINK.sub(absolute, (HERE / "README.md").read_text(encoding="utf-8"))


setup(long_description=long_description(), long_description_content_type="text/markdown")
