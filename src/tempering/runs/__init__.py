"""Run bookkeeping: the stage runner, the registry and releases.

The two names below are here, and not in `registry.py`, so that commands can show them in
their help without importing SQLAlchemy at start-up.
"""

REGISTRY_FILE = "registry.sqlite"
"""The registry's SQLite file in a run root (the embedded default)."""
REGISTRY_ENV = "TEMPERING_REGISTRY"
"""Environment variable naming a shared registry (a PostgreSQL URL or an SQLite file)."""
