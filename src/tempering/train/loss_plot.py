"""`loss.png` beside a run's metrics.jsonl: the training loss per step and the held-out points.

Read from metrics.jsonl rather than one process's history, so a run resumed after a kill shows
its whole curve; a step logged twice (done again after a rollback or a resume) shows its last value.
"""

from __future__ import annotations

from pathlib import Path

from tempering.tracking.events import read_metrics


def loss_curves(metrics: Path) -> tuple[dict[int, float], dict[str, dict[int, float]]]:
    """(training loss by step, held-out metric -> value by step) from a metrics.jsonl."""
    train: dict[int, float] = {}
    held: dict[str, dict[int, float]] = {}
    for row in read_metrics(metrics):
        if "event" not in row and isinstance(row.get("loss"), (int, float)):
            train[row["step"]] = row["loss"]
        elif row.get("event") == "eval":
            for key, value in row.items():
                if "loss" in key:
                    held.setdefault(key, {})[row["step"]] = value
    return train, held


def plot_loss(metrics: Path, out: Path | None = None) -> Path | None:
    """Write the loss curve next to `metrics` (default `loss.png`); None when no step was logged."""
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib.figure import Figure

    train, held = loss_curves(metrics)
    if not train:
        return None
    out = out or metrics.with_name("loss.png")
    fig = Figure(figsize=(7, 4))
    ax = fig.subplots()
    steps = sorted(train)
    ax.plot(steps, [train[s] for s in steps], label="train loss")
    for key, points in sorted(held.items()):
        at = sorted(points)
        ax.plot(at, [points[s] for s in at], marker="o", label=f"held-out {key.removeprefix('eval_')}")
    ax.set(title=f"{metrics.parent.name}: loss", xlabel="step", ylabel="loss per unit")
    ax.legend()
    fig.tight_layout()
    fig.savefig(out, dpi=100)
    return out


def plot_moe_load(metrics: Path, out: Path | None = None) -> Path | None:
    """`moe_load.png` next to `metrics`: per-layer expert load heatmaps (token share) of the first and
    last logged steps, and the load CV per step; None for a dense model's run."""
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib.figure import Figure

    rows = [r for r in read_metrics(metrics) if "event" not in r and "moe_layer_share" in r]
    if not rows:
        return None
    out = out or metrics.with_name("moe_load.png")
    fig = Figure(figsize=(11, 3.4))
    first, last, curve = fig.subplots(1, 3)
    top = max(max(max(row) for row in r["moe_layer_share"]) for r in (rows[0], rows[-1]))
    for ax, r in ((first, rows[0]), (last, rows[-1])):
        image = ax.imshow(r["moe_layer_share"], cmap="viridis", vmin=0, vmax=top, aspect="auto")
        ax.set(title=f"step {r['step']}: token share", xlabel="expert", ylabel="layer")
    fig.colorbar(image, ax=last)
    curve.plot([r["step"] for r in rows], [r["moe_load_cv"] for r in rows], label="load CV (mean over layers)")
    curve.set(title=f"{metrics.parent.name}: expert load", xlabel="step")
    curve.legend()
    fig.tight_layout()
    fig.savefig(out, dpi=100)
    return out
