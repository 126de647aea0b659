"""The repository root and the one folder every bench script writes its results to."""

from __future__ import annotations

import platform
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "bench" / "results"


def cpu_name() -> str:
    """The processor as results record it (`platform.processor()`, else the machine type)."""
    return platform.processor() or platform.machine()
