"""Joining or starting Ray for a run."""

from __future__ import annotations

import os
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from tempering.config import ScaleSettings
from tempering.faults import DIR_ENV as FAULTS_DIR_ENV
from tempering.faults import ENV as FAULTS_ENV


@contextmanager
def ray_session(settings: ScaleSettings) -> Iterator[None]:
    """Ray for the duration of a run: join `settings.address`, or start a local instance
    (`num_cpus`, no dashboard) and stop it afterwards. An already initialised Ray is reused."""
    import ray

    if ray.is_initialized():
        yield
        return
    src = str(Path(__file__).resolve().parents[2])  # workers import this same tempering
    faults = {k: os.environ[k] for k in (FAULTS_ENV, FAULTS_DIR_ENV) if k in os.environ}  # the battery's, to actors
    env = {"env_vars": {"PYTHONPATH": src, "OMP_WAIT_POLICY": "PASSIVE", **faults}}
    if settings.address:
        ray.init(address=settings.address, runtime_env=env, log_to_driver=False)
    else:
        ray.init(num_cpus=settings.num_cpus, include_dashboard=False, runtime_env=env, log_to_driver=False)
    try:
        yield
    finally:
        ray.shutdown()
