"""Run bookkeeping: the stage runner, the registry and releases.

The names below are here, and not in `registry.py`, so that commands can show them in
their help (and find the project's registry) without importing SQLAlchemy at start-up.
"""

from __future__ import annotations

import os
from pathlib import Path

REGISTRY_FILE = "registry.sqlite"
"""The registry's SQLite file in a run root (the embedded default)."""
REGISTRY_ENV = "TEMPERING_REGISTRY"
"""Environment variable naming a shared registry (a PostgreSQL URL or an SQLite file)."""
PROJECT_DIR = ".tempering"
"""A directory marking a project root (`temper init`): its registry is `.tempering/registry.sqlite`,
found from the working directory or any directory below the project root."""


def project_registry(start: str | Path | None = None) -> Path | None:
    """The registry file of the project holding `start` (default: the working directory): the
    nearest `.tempering/` at or above it. None outside any project."""
    here = Path(start if start is not None else Path.cwd()).resolve()
    for folder in (here, *here.parents):
        if (folder / PROJECT_DIR).is_dir():
            return folder / PROJECT_DIR / REGISTRY_FILE
    return None


def default_registry(root: str | Path = "runs") -> tuple[str, str]:
    """(location, why) of the registry every command uses when given none: `$TEMPERING_REGISTRY`,
    else the project's (`project_registry`), else `<root>/registry.sqlite`."""
    if os.environ.get(REGISTRY_ENV):
        return os.environ[REGISTRY_ENV], f"${REGISTRY_ENV}"
    found = project_registry()
    if found is not None:
        return str(found), f"project {found.parent.parent}"
    return str(Path(root) / REGISTRY_FILE), "run root"
