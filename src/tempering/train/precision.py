"""Moved to `tempering.models.precision` (rollout and train both use it; rollout may not
import train). This re-export keeps callers on other branches working until they switch;
delete it once nothing imports `tempering.train.precision`."""

from tempering.models.precision import autocast, cpu_has_native_bf16, resolve_precision  # noqa: F401
