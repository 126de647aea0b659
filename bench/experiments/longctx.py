"""Long context on the default model: the RULER-style baseline by kind x length x depth, and
passkey retrieval past the native window with YaRN.

  baseline      each `longctx-<kind>` suite (held-out split) at each `--lengths`, `--n` tasks per
                length cycling through depths 0 .. 1, greedy, through `evals.runner.run_suite`
                with the static-batch HF engine; accuracy with a Wilson 95% interval per cell.
  extrapolate   the model copied with YaRN x2 (`models.rope.scale_rope`: 8,192 -> 16,384), passkey
                at `--extrapolate-length` tokens, as many of `--extrapolate-n` tasks as the time
                budget allows (the result says how many ran and how long each took).

Each (kind, length) cell is its own suite run, so a `--budget-min` that runs out leaves the cells
done so far in the result (marked); each cell keeps its per-task scores, which the recipe's 8k
column pairs with. The long-context SFT recipe (`examples/longctx.yaml`, gain at 4k over 3 seeds)
is `bench/experiments/longctx_recipe.py`, which merges `recipe` and `gain_4k_*` into the same file.

    python bench/experiments/longctx.py --lengths 1024 2048 4096 8192 --n 10 --n-at 8192=20 \
        --kinds-at 8192=passkey,multikey,vartrack,noisy --budget-min 60 --extrapolate-min 40

Writes bench/results/longctx.json and bench/results/longctx_heatmap.png.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # bench/, for _shared
from _shared.paths import RESULTS, cpu_name  # noqa: E402

KINDS = ("passkey", "multikey", "vartrack", "crossfact", "noisy")


def wilson(k: int, n: int) -> list[float]:
    """Wilson score interval of k successes in n tasks (`tempering.evals.stats`); [0, 1] for none."""
    from tempering.evals.stats import wilson_interval

    if n == 0:
        return [0.0, 1.0]
    e = wilson_interval(k, n)
    return [e.low, e.high]


def cell_suite(kind: str, length: int, n: int, model: str, split: str = "heldout"):
    """The built-in `longctx-<kind>` suite narrowed to one length and `n` tasks."""
    import yaml

    from tempering.evals.suite import builtin_suite_dir, read_suite

    data = yaml.safe_load((builtin_suite_dir() / f"longctx-{kind}.yaml").read_text())
    data["name"] = f"longctx-{kind}-L{length}"
    data["tasks"] |= {"n": n, "split": split}
    data["tasks"]["config"] |= {"lengths": [length], "model": model}
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / f"longctx-{kind}-{length}.yaml"
        path.write_text(yaml.safe_dump(data))
        suite = read_suite(path)
        _ = suite.task_list  # built while the file exists
    return suite


def run_cell(suite, engine) -> dict:
    """Accuracy of one suite run, per depth and overall, with Wilson intervals."""
    from tempering.evals.runner import run_suite

    t0 = time.perf_counter()
    result = run_suite(suite, engine, seeds=1)
    scores = result.scores_of("accuracy")
    by_depth: dict[str, list[float]] = {}
    for task_id, values in scores.items():
        by_depth.setdefault(task_id.split("-")[3].removeprefix("d"), []).append(sum(values) / len(values))
    flat = [v for vs in by_depth.values() for v in vs]
    k = round(sum(flat))
    per_task = {task_id: sum(values) / len(values) for task_id, values in sorted(scores.items())}
    return {
        "n": len(flat),
        "accuracy": k / len(flat),
        "per_task": per_task,
        "ci95": wilson(k, len(flat)),
        "by_depth": {d: sum(v) / len(v) for d, v in sorted(by_depth.items())},
        "seconds": time.perf_counter() - t0,
    }


def heatmap(cells: dict, out: Path) -> None:
    """Accuracy by (kind, length) rows x depth columns: one row per measured cell."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = [(kind, length) for kind, by_len in cells.items() for length in sorted(by_len, key=int)]
    depths = sorted({d for kind, length in rows for d in cells[kind][length]["by_depth"]}, key=float)
    grid = [[cells[kind][length]["by_depth"].get(d, float("nan")) for d in depths] for kind, length in rows]
    fig, ax = plt.subplots(figsize=(6, 0.45 * len(rows) + 1.2))
    im = ax.imshow(grid, vmin=0, vmax=1, cmap="viridis", aspect="auto")
    ax.set_xticks(range(len(depths)), depths)
    ax.set_yticks(range(len(rows)), [f"{kind} @ {length}" for kind, length in rows])
    ax.set_xlabel("needle depth")
    ax.set_title("SmolLM2-135M-Instruct, greedy: accuracy")
    for i, row in enumerate(grid):
        for j, v in enumerate(row):
            ax.text(j, i, "-" if math.isnan(v) else f"{v:.1f}", ha="center", va="center", color="w" if v < 0.6 else "k")
    fig.colorbar(im)
    fig.tight_layout()
    fig.savefig(out, dpi=100)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--kinds", nargs="+", default=list(KINDS))
    p.add_argument("--lengths", nargs="+", type=int, default=[1024, 2048, 4096])
    p.add_argument("--n", type=int, default=10, help="tasks per kind per length")
    p.add_argument("--n-at", nargs="*", default=[], metavar="LENGTH=N", help="another task count at one length")
    p.add_argument("--kinds-at", nargs="*", default=[], metavar="LENGTH=K1,K2", help="other kinds at one length")
    p.add_argument("--out", type=Path, default=RESULTS / "longctx.json")
    p.add_argument("--extrapolate-n", type=int, default=20, help="passkey tasks at 2x the native window")
    p.add_argument("--extrapolate-length", type=int, default=16_384)
    p.add_argument("--extrapolate-from", type=int, default=0, help="skip the first K extrapolation tasks (a split run)")
    p.add_argument("--budget-min", type=float, default=22.0, help="baseline: start no cell after this")
    p.add_argument("--extrapolate-min", type=float, default=15.0, help="extrapolation: start no task after this")
    p.add_argument("--replot", action="store_true", help="only redraw the heatmap from longctx.json")
    p.add_argument(
        "--extrapolate-only",
        action="store_true",
        help="run only the YaRN passkey part and replace `extrapolation` in the existing longctx.json",
    )
    args = p.parse_args()
    if args.replot:
        return heatmap(json.loads((RESULTS / "longctx.json").read_text())["baseline"], RESULTS / "longctx_heatmap.png")
    if args.extrapolate_only:
        return extrapolate_only(args)

    import torch

    from tempering.config import EngineSettings
    from tempering.models.load import load_model, load_tokenizer
    from tempering.rollout.select import build_engine

    start, model_name = time.perf_counter(), "smollm2-135m-instruct"
    left = lambda: args.budget_min * 60 - (time.perf_counter() - start)  # noqa: E731
    tokenizer, model = load_tokenizer(model_name), load_model(model_name).eval()
    engine = build_engine(EngineSettings(kind="hf"), model, tokenizer, "auto")
    result: dict = {
        "benchmark": "longctx",
        "date": time.strftime("%Y-%m-%d %H:%M:%S"),
        "model": model_name,
        "cpu": cpu_name(),
        "torch_threads": torch.get_num_threads(),
        "load_average_at_start": os.getloadavg(),
        "note": "greedy, one sample per task; load averages at start and end say what ran beside",
        "command": "python bench/experiments/longctx.py " + " ".join(sys.argv[1:]),
        "baseline": {},
        "skipped_for_budget": [],
        "gain_4k_mean": None,
        "gain_4k_ci_low": None,
        "recipe": "not run: the long-context SFT recipe (3 seeds) did not fit this session's time on this machine",
    }
    n_at = {int(k): int(v) for k, v in (item.split("=") for item in args.n_at)}
    kinds_at = {int(k): v.split(",") for k, v in (item.split("=") for item in args.kinds_at)}
    result["tasks_per_cell"] = {str(length): n_at.get(length, args.n) for length in args.lengths}
    for length in args.lengths:
        for kind in kinds_at.get(length, args.kinds):
            if left() <= 0:
                result["skipped_for_budget"].append(f"{kind}@{length}")
                continue
            cell = run_cell(cell_suite(kind, length, n_at.get(length, args.n), model_name), engine)
            result["baseline"].setdefault(kind, {})[str(length)] = cell
            print(
                f"{kind:<10} {length:>6} acc {cell['accuracy']:.2f} {cell['ci95']} {cell['seconds']:.0f} s", flush=True
            )
    del engine, model
    t1 = time.perf_counter()
    result["extrapolation"] = extrapolate(
        args, model_name, lambda: args.extrapolate_min * 60 - (time.perf_counter() - t1)
    )
    result["load_average_at_end"] = os.getloadavg()
    result["wall_s"] = time.perf_counter() - start
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1))
    if result["baseline"]:
        heatmap(result["baseline"], args.out.with_name(args.out.stem + "_heatmap.png"))


def extrapolate_only(args: argparse.Namespace) -> None:
    """The YaRN part alone: the baseline cells already in longctx.json stay as they are."""
    import torch

    path = args.out
    result = json.loads(path.read_text()) if path.exists() else {}
    start, load_before = time.perf_counter(), os.getloadavg()
    part = extrapolate(args, "smollm2-135m-instruct", lambda: args.extrapolate_min * 60 - (time.perf_counter() - start))
    result["extrapolation"] = part | {
        "date": time.strftime("%Y-%m-%d %H:%M:%S"),
        "torch_threads": torch.get_num_threads(),
        "load_average_before_after": [load_before, os.getloadavg()],
        "wall_s": time.perf_counter() - start,
        "command": "python bench/experiments/longctx.py " + " ".join(sys.argv[1:]),
    }
    path.write_text(json.dumps(result, indent=1))


def extrapolate(args: argparse.Namespace, model_name: str, left) -> dict:
    """Passkey at 2x the native window with YaRN x2, one task at a time until the budget runs out."""
    from tempering.config import EngineSettings, RopeScaling
    from tempering.evals.suite import Suite
    from tempering.models.load import load_model, load_tokenizer
    from tempering.models.rope import scale_rope
    from tempering.rollout.select import build_engine

    out: dict = {"rope_scaling": {"type": "yarn", "factor": 2.0}, "length": args.extrapolate_length, "tasks": []}
    if left() <= 0:
        return out | {"ran": 0, "why": "no time left in the budget"}
    tokenizer = load_tokenizer(model_name)
    model = scale_rope(load_model(model_name), RopeScaling(type="yarn", factor=2.0)).eval()
    with tempfile.TemporaryDirectory() as tmp:
        model.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        suite = cell_suite("passkey", args.extrapolate_length, args.extrapolate_n, tmp)
    engine = build_engine(EngineSettings(kind="hf"), model, tokenizer, "auto")
    for task in suite.task_list[args.extrapolate_from :]:
        if left() <= 0:
            break
        fields = {"templates": suite.templates, "sampling": suite.sampling.model_dump(), "metrics": suite.metrics}
        one = Suite.of_tasks(f"{suite.name}-{task.id}", [task], suite.tasks[0], **fields)
        cell = run_cell(one, engine)
        out["tasks"].append({"id": task.id, "correct": cell["accuracy"], "seconds": cell["seconds"]})
        print(f"extrapolate {task.id}: {cell['accuracy']:.0f} in {cell['seconds']:.0f} s", flush=True)
    k, n = round(sum(t["correct"] for t in out["tasks"])), len(out["tasks"])
    return out | {"ran": n, "requested": args.extrapolate_n, "accuracy": k / n if n else None, "ci95": wilson(k, n)}


if __name__ == "__main__":
    main()
