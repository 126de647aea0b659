"""Two tracks trained apart, then merged by every method: how much of each specialist's gain survives?

    nice -n 19 python bench/experiments/merge_tracks.py [--work /tmp/merge-bench] [--until train|sweep|all]

On the default model (smollm2-135m-instruct, precision auto):

  1. SFT sets from task sources with their reference answers: track `add` (built-in 2-digit
     addition, train split, reply = the number) and track `spell` (reasoning-gym
     spell_backward, 3-5 letters, eval and dev words left out, reply = `<answer>...</answer>`);
  2. `temper sft` per track (LoRA r=16, same base and settings but the data), and the baseline
     that matters: one multi-task run on the union with the same compute (steps_add + steps_spell
     steps of the same batch size);
  3. each adapter exported to a full model (`temper export`), so mergekit merges the exact weight
     deltas: linear, task_arithmetic, ties, dare_linear, dare_ties, plus PEFT's `cat` (the exact
     sum of the LoRA deltas);
  4. a small sweep per method over the merge weight (and density where the method has one),
     chosen on a DEV split (tasks of neither the training set nor the held-out suites) by the
     smallest retention over the tracks; the held-out suites only score the chosen setting;
  5. held-out evals (greedy) of the base, both specialists, the multi-task run and each method's
     chosen merge on both track suites and a general suite (2-digit subtraction), and the general
     gate (`no significant regression on gen-sub`) per model.

Retention of a track = (merged - base) / (specialist - base) on that track's suite (mean reward:
exact for addition, partial credit for spelling), with a 95% paired bootstrap CI over tasks.
`min_retention` is the best method's smallest retention over the tracks.

Writes bench/results/merge.json (the previous result kept under `previous`). Finished stages
are reused on a rerun (runs and evals are kept in --work).
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
SUITE = {"add": "merge-add", "spell": "merge-spell"}
GENERAL = "gen-sub"
BASE = "smollm2-135m-instruct"
# (method, weight, density): mergekit over exported full models, except PEFT's "cat" over the adapters
SWEEP = {
    "linear": [(0.5, None)],
    "task_arithmetic": [(0.6, None), (0.8, None), (1.0, None)],
    "ties": [(0.8, 0.5), (1.0, 0.5), (1.0, 0.8)],
    "dare_linear": [(0.8, 0.5), (1.0, 0.5), (1.0, 0.8)],
    "dare_ties": [(0.8, 0.5), (1.0, 0.5), (1.0, 0.8)],
    "cat": [(0.5, None), (0.6, None), (0.7, None), (0.8, None), (1.0, None)],
}


def temper(*args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    print("$ temper " + " ".join(args), flush=True)
    t0 = time.time()
    proc = subprocess.run([sys.executable, "-m", "tempering.cli", *args], env=env, capture_output=True, text=True)
    print(f"  ({time.time() - t0:.0f} s, rc {proc.returncode}, load {os.getloadavg()[0]:.1f})", flush=True)
    if proc.returncode != 0:
        sys.stderr.write(proc.stdout[-2000:] + proc.stderr[-3000:])
        raise SystemExit(f"temper {args[0]} failed (rc {proc.returncode})")
    return proc


def others_running() -> dict:
    out = subprocess.run(["ps", "-eo", "pid,ni,pcpu,args", "--sort=-pcpu"], capture_output=True, text=True).stdout
    procs = [line.strip()[:160] for line in out.splitlines()[1:10] if "python" in line and str(os.getpid()) not in line]
    return {"loadavg": os.getloadavg(), "processes": procs}


def write_suite(work: Path, name: str, tasks: dict, max_new_tokens: int, description: str) -> Path:
    suite = {
        "name": name,
        "track": "reasoning",
        "description": description,
        "tasks": tasks,
        "templates": ["{prompt}"],
        "sampling": {"temperature": 0.0, "n": 1, "max_new_tokens": max_new_tokens},
        "metrics": ["accuracy", "mean_reward"],
        "seeds": 1,
    }
    path = work / f"suite-{name}.yaml"
    path.write_text(json.dumps(suite))
    return path


def suites(work: Path, n: int, n_dev: int) -> tuple[list[Path], list[Path]]:
    """(held-out suites: both tracks and the general one; dev suites of both tracks), all greedy."""
    spell_cfg = {"min_word_len": 3, "max_word_len": 5}
    heldout = [
        write_suite(
            work,
            SUITE["add"],
            {"source": "builtin:arithmetic", "ops": "+", "split": "heldout", "n": n, "seed": 0},
            12,
            "held-out 2-digit additions",
        ),
        write_suite(
            work,
            SUITE["spell"],
            {"source": "reasoning_gym:spell_backward", "n": n, "seed": 0, "config": spell_cfg},
            20,
            "reasoning-gym spell_backward, 3-5 letters",
        ),
        write_suite(
            work,
            GENERAL,
            {"source": "builtin:arithmetic", "ops": "-", "split": "heldout", "n": n, "seed": 0},
            32,
            "general: held-out 2-digit subtraction, a skill neither track trains",
        ),
    ]
    dev = [
        write_suite(
            work,
            "dev-add",
            {"source": str(work / "dev-add.jsonl")},
            12,
            "dev: train-split additions not trained on",
        ),
        write_suite(
            work, "dev-spell", {"source": str(work / "dev-spell.jsonl")}, 20, "dev: spell_backward words not trained on"
        ),
    ]
    return heldout, dev


def write_data(work: Path, rows: int, n: int, n_dev: int) -> dict[str, Path]:
    """Training conversations of each track and of their union, and the dev task files.

    Dev tasks come from the training splits' generators with other seeds, minus every trained
    prompt; the held-out suites' words (spell) and pairs (add: the held-out split) never appear.
    """
    from tempering.data.builtin import arithmetic_tasks
    from tempering.sources.reasoning_gym import reasoning_gym_tasks

    def row(prompt: str, answer: str) -> str:
        msgs = [{"role": "user", "content": prompt}, {"role": "assistant", "content": answer}]
        return json.dumps({"messages": msgs}) + "\n"

    def word(t) -> str:
        return t.verifier["entry"]["metadata"]["word"]

    add = arithmetic_tasks(rows, seed=3, split="train", ops="+")
    trained = {t.prompt for t in add}
    add_dev = [t for t in arithmetic_tasks(4 * n_dev, seed=17, split="train", ops="+") if t.prompt not in trained][
        :n_dev
    ]
    held = {word(t) for t in reasoning_gym_tasks("spell_backward", n, 0, min_word_len=3, max_word_len=5)}
    pool = [t for t in reasoning_gym_tasks("spell_backward", 4 * rows, 11, min_word_len=3, max_word_len=5)]
    spell, seen = [], set(held)
    for t in pool:
        if word(t) not in seen and len(spell) < rows:
            spell.append(t)
            seen.add(word(t))
    # reasoning-gym seeds item i with seed + i: a far seed gives other words
    spell_dev = [
        t
        for t in reasoning_gym_tasks("spell_backward", 6 * n_dev, 100_000, min_word_len=3, max_word_len=5)
        if word(t) not in seen
    ][:n_dev]
    lines = {
        "add": [row(t.prompt, t.verifier["answer"]) for t in add],
        "spell": [row(t.prompt, f"<answer>{t.verifier['entry']['answer']}</answer>") for t in spell],
    }
    paths = {k: work / f"{k}_train.jsonl" for k in ("add", "spell", "union")}
    paths["add"].write_text("".join(lines["add"]))
    paths["spell"].write_text("".join(lines["spell"]))
    paths["union"].write_text("".join(lines["add"] + lines["spell"]))
    (work / "dev-add.jsonl").write_text("".join(t.model_dump_json(exclude_none=True) + "\n" for t in add_dev))
    (work / "dev-spell.jsonl").write_text("".join(t.model_dump_json(exclude_none=True) + "\n" for t in spell_dev))
    return paths


def sft(work: Path, name: str, data: Path, steps: int, threads: int) -> str:
    cfg = {
        "model": BASE,
        "lora": {"r": 16, "alpha": 32},
        "data": {"train": [str(data)], "max_length": 128},
        "train": {
            "steps": steps,
            "batch_size": 8,
            "threads": threads,
            "precision": "auto",
            "optim": {"lr": 1.0e-3, "warmup_steps": 3, "schedule": "cosine"},
            "checkpoint": {"every": 1000},
        },
        "out": str(work / "runs"),
        "name": name,
    }
    path = work / f"sft-{name}.yaml"
    path.write_text(json.dumps(cfg))
    if not (work / "runs" / name / "summary.json").is_file():
        temper("sft", str(path))
    return str(work / "runs" / name / "final")


def export(work: Path, name: str, adapter: str) -> str:
    out = work / "full" / name
    if not (out / "config.json").is_file():
        temper("export", adapter, "--out", str(out), "--force")
    return str(out)


def merge(work: Path, method: str, weight: float, density: float | None, inputs: list[str]) -> str:
    """One merge; PEFT `cat` over adapters, mergekit over full models (with the base's task vectors)."""
    from tempering.models.load import resolve_model

    name = f"merge-{method}-w{weight}" + (f"-d{density}" if density is not None else "")
    cfg: dict = {"inputs": inputs, "weights": [weight] * len(inputs), "method": method}
    if method != "cat" and method != "linear":
        cfg["base"] = resolve_model(BASE)
    if density is not None:
        cfg["density"] = density
    cfg.update(out=str(work / "runs"), name=name)
    path = work / f"{name}.yaml"
    path.write_text(json.dumps(cfg))
    if not (work / "runs" / name / "summary.json").is_file():
        temper("merge", str(path))
    return str(work / "runs" / name / "final")


def evaluate(model: str, out: Path, suite_paths: list[Path], threads: int) -> dict:
    """Per suite: metrics with CIs and per-task mean reward (the paired statistics read them)."""
    from tempering.evals.results import EvalResults

    if not (out / "results.json").is_file():
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
        r = json.loads(line)
        per_task.setdefault(r["suite"], {}).setdefault(r["task_id"], []).append(float(r["reward"] or 0.0))
    res = EvalResults.load(out / "results.json")
    return {
        s.suite: {
            "metrics": {k: {"mean": m.mean, "low": m.low, "high": m.high, "n": m.n} for k, m in s.metrics.items()},
            "tasks": {t: sum(v) / len(v) for t, v in per_task[s.suite].items()},
        }
        for s in res.suites
    }


def retention(base: dict, single: dict, merged: dict, seed: int = 0, draws: int = 2000) -> dict:
    """(merged - base) / (single - base) of the mean reward, with a bootstrap CI over tasks
    (`tempering.evals.stats.bootstrap_statistic`; resamples where the specialist gains nothing are left out)."""
    import numpy as np

    from tempering.evals.stats import bootstrap_statistic

    ids = sorted(single["tasks"])
    b, s, m = (np.array([d["tasks"][t] for t in ids]) for d in (base, single, merged))
    gain = float(s.mean() - b.mean())

    def ratio(b, s, m) -> float:
        g = s.mean() - b.mean()
        return float((m.mean() - b.mean()) / g) if g > 1e-9 else float("nan")

    try:
        e = bootstrap_statistic(ratio, b, s, m, resamples=draws, seed=seed)
        value, low, high = e.mean, e.low, e.high
    except ValueError:  # the specialist gained nothing: no retention to measure
        value, low, high = None, None, None
    return {"retention": value, "low": low, "high": high, "specialist_gain": gain, "n": len(ids)}


def gate(base_dir: Path, cand_dir: Path) -> dict:
    """The general regression gate on the held-out results: no significant regression on gen-sub."""
    from tempering.evals.gate import parse_rules, run_gate
    from tempering.evals.results import EvalResults

    rules = parse_rules([f"no significant regression on {GENERAL}"])
    verdict = run_gate(rules, EvalResults.load(base_dir / "results.json"), EvalResults.load(cand_dir / "results.json"))
    return {"passed": verdict.passed, "rules": [r.to_dict() for r in verdict.rules]}


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--work", default="/tmp/merge-bench")
    p.add_argument("--rows", type=int, default=320)
    p.add_argument("--steps-add", type=int, default=30)
    p.add_argument("--steps-spell", type=int, default=40)
    p.add_argument("--n", type=int, default=60, help="held-out tasks per suite")
    p.add_argument("--n-dev", type=int, default=30, help="dev tasks per track (the sweep reads only these)")
    p.add_argument("--methods", nargs="+", default=list(SWEEP))
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--note", default=None, help="what else was running, as observed (kept in the result)")
    p.add_argument("--until", choices=["train", "sweep", "all"], default="all")
    args = p.parse_args()
    sys.path.insert(0, str(ROOT / "src"))
    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    state_path = work / "state.json"
    state = json.loads(state_path.read_text()) if state_path.is_file() else {"seconds": {}, "load": []}
    state.setdefault("started", time.strftime("%Y-%m-%d %H:%M:%S"))

    def timed(stage: str, fn, *a):
        t = time.time()
        out = fn(*a)
        if stage not in state["seconds"]:
            state["seconds"][stage] = round(time.time() - t, 1)
        state["load"].append({"after": stage, "time": time.strftime("%H:%M:%S"), **others_running()})
        state_path.write_text(json.dumps(state, indent=1))
        return out

    data = write_data(work, args.rows, args.n, args.n_dev)
    heldout, dev = suites(work, args.n, args.n_dev)
    adapters = {
        "add": timed("sft-add", sft, work, "track-add", data["add"], args.steps_add, args.threads),
        "spell": timed("sft-spell", sft, work, "track-spell", data["spell"], args.steps_spell, args.threads),
    }
    multitask = timed(
        "sft-union", sft, work, "multitask", data["union"], args.steps_add + args.steps_spell, args.threads
    )
    if args.until == "train":
        return
    full = [timed(f"export-{t}", export, work, f"track-{t}", adapters[t]) for t in TRACKS]
    dev_scores = {
        key: timed(f"dev-{key}", evaluate, model, work / "dev" / key, dev, args.threads)
        for key, model in (("base", BASE), ("track-add", adapters["add"]), ("track-spell", adapters["spell"]))
    }
    sweep: dict = {}
    for method in args.methods:
        for weight, density in SWEEP[method]:
            inputs = [adapters[t] for t in TRACKS] if method == "cat" else full
            model = timed(f"merge-{method}-{weight}-{density}", merge, work, method, weight, density, inputs)
            key = Path(model).parent.name
            ev = timed(f"dev-{key}", evaluate, model, work / "dev" / key, dev, args.threads)
            kept = {
                t: retention(dev_scores["base"][f"dev-{t}"], dev_scores[f"track-{t}"][f"dev-{t}"], ev[f"dev-{t}"])
                for t in TRACKS
            }
            worst = min((k["retention"] if k["retention"] is not None else -9.0) for k in kept.values())
            sweep.setdefault(method, []).append(
                {"weight": weight, "density": density, "model": model, "dev_retention": kept, "dev_min": worst}
            )
            print(f"  dev {key}: " + ", ".join(f"{t} {k['retention']:.2f}" for t, k in kept.items()), flush=True)
    if args.until == "sweep":
        return
    chosen = {m: max(rows, key=lambda r: r["dev_min"]) for m, rows in sweep.items()}
    models = {"base": BASE, "track-add": adapters["add"], "track-spell": adapters["spell"], "multitask": multitask}
    models.update({f"merge-{m}": c["model"] for m, c in chosen.items()})
    scores = {
        key: timed(f"eval-{key}", evaluate, model, work / "eval" / key, heldout, args.threads)
        for key, model in models.items()
    }
    methods = {}
    for key in [k for k in models if k.startswith(("merge-", "multitask"))]:
        kept = {
            t: retention(scores["base"][SUITE[t]], scores[f"track-{t}"][SUITE[t]], scores[key][SUITE[t]])
            for t in TRACKS
        }
        methods[key] = {
            "retention": kept,
            "min_retention": min((k["retention"] if k["retention"] is not None else -9.0) for k in kept.values()),
            "general_gate": gate(work / "eval" / "base", work / "eval" / key),
            **(
                {"chosen_on_dev": {k: chosen[key[6:]][k] for k in ("weight", "density", "dev_min")}}
                if key != "multitask"
                else {}
            ),
        }
    for key in ("track-add", "track-spell"):
        methods[key] = {"general_gate": gate(work / "eval" / "base", work / "eval" / key)}
    merges = {k: v for k, v in methods.items() if k.startswith("merge-")}
    best = max(merges, key=lambda k: merges[k]["min_retention"])
    old = json.loads((RESULTS / "merge.json").read_text()) if (RESULTS / "merge.json").is_file() else None
    # a rerun keeps the first result's `previous`; the first run keeps the old two-track record there
    previous = old.get("previous") if old and old.get("benchmark") == "merge_tracks_v2" else old
    record = {
        "benchmark": "merge_tracks_v2",
        "model": f"{BASE} (precision auto)",
        "command": "nice -n 19 python bench/experiments/merge_tracks.py " + " ".join(sys.argv[1:]),
        "settings": {k: v for k, v in vars(args).items() if k != "until"},
        "min_retention": merges[best]["min_retention"],
        "best_method": best,
        "target_retention": 0.80,
        "best_passes_general_gate": merges[best]["general_gate"]["passed"],
        "multitask_min_retention": methods["multitask"]["min_retention"],
        "methods": methods,
        "sweep_on_dev": sweep,
        "scores": {key: {s: r["metrics"] for s, r in ev.items()} for key, ev in scores.items()},
        "dev_scores": {key: {s: r["metrics"] for s, r in ev.items()} for key, ev in dev_scores.items()},
        "started": state["started"],
        "finished": time.strftime("%Y-%m-%d %H:%M:%S"),
        "stage_seconds": state["seconds"],
        "load_during": state["load"],
        "note": args.note,
        "previous": previous,
    }
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "merge.json").write_text(json.dumps(record, indent=1))
    for key, m in methods.items():
        if "retention" in m:
            kept = "  ".join(
                f"{t} {r['retention']:.2f} [{r['low']:.2f}, {r['high']:.2f}]" for t, r in m["retention"].items()
            )
            print(f"{key:24s} retention {kept}  general gate {'PASS' if m['general_gate']['passed'] else 'FAIL'}")
    print(f"min_retention (best: {best}) = {record['min_retention']:.3f}")


if __name__ == "__main__":
    main()
