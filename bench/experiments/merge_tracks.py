"""Two LoRA tracks trained apart, then merged: does each track keep its score (docs/merge.md)?

    nice -n 19 python bench/experiments/merge_tracks.py [--work /tmp/merge-bench] [--steps-add 40] [--steps-spell 80]

On the default model (smollm2-135m-instruct, precision auto = bf16 on this host):

  1. two SFT sets made from task sources with their reference answers: track `add` is
     built-in 2-digit addition (train split; the reply is just the number), track `spell`
     is reasoning-gym spell_backward (3-5 letter words, a seed other than the eval suite's,
     words of the eval suite left out; the reply is `<answer>...</answer>`);
  2. `temper sft` once per track (LoRA r=16, same base, same settings but the data);
  3. `temper merge` of the two adapters with several PEFT combination types (linear, cat,
     ties, dare_ties), weights [1, 1];
  4. `temper eval run` of the base, each single-track adapter and each merge on both
     tracks' suites (greedy, every template of the built-in suite, 95% bootstrap CIs over
     tasks) and, per merge and track, whether the merged score lies inside the single-track
     model's CI, plus the paired bootstrap CI of (merged - single-track).

Writes bench/results/merge.json. A learning run: what else ran is recorded before and after.
Finished stages are reused on a rerun (`temper sft` resumes/skips, evals are kept in --work).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # bench/, for _shared
from _shared.paths import RESULTS, ROOT  # noqa: E402

TRACKS = ("add", "spell")


def temper(*args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    print("$ temper " + " ".join(args), flush=True)
    t0 = time.time()
    proc = subprocess.run([sys.executable, "-m", "tempering.cli", *args], env=env, capture_output=True, text=True)
    print(f"  ({time.time() - t0:.0f} s, rc {proc.returncode})", flush=True)
    if proc.returncode != 0:
        sys.stderr.write(proc.stdout[-2000:] + proc.stderr[-3000:])
        raise SystemExit(f"temper {args[0]} failed (rc {proc.returncode})")
    return proc


def others_running() -> dict:
    out = subprocess.run(["ps", "-eo", "pid,ni,pcpu,args", "--sort=-pcpu"], capture_output=True, text=True).stdout
    procs = [line.strip()[:160] for line in out.splitlines()[1:10] if "python" in line and str(os.getpid()) not in line]
    return {"loadavg": os.getloadavg(), "processes": procs}


def suites(work: Path, n_add: int, n_spell: int) -> dict[str, Path]:
    """The built-in suites of both tracks, greedy (one sample, every template): cheap, deterministic."""
    greedy = {"temperature": 0.0, "n": 1}
    add = {
        "name": "merge-add",
        "track": "reasoning",
        "description": "held-out 2-digit additions (built-in arithmetic-add's tasks and templates), greedy",
        "tasks": {"source": "builtin:arithmetic", "ops": "+", "split": "heldout", "n": n_add, "seed": 0},
        "templates": ["{prompt}", "Question: {prompt}", "Please solve this. {prompt}"],
        "sampling": {**greedy, "max_new_tokens": 16},
        "metrics": ["accuracy", "mean_reward"],
        "seeds": 1,
    }
    spell = {
        "name": "merge-spell",
        "track": "reasoning",
        "description": "reasoning-gym spell_backward, 3-5 letters (built-in rg-spell-backward's tasks), greedy",
        "tasks": {
            "source": "reasoning_gym:spell_backward",
            "n": n_spell,
            "seed": 0,
            "config": {"min_word_len": 3, "max_word_len": 5},
        },
        "templates": ["{prompt}", "Question: {prompt}"],
        "sampling": {**greedy, "max_new_tokens": 24},
        "metrics": ["accuracy", "mean_reward"],
        "seeds": 1,
    }
    out = {}
    for track, suite in (("add", add), ("spell", spell)):
        out[track] = work / f"suite-{track}.yaml"
        out[track].write_text(json.dumps(suite))
    return out


def sft_rows(work: Path, n: int, n_spell_eval: int) -> dict[str, Path]:
    """Training conversations of each track from task sources with their reference answers."""
    from tempering.data.builtin import arithmetic_tasks
    from tempering.sources.reasoning_gym import reasoning_gym_tasks

    def row(prompt: str, answer: str) -> str:
        return (
            json.dumps({"messages": [{"role": "user", "content": prompt}, {"role": "assistant", "content": answer}]})
            + "\n"
        )

    add = arithmetic_tasks(n, seed=3, split="train", ops="+")
    eval_words = {
        t.verifier["entry"]["metadata"]["word"]
        for t in reasoning_gym_tasks("spell_backward", n_spell_eval, 0, min_word_len=3, max_word_len=5)
    }
    spell = [
        t
        for t in reasoning_gym_tasks("spell_backward", 3 * n, 11, min_word_len=3, max_word_len=5)
        if t.verifier["entry"]["metadata"]["word"] not in eval_words
    ][:n]
    paths = {"add": work / "add_train.jsonl", "spell": work / "spell_train.jsonl"}
    paths["add"].write_text("".join(row(t.prompt, t.verifier["answer"]) for t in add))
    paths["spell"].write_text(
        "".join(row(t.prompt, f"<answer>{t.verifier['entry']['answer']}</answer>") for t in spell)
    )
    return paths


def sft_config(work: Path, track: str, data: Path, steps: int, threads: int) -> Path:
    cfg = {
        "model": "smollm2-135m-instruct",
        "lora": {"r": 16, "alpha": 32},
        "data": {"train": [str(data)], "max_length": 256},
        "train": {
            "steps": steps,
            "batch_size": 8,
            "threads": threads,
            "precision": "auto",
            "optim": {"lr": 1.0e-3, "warmup_steps": 4, "schedule": "cosine"},
            "checkpoint": {"every": 1000},
        },
        "out": str(work / "runs"),
        "name": f"track-{track}",
    }
    path = work / f"sft-{track}.yaml"
    path.write_text(json.dumps(cfg))
    return path


def merge_config(work: Path, variant: str, density: float | None) -> Path:
    """`variant` is a method ("cat", weights [1, 1]) or method:weight ("cat:0.5", weights [0.5, 0.5])."""
    method, _, weight = variant.partition(":")
    w = float(weight or 1.0)
    cfg = {
        "inputs": [str(work / "runs" / f"track-{t}" / "final") for t in TRACKS],
        "weights": [w, w],
        "method": method,
        "out": str(work / "runs"),
        "name": f"merge-{label(variant)}",
    }
    if density is not None and method not in ("linear", "cat"):
        cfg["density"] = density
    path = work / f"merge-{label(variant)}.yaml"
    path.write_text(json.dumps(cfg))
    return path


def label(variant: str) -> str:
    """The run-name part of a merge variant: "cat" -> "cat", "cat:0.5" -> "cat-w0.5"."""
    method, _, weight = variant.partition(":")
    return f"{method}-w{weight}" if weight else method


def evaluate(model: str, out: Path, suite_paths: list[Path], threads: int) -> tuple[dict, bool]:
    """Per suite: accuracy/mean_reward with CIs and per-task scores of both; and whether it ran now."""
    from tempering.evals.results import EvalResults

    ran = not (out / "results.json").is_file()
    if ran:
        temper(
            "eval",
            "run",
            *map(str, suite_paths),
            "--model",
            model,
            "--out",
            str(out),
            "--no-cache",
            "--threads",
            str(threads),
        )
    per_task: dict = {}
    for line in (out / "samples.jsonl").read_text().splitlines():
        row = json.loads(line)
        task = per_task.setdefault(row["suite"], {}).setdefault(row["task_id"], {"accuracy": [], "mean_reward": []})
        task["accuracy"].append(1.0 if row["passed"] else 0.0)
        task["mean_reward"].append(float(row["reward"] or 0.0))
    res = EvalResults.load(out / "results.json")
    return {
        s.suite: {
            "metrics": {k: {"mean": m.mean, "low": m.low, "high": m.high, "n": m.n} for k, m in s.metrics.items()},
            "tasks": per_task[s.suite],
        }
        for s in res.suites
    }, ran


def compare(single: dict, merged: dict, metric: str) -> dict:
    """Is the merged score inside the single-track model's CI; paired bootstrap of (merged - single)."""
    import numpy as np

    from tempering.evals.stats import paired_bootstrap

    ids = sorted(single["tasks"])
    a = [float(np.mean(single["tasks"][t][metric])) for t in ids]
    b = [float(np.mean(merged["tasks"][t][metric])) for t in ids]
    s, m = single["metrics"][metric], merged["metrics"][metric]
    return {
        "single": s["mean"],
        "single_ci": [s["low"], s["high"]],
        "merged": m["mean"],
        "merged_ci": [m["low"], m["high"]],
        "within_single_ci": s["low"] <= m["mean"] <= s["high"],
        "not_below_single_ci": m["mean"] >= s["low"],
        "paired_diff": paired_bootstrap(a, b, seed=0).to_dict(),
    }


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--work", default="/tmp/merge-bench")
    p.add_argument("--rows", type=int, default=400)
    p.add_argument("--steps-add", type=int, default=40)
    p.add_argument("--steps-spell", type=int, default=60)
    p.add_argument("--n-add", type=int, default=100)
    p.add_argument("--n-spell", type=int, default=100)
    p.add_argument(
        "--methods",
        nargs="+",
        default=["linear", "cat", "ties", "dare_ties", "cat:0.5", "ties:0.5"],
        help="merge variants: METHOD (weights [1, 1]) or METHOD:W (weights [W, W])",
    )
    p.add_argument("--density", type=float, default=0.5, help="ties/dare: share of each delta kept")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--note", default=None, help="what else was running, as observed (kept in the result)")
    p.add_argument("--until", choices=["train", "merge", "all"], default="all")
    args = p.parse_args()
    sys.path.insert(0, str(ROOT / "src"))
    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    # stage timings and load snapshots survive a rerun (finished stages are skipped, not re-timed)
    state_path = work / "state.json"
    state = json.loads(state_path.read_text()) if state_path.is_file() else {"seconds": {}, "load": []}

    def done(stage: str, seconds: float | None) -> None:
        if seconds is not None:
            state["seconds"][stage] = seconds
        state["load"].append({"after": stage, "time": time.strftime("%H:%M:%S"), **others_running()})
        state_path.write_text(json.dumps(state, indent=1))

    state.setdefault("started", time.strftime("%Y-%m-%d %H:%M:%S"))
    data = sft_rows(work, args.rows, args.n_spell)
    suite_paths = suites(work, args.n_add, args.n_spell)
    record: dict = {
        "benchmark": "merge_tracks",
        "model": "smollm2-135m-instruct (precision auto: bf16 on this host)",
        "command": "nice -n 19 python bench/experiments/merge_tracks.py " + " ".join(sys.argv[1:]),
        "settings": {k: v for k, v in vars(args).items() if k != "until"},
    }
    for track, steps in (("add", args.steps_add), ("spell", args.steps_spell)):
        run_dir = work / "runs" / f"track-{track}"
        fresh, t = not (run_dir / "summary.json").is_file(), time.time()
        temper("sft", str(sft_config(work, track, data[track], steps, args.threads)))
        done(f"sft-{track}", time.time() - t if fresh else None)
        summary = json.loads((run_dir / "summary.json").read_text())
        steps_log = [
            json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines() if '"step"' in line
        ]
        record.setdefault("sft", {})[track] = {
            **{
                k: summary.get(k) for k in ("steps", "data", "train_loss_first", "train_loss_last", "real_tokens_per_s")
            },
            "train_seconds": sum(r.get("step_s", 0.0) for r in steps_log),
        }
    if args.until == "train":
        return
    for method in args.methods:
        fresh, t = not (work / "runs" / f"merge-{label(method)}" / "summary.json").is_file(), time.time()
        temper("merge", str(merge_config(work, method, args.density)))
        done(f"merge-{label(method)}", time.time() - t if fresh else None)
    if args.until == "merge":
        return
    models = {
        "base": "smollm2-135m-instruct",
        **{f"track-{t}": str(work / "runs" / f"track-{t}" / "final") for t in TRACKS},
        **{f"merge-{label(m)}": str(work / "runs" / f"merge-{label(m)}" / "final") for m in args.methods},
    }
    evals = {}
    for key, model in models.items():
        t = time.time()
        evals[key], ran = evaluate(model, work / "eval" / key, list(suite_paths.values()), args.threads)
        done(f"eval-{key}", time.time() - t if ran else None)
    record["scores"] = {key: {suite: r["metrics"] for suite, r in ev.items()} for key, ev in evals.items()}
    verdicts = {}
    for method in args.methods:
        for track, suite in (("add", "merge-add"), ("spell", "merge-spell")):
            single, merged = evals[f"track-{track}"][suite], evals[f"merge-{label(method)}"][suite]
            verdicts[f"{label(method)}/{track}"] = {
                metric: compare(single, merged, metric) for metric in ("accuracy", "mean_reward")
            }
    record["verdicts"] = verdicts
    record.update(
        started=state["started"],
        finished=time.strftime("%Y-%m-%d %H:%M:%S"),
        stage_seconds=state["seconds"],
        total_stage_seconds=sum(state["seconds"].values()),
        load_during=state["load"],
        note=args.note,
    )
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "merge.json").write_text(json.dumps(record, indent=1))
    for key, v in verdicts.items():
        for metric in ("accuracy", "mean_reward"):
            m = v[metric]
            print(
                f"{key:14s} {metric:11s} single {m['single']:.3f} [{m['single_ci'][0]:.3f}, {m['single_ci'][1]:.3f}]"
                f"  merged {m['merged']:.3f}  within CI: {m['within_single_ci']}  "
                f"paired diff {m['paired_diff']['delta']:+.3f} [{m['paired_diff']['low']:+.3f}, "
                f"{m['paired_diff']['high']:+.3f}]"
            )


if __name__ == "__main__":
    main()
