"""The package's version, read once, when the package is imported: from the metadata of
the installed distribution, or, imported from a checkout without installing, from the
``pyproject.toml`` beside the package (the one place it is written)."""

from __future__ import annotations

import os
import re
from importlib import metadata

__all__ = ["__version__"]


def _from_checkout() -> str:
    path = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                        "pyproject.toml")
    try:
        with open(path, encoding="utf-8") as f:
            found = re.search(r'^version\s*=\s*"([^"]+)"', f.read(), re.M)
    except OSError:
        found = None
    return found.group(1) if found else "0+unknown"


def _read() -> str:
    try:
        return metadata.version("mutexd")
    except metadata.PackageNotFoundError:
        return _from_checkout()


__version__ = _read()
