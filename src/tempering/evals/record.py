"""Recording an eval in the registry, so `temper lineage` shows it next to the checkpoint.

`evaluate_config` (the one path of `temper eval run` and the pipeline's `eval` stage) calls
`record_eval_results` after writing results.json: the eval goes to the registry that trained the
model (its `tempering-run.json` marker names it), else to the project's or `$TEMPERING_REGISTRY`
(`runs.default_registry`). A model no registry knows and no project around it is not recorded,
and the log says so.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Callable

from tempering.evals.results import EvalResults
from tempering.runs import REGISTRY_ENV, project_registry


def registry_for(model: str) -> str | None:
    """The registry an eval of `model` belongs in (see the module docstring), or None."""
    from tempering.runs.registry import model_dir, model_marker, registry_exists

    marker = model_marker(model) if model_dir(model).exists() else None
    if marker is not None and registry_exists(marker["registry"]):
        return str(marker["registry"])
    if os.environ.get(REGISTRY_ENV):
        return os.environ[REGISTRY_ENV]
    found = project_registry()
    return str(found) if found is not None else None


def record_eval_results(results: EvalResults, out_dir: str | Path, log: Callable[[str], None]) -> int | None:
    """Record `results` (report: `out_dir/results.json`) as an eval of its model; the eval id, or None."""
    where = registry_for(results.model)
    if where is None:
        log("eval not recorded in a registry: the model names none and no project is set up (`temper init`)")
        return None
    from tempering.runs.registry import Registry

    metrics = {s.suite: {k: m.mean for k, m in s.metrics.items()} for s in results.suites}
    with Registry(where) as registry:
        eval_id = registry.record_eval(results.model, Path(out_dir) / "results.json", metrics=metrics)
    log(f"eval {eval_id} recorded in {where}")
    return eval_id
