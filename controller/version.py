"""The version of this controller: the installed distribution's, which pyproject.toml sets."""

from __future__ import annotations

from importlib import metadata

DISTRIBUTION = "tfjob-controller"


def version() -> str:
    """The installed ``tfjob-controller`` distribution's version; ``0+unknown`` when these sources run without
    being installed (no metadata to read), which no build of the package does."""
    try:
        return metadata.version(DISTRIBUTION)
    except metadata.PackageNotFoundError:
        return "0+unknown"
