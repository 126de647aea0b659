"""Multi-domain GRPO in the recipe: load each domain's tasks, hold some out per domain, build the
schedule, and plot each domain's curves for the run report (docs/multidomain.md).

A domain's tasks are renamed `<domain>/<id>` so ids never collide across domains and a held-out
record names its domain. Every domain's source is loaded (and checked) before any work: an unknown
source, a domain with no tasks or a bad verifier spec is a one-line error naming the domain.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any, Callable

from tempering.atomic import write_text_atomic
from tempering.config import GRPOConfig, TaskSourceSettings
from tempering.errors import UserError
from tempering.types import Task


def load_domain(i: int, name: str, source: TaskSourceSettings, reward: Any) -> list[Task]:
    """One domain's tasks (the run's reward applied), ids prefixed with the domain.

    Raises:
        ValueError: `domains[i] (name): reason` for a source that does not load or holds no tasks.
    """
    from tempering.sources.tasks import load_tasks, with_reward

    try:
        tasks = with_reward(load_tasks(source), reward)
    except ValueError as exc:  # UnknownSource included
        raise UserError(f"domains[{i}] ({name}): {exc}") from None
    if not tasks:
        raise UserError(f"domains[{i}] ({name}): no tasks in {source.source!r}; give it tasks or drop the domain")
    return [t.model_copy(update={"id": f"{name}/{t.id}"}) for t in tasks]


def load_domains(cfg: GRPOConfig) -> dict[str, list[Task]]:
    """Every domain's training tasks by name, in the config's order."""
    assert cfg.domains is not None
    return {d.name: load_domain(i, d.name, d.tasks, cfg.reward) for i, d in enumerate(cfg.domains)}


def domain_of(task_id: str) -> str:
    """The domain a (renamed) task id belongs to."""
    return task_id.split("/", 1)[0]


def domain_heldout(
    cfg: GRPOConfig, domains: dict[str, list[Task]], run_dir: Path, split_heldout: Callable[..., Any]
) -> tuple[dict[str, list[Task]], list[Task]]:
    """(training tasks by domain, held-out tasks of every domain): each domain's own `heldout:`
    tasks, else a seeded split of its training tasks by `split_heldout(tasks, size, seed)` (the
    GRPO recipe's; `heldout.split_size` shared by the domains, recorded in heldout/split.json)."""
    assert cfg.domains is not None
    if cfg.heldout is None:
        return domains, []
    train: dict[str, list[Task]] = {}
    held: list[Task] = []
    record: dict[str, Any] = {"seed": cfg.train.seed, "domains": {}}
    size = max(1, cfg.heldout.split_size // len(cfg.domains))
    for i, d in enumerate(cfg.domains):
        if d.heldout is not None:
            own = load_domain(i, d.name, d.heldout, cfg.reward)
            prompts = {json.dumps(t.chat(), sort_keys=True) for t in own}
            train[d.name] = [t for t in domains[d.name] if json.dumps(t.chat(), sort_keys=True) not in prompts]
        else:
            train[d.name], own = split_heldout(domains[d.name], size, cfg.train.seed)
        if not train[d.name]:
            raise UserError(f"domains[{i}] ({d.name}): every training task is also held out")
        held += own
        record["domains"][d.name] = {"heldout": len(own), "train": len(train[d.name]), "from": d.tasks.source}
    (run_dir / "heldout").mkdir(parents=True, exist_ok=True)
    write_text_atomic(run_dir / "heldout" / "split.json", json.dumps(record, indent=1))
    return train, held


def build_schedule(cfg: GRPOConfig, domains: dict[str, list[Task]]) -> Any:
    """The run's `DomainSchedule` over the domains' training tasks."""
    from tempering.config import MixtureSettings
    from tempering.rollout.domains import DomainSchedule

    assert cfg.domains is not None
    weights = {d.name: d.weight for d in cfg.domains}
    return DomainSchedule(domains, weights, cfg.mixture or MixtureSettings(), cfg.train.seed)


def heldout_by_domain(records: list[dict[str, Any]]) -> dict[str, float]:
    """Held-out accuracy and mean reward per domain, `domain/<name>/accuracy|reward`, from the
    suite's sample records (judged samples only)."""
    scored: dict[str, list[dict[str, Any]]] = {}
    for r in records:
        if r["status"] == "scored":
            scored.setdefault(domain_of(r["task_id"]), []).append(r)
    out: dict[str, float] = {}
    for name, rows in sorted(scored.items()):
        out[f"domain/{name}/accuracy"] = sum(bool(r["passed"]) for r in rows) / len(rows)
        out[f"domain/{name}/reward"] = sum(r["reward"] for r in rows) / len(rows)
    return out


def plot_domains(out: Path, names: list[str], history: list[dict[str, Any]], heldout: list[dict[str, Any]]) -> Path:
    """The run report's per-domain plot: training success, share of the prompts, and held-out accuracy."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(1, 3, figsize=(15, 4))
    for name in names:
        for panel, key in ((0, "success"), (1, "share")):
            points = [(r["step"], r[f"domain/{name}/{key}"]) for r in history if f"domain/{name}/{key}" in r]
            points = [(s, v) for s, v in points if not math.isnan(v)]
            if points:
                ax[panel].plot(*zip(*points), label=name, marker=".")
        held = [(h["step"], h[f"domain/{name}/accuracy"]) for h in heldout if f"domain/{name}/accuracy" in h]
        if held:
            ax[2].plot(*zip(*held), label=name, marker="o")
    ax[0].set(title="training success per domain", xlabel="step", ylim=(-0.02, 1.02))
    ax[1].set(title="share of prompts (schedule)", xlabel="step", ylim=(0, 1))
    ax[2].set(title="held-out accuracy per domain", xlabel="step", ylim=(-0.02, 1.02))
    ax[2].legend(fontsize=7, loc="best")
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out
