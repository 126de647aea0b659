"""Multi-domain GRPO on the default model: priority + per-domain normalisation vs uniform + one global
normalisation, at the same compute, held-out accuracy per domain before and after.

    python bench/experiments/multidomain.py [--seeds 0 1 2] [--steps 60] [--domains 8] [--single]

1. Candidate domains (12): builtin addition, subtraction, multiplication; reasoning-gym chain_sum
   and letter_counting; a tool-call format task (tool_call verifier); six short exact-answer tasks
   (capitalise, echo, first letter, parity, the larger number, the successor; where the 135M model
   answers in a sentence, a regex finds the answer in it). Each gets its
   training tasks and disjoint held-out tasks as task JSONL under --out.
2. `temper data stratify` on a sample of every candidate's training tasks (one run over all of
   them, k samples each, at the runs' sampling temperature): a domain's learnable share is the share of its
   tasks whose pass rate is strictly between 0 and 1. The --domains candidates with the largest
   learnable share (at least one learnable task) are the mixture.
3. Two arms per seed, each `temper grpo` with the same domains, steps, prompts per step and group
   size (the same number of samples; wall clock differs with reply lengths):
     ours     mixture.sampling priority, grpo.advantage per_domain
     uniform  mixture.sampling uniform,  grpo.advantage reinforce_pp_baseline (one global whitening)
   The arms of all seeds run side by side, one torch thread each. Held-out greedy accuracy per
   domain (each domain's `heldout:` tasks) at step 0 and at the end, item by item.
4. Per arm: each domain's delta (after - before, each item's difference averaged over the seeds)
   with a paired bootstrap CI over its items; the mean gain over domains with a stratified paired
   bootstrap CI (items resampled within each domain; `tempering.evals.stats`); the worst domain's delta. With --single, one single-domain run per
   domain at the same steps (ours' settings) gives the interference matrix: each row a run (mixed
   or single-domain), each column a domain's held-out delta.

The machine is shared: the load average is recorded before, during (every 30 s) and after.
Writes bench/results/multidomain.json (`domains`, `mean_gain_ci_low`, `worst_domain_delta`,
`worst_domain_delta_uniform`, per-arm and per-domain figures, the stratify rates, the schedule).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # bench/, for _shared
from _shared.paths import RESULTS, ROOT  # noqa: E402

sys.path.insert(0, str(ROOT / "src"))

CITIES = ["Paris", "Tokyo", "Lima", "Oslo", "Cairo", "Delhi", "Quito", "Rome", "Seoul", "Dakar", "Hanoi", "Bern"]
WORDS = (  # the first 28 for training tasks, the last 12 for held-out ones (disjoint prompts)
    "apple river stone cloud tiger bread chair light ocean piano grass sugar house table window garden "
    "pencil bottle candle forest island rabbit spoon letter button basket mirror ladder "
    "planet silver guitar yellow hammer jacket orange pepper castle wallet violin anchor"
).split()
RG_PRESETS = {  # reasoning-gym datasets (spell_backward, gcd and lcm had no learnable task in a first stratify)
    "chain_sum": {"min_terms": 2, "max_terms": 2, "min_digits": 1, "max_digits": 2},
    "letter_counting": {},
}
FULL_RUN = "python bench/experiments/multidomain.py --single"
"""The defaults are the acceptance run (3 seeds, 60 steps, 30 held-out items a domain); --single adds the
single-domain rows of the interference matrix."""

ARMS = {
    "ours": {"sampling": "priority", "advantage": "per_domain"},
    "uniform": {"sampling": "uniform", "advantage": "reinforce_pp_baseline"},
    # one lever at a time (--arms): which of the two moves the comparison
    "priority_global": {"sampling": "priority", "advantage": "reinforce_pp_baseline"},
    "uniform_per_domain": {"sampling": "uniform", "advantage": "per_domain"},
}


def env() -> dict:
    return {
        **os.environ,
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "PYTHONPATH": str(ROOT / "src"),
        "OMP_NUM_THREADS": "1",
    }


def temper(*args: str, log: Path | None = None) -> subprocess.Popen:
    cmd = ["nice", "-n", "10", sys.executable, "-m", "tempering.cli", *args]
    out = open(log, "w") if log else None  # noqa: SIM115 - closed with the process
    return subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, cwd=ROOT, env=env())


# -- candidate domains ------------------------------------------------------------------
def tool_tasks(n: int, seed: int) -> list:
    from tempering.types import Task

    rng = random.Random(seed)
    tools = {"get_weather": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}
    out = []
    for i in range(n):
        city = rng.choice(CITIES)
        prompt = (
            f"You can call one tool, get_weather(city). Call it for {city}. Reply with the call only, written as "
            '<tool_call>{"name": "get_weather", "arguments": {"city": "...'
            '"}}</tool_call>'
        )
        out.append(Task(id=f"tool-{seed}-{i}", prompt=prompt, verifier={"type": "tool_call", "tools": tools}))
    return out


def simple_tasks(kind: str, n: int, seed: int) -> list:
    """Short tasks a 135M model gets partly right (so they can be learnable): capitalise, echo,
    first letter, parity, the larger of two numbers, the successor of a number. The model answers
    in sentences, so some verifiers look for the answer in the reply (regex on the completion)."""
    from tempering.types import Task

    rng = random.Random(f"{kind}:{seed}")
    out = []
    for i in range(n):
        word = rng.choice(WORDS[28:] if seed else WORDS[:28])
        a, b = rng.randint(10, 999), rng.randint(10, 999)
        if kind == "caps":  # the word in capitals anywhere in the reply
            prompt = f"Write the word {word} in capital letters. Answer with just the word."
            spec = {"type": "regex", "pattern": rf"\b{word.upper()}\b", "on": "completion"}
        elif kind == "echo":
            prompt = f"Repeat exactly this word and nothing else: {word}"
            spec = {"type": "exact", "answer": word}
        elif kind == "first_letter":  # the letter, quoted, anywhere in the reply
            prompt = f"What is the first letter of the word '{word}'? Answer with just the letter."
            spec = {"type": "regex", "pattern": f"(?i)['\"]{word[0]}['\"]", "on": "completion"}
        elif kind == "parity":  # the right word and not the other one
            right, wrong = ("even", "odd") if a % 2 == 0 else ("odd", "even")
            prompt = f"Is {a} even or odd? Answer with one word: even or odd."
            spec = {"type": "regex", "pattern": rf"(?is)^(?!.*\b{wrong}\b).*\b{right}\b", "on": "completion"}
        elif kind == "compare":
            prompt = f"Which number is larger, {a} or {b}? Answer with just the number."
            spec = {"type": "numeric", "answer": str(max(a, b))}
        else:  # successor
            prompt = f"What number comes right after {a}? Answer with just the number."
            spec = {"type": "numeric", "answer": str(a + 1)}
        out.append(Task(id=f"{kind}-{seed}-{i}", prompt=prompt, verifier=spec))
    return out


def candidate_tasks(name: str, n: int, heldout: bool) -> list:
    """`n` tasks of a candidate domain; held-out ones from another seed or split."""
    from tempering.data.builtin import arithmetic_tasks
    from tempering.sources.reasoning_gym import reasoning_gym_tasks

    seed = 1 if heldout else 0
    if name in ("add", "sub", "mul"):
        op = {"add": "+", "sub": "-", "mul": "*"}[name]
        return arithmetic_tasks(n, 0, "heldout" if heldout else "train", op, None, "canonical", "hash")
    if name in RG_PRESETS:
        return reasoning_gym_tasks(
            name, n, 100 + 100_000 * seed, **RG_PRESETS[name]
        )  # seeds far apart: rg seeds each index
    if name == "tool":
        return tool_tasks(n, seed)
    return simple_tasks(name, n, seed)


SIMPLE = ["caps", "echo", "first_letter", "parity", "compare", "successor"]
CANDIDATES = ["add", "sub", "mul", "chain_sum", "letter_counting", "tool", *SIMPLE]


def write_tasks(path: Path, tasks: list) -> Path:
    path.write_text("".join(json.dumps(t.model_dump(exclude_none=True)) + "\n" for t in tasks))
    return path


def prepare(out: Path, n_train: int, n_heldout: int, n_strat: int) -> dict[str, dict]:
    files = {}
    sample = []
    for name in CANDIDATES:
        train = candidate_tasks(name, n_train, heldout=False)
        held = candidate_tasks(name, n_heldout, heldout=True)
        unique: dict[str, object] = {}  # a repeated prompt would count one greedy verdict twice in the CIs
        for t in held:
            unique.setdefault(t.prompt, t)
        held = list(unique.values())
        prompts = set(unique)
        train = [t for t in train if t.prompt not in prompts]
        files[name] = {
            "train": str(write_tasks(out / f"{name}.train.jsonl", train)),
            "heldout": str(write_tasks(out / f"{name}.heldout.jsonl", held)),
        }
        sample += [t.model_copy(update={"id": f"{name}/{t.id}"}) for t in train[:n_strat]]
    write_tasks(out / "stratify_sample.jsonl", sample)
    return files


def stratify(out: Path, k: int, max_new_tokens: int, temperature: float) -> dict[str, dict]:
    """`temper data stratify` over the candidates' sample; learnable share per candidate."""
    rates_file = out / "runs" / "stratify" / "pass_rates.jsonl"
    if not rates_file.exists():
        cfg = {
            "model": "smollm2-135m-instruct",
            "tasks": {"source": str(out / "stratify_sample.jsonl"), "n": 100_000},
            "k": k,
            "sampling": {"temperature": temperature, "max_new_tokens": max_new_tokens},
            "batch_prompts": 64,
            "out": str(out / "runs"),
            "name": "stratify",
        }
        path = out / "stratify.yaml"
        path.write_text(yaml.safe_dump(cfg))
        print("stratify: sampling every candidate ...", flush=True)
        if temper("data", "stratify", str(path), log=out / "stratify.log").wait() != 0:
            raise SystemExit(f"stratify failed; see {out / 'stratify.log'}")
    per: dict[str, dict] = {name: {"tasks": 0, "learnable": 0, "pass_rates": []} for name in CANDIDATES}
    for line in rates_file.read_text().splitlines():
        row = json.loads(line)
        d = per[row["id"].split("/", 1)[0]]
        d["tasks"] += 1
        d["learnable"] += row["bucket"] == "learnable"
        d["pass_rates"].append(row["pass_rate"])
    for d in per.values():
        judged = [p for p in d["pass_rates"] if p is not None]
        d["learnable_share"] = d["learnable"] / max(d["tasks"], 1)
        d["mean_pass_rate"] = statistics.fmean(judged) if judged else None
    return per


# -- the runs ---------------------------------------------------------------------------
def grpo_config(
    out: Path, name: str, domains: list[str], files: dict, arm: dict, args: argparse.Namespace, seed: int = 0
) -> Path:
    cfg = {
        "model": "smollm2-135m-instruct",
        "lora": {"r": 16, "alpha": 32},
        "domains": [
            {
                "name": d,
                "tasks": {"source": files[d]["train"], "n": 100_000},
                "heldout": {"source": files[d]["heldout"]},
            }
            for d in domains
        ],
        "heldout": {"max_new_tokens": args.max_new_tokens},
        "grpo": {
            "prompts_per_step": args.prompts,
            "group_size": args.group,
            "temperature": args.temperature,
            "max_new_tokens": args.max_new_tokens,
            "generation_chunks": 1,
            "max_refills": 0,
            "truncation": "penalty",
            "advantage": arm["advantage"],
        },
        "train": {
            "steps": args.steps,
            "eval_every": 10_000,  # held-out at the start and the end only
            "seed": seed,
            "max_minutes": args.max_minutes,
            "threads": 1,
            "optim": {"lr": args.lr, "schedule": "constant", "warmup_steps": 0},
            "checkpoint": {"every": 1000, "keep_last": 1},
        },
        "out": str(out / "runs"),
        "name": name,
    }
    if len(domains) > 1:
        cfg["mixture"] = {"sampling": arm["sampling"], "floor": 0.05}
    path = out / f"{name}.yaml"
    path.write_text(yaml.safe_dump(cfg, sort_keys=False))
    return path


def run_all(out: Path, jobs: list[tuple[str, Path]], parallel: int) -> None:
    """Run the GRPO configs, `parallel` at a time, printing progress."""
    pending, running = list(jobs), []
    t0 = time.time()
    while pending or running:
        while pending and len(running) < parallel:
            name, cfg = pending.pop(0)
            if (out / "runs" / name / "summary.json").exists():
                continue
            print(f"[{time.time() - t0:6.0f}s] start {name}", flush=True)
            running.append((name, temper("grpo", str(cfg), "--force", log=out / f"{name}.log")))
        time.sleep(10)
        for name, proc in list(running):
            if proc.poll() is not None:
                running.remove((name, proc))
                print(f"[{time.time() - t0:6.0f}s] {name} exit {proc.returncode}; load {os.getloadavg()[0]:.1f}")
        for name, _ in running:
            metrics = out / "runs" / name / "metrics.jsonl"
            steps = metrics.read_text().count('"reward_mean"') if metrics.exists() else 0
            print(f"[{time.time() - t0:6.0f}s]   {name}: {steps} steps", flush=True)


def item_verdicts(run_dir: Path, which: str) -> dict[str, dict[str, float]]:
    """Per domain, per held-out item: passed (0/1) at the first or last held-out evaluation."""
    steps = sorted((run_dir / "heldout").glob("step-*"))
    step = steps[0] if which == "before" else steps[-1]
    out: dict[str, dict[str, float]] = {}
    for f in step.rglob("samples.jsonl"):
        for line in f.read_text().splitlines():
            r = json.loads(line)
            if r["status"] == "scored":
                out.setdefault(r["task_id"].split("/", 1)[0], {})[r["task_id"]] = float(r["passed"])
    return out


def paired(out: Path, names: list[str], domains: list[str]) -> dict:
    """Per domain, one {item: after - before} per run of `names`."""
    diffs: dict[str, list[dict[str, float]]] = {d: [] for d in domains}
    for name in names:
        run_dir = out / "runs" / name
        add_differences(diffs, item_verdicts(run_dir, "after"), item_verdicts(run_dir, "before"))
    return diffs


def add_differences(diffs: dict[str, list[dict[str, float]]], a: dict, b: dict) -> None:
    """Append to each domain's list the item-by-item differences a - b over the items both have."""
    for d in diffs:
        items = sorted(set(a.get(d, {})) & set(b.get(d, {})))
        diffs[d].append({i: a[d][i] - b[d][i] for i in items})


def bootstrap_mean_gain(diffs: dict[str, list[dict[str, float]]]) -> tuple[float, list[float]]:
    """Mean over domains of the mean paired difference, and its 95% CI: each item's difference
    averaged over the runs first, items resampled within their domain
    (`tempering.evals.stats.stratified_paired_bootstrap`, the task-level rule of evals)."""
    from tempering.evals.stats import stratified_paired_bootstrap

    per_item: dict[str, dict[str, list[float]]] = {}
    for d, runs in diffs.items():
        for run in runs:
            for item, diff in run.items():
                per_item.setdefault(d, {}).setdefault(item, []).append(diff)
    gains = {d: list(items.values()) for d, items in per_item.items()}
    c = stratified_paired_bootstrap({d: [0.0] * len(v) for d, v in gains.items()}, gains)
    return c.delta, [c.low, c.high]


def arm_difference(out: Path, seeds: list[int], domains: list[str], arm: str = "ours") -> dict:
    """`arm` minus uniform at the end, paired by (seed, domain, item): the mean over domains with its
    bootstrap CI, and per domain."""
    diffs: dict[str, list[dict[str, float]]] = {d: [] for d in domains}
    for s in seeds:
        ours = item_verdicts(out / "runs" / f"{arm}-seed{s}", "after")
        add_differences(diffs, ours, item_verdicts(out / "runs" / f"uniform-seed{s}", "after"))
    point, ci = bootstrap_mean_gain(diffs)
    return {"mean": point, "ci95": ci, "per_domain": domain_table(diffs)}


def domain_table(diffs: dict[str, list[dict[str, float]]]) -> dict[str, dict]:
    table = {}
    for d, runs in diffs.items():
        point, ci = bootstrap_mean_gain({d: runs})
        table[d] = {
            "delta": point,
            "ci95": ci,
            "per_seed": [statistics.fmean(v.values()) if v else None for v in runs],
        }
    return table


def schedule_of(run_dir: Path, domains: list[str]) -> dict[str, list[float]]:
    steps = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines() if '"reward_mean"' in x]
    return {d: [round(s.get(f"domain/{d}/share", 0.0), 4) for s in steps] for d in domains}


class LoadSampler(threading.Thread):
    def __init__(self) -> None:
        super().__init__(daemon=True)
        self.samples: list[float] = []

    def run(self) -> None:
        while True:
            self.samples.append(os.getloadavg()[0])
            time.sleep(30)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--out", type=Path, default=ROOT / "runs" / "bench-multidomain")
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    p.add_argument("--domains", type=int, default=8, help="how many candidates the mixture takes")
    p.add_argument("--steps", type=int, default=60)
    p.add_argument("--prompts", type=int, default=8, help="prompts per step")
    p.add_argument("--group", type=int, default=4)
    p.add_argument("--max-new-tokens", type=int, default=24)
    p.add_argument("--temperature", type=float, default=0.7, help="sampling temperature of stratify and GRPO")
    p.add_argument("--lr", type=float, default=2e-4)
    p.add_argument("--train-tasks", type=int, default=60)
    p.add_argument("--heldout", type=int, default=30, help="held-out tasks per domain")
    p.add_argument("--stratify-tasks", type=int, default=16, help="tasks per candidate that stratify samples")
    p.add_argument("--k", type=int, default=8, help="stratify samples per task")
    p.add_argument("--parallel", type=int, default=2, help="GRPO runs side by side")
    p.add_argument("--max-minutes", type=float, default=35.0, help="a run's wall-clock cap (its steps are recorded)")
    p.add_argument("--single", action="store_true", help="also single-domain runs (the interference matrix)")
    p.add_argument("--arms", nargs="+", choices=list(ARMS), default=["ours", "uniform"], help="ours and uniform always")
    p.add_argument("--beside", default="nothing else ran on the host", help="what else shared the cores")
    args = p.parse_args()
    args.arms = ["ours", "uniform", *[a for a in args.arms if a not in ("ours", "uniform")]]
    args.out.mkdir(parents=True, exist_ok=True)
    sampler = LoadSampler()
    sampler.start()
    t0, load_before = time.time(), os.getloadavg()

    files = prepare(args.out, args.train_tasks, args.heldout, args.stratify_tasks)
    rates = stratify(args.out, args.k, args.max_new_tokens, args.temperature)
    ranked = sorted(CANDIDATES, key=lambda c: -rates[c]["learnable_share"])
    domains = [c for c in ranked if rates[c]["learnable"] > 0][: args.domains]
    print("stratify:", {c: round(rates[c]["learnable_share"], 2) for c in ranked}, "->", domains, flush=True)

    jobs = [
        (f"{arm}-seed{s}", grpo_config(args.out, f"{arm}-seed{s}", domains, files, ARMS[arm], args, s))
        for s in args.seeds
        for arm in args.arms
    ]
    if args.single:
        jobs += [(f"single-{d}", grpo_config(args.out, f"single-{d}", [d], files, ARMS["ours"], args)) for d in domains]
    run_all(args.out, jobs, args.parallel)

    arms = {}
    for arm in args.arms:
        names = [
            f"{arm}-seed{s}" for s in args.seeds if (args.out / "runs" / f"{arm}-seed{s}" / "summary.json").exists()
        ]
        diffs = paired(args.out, names, domains)
        point, ci = bootstrap_mean_gain(diffs)
        table = domain_table(diffs)
        arms[arm] = {
            "runs": names,
            "steps": [json.loads((args.out / "runs" / n / "summary.json").read_text())["steps"] for n in names],
            "seconds": [json.loads((args.out / "runs" / n / "summary.json").read_text())["seconds"] for n in names],
            "mean_gain": point,
            "mean_gain_ci95": ci,
            "per_domain": table,
            "worst_domain": min(table, key=lambda d: table[d]["delta"]),
            "worst_domain_delta": min(t["delta"] for t in table.values()),
            "significant_regressions": [d for d, t in table.items() if t["ci95"][1] < 0],
            "schedule_seed0": schedule_of(args.out / "runs" / names[0], domains) if names else {},
            "mean_share": {
                d: statistics.fmean(statistics.fmean(schedule_of(args.out / "runs" / n, domains)[d]) for n in names)
                for d in domains
            }
            if names
            else {},
        }
    differences = {}
    for arm in args.arms:
        done = [
            s
            for s in args.seeds
            if f"{arm}-seed{s}" in arms[arm]["runs"] and f"uniform-seed{s}" in arms["uniform"]["runs"]
        ]
        if arm != "uniform" and done:
            differences[arm] = arm_difference(args.out, done, domains, arm)
    previous = (
        json.loads((RESULTS / "multidomain.json").read_text()) if (RESULTS / "multidomain.json").is_file() else {}
    )
    invocations = previous.get("invocations", []) if previous.get("settings", {}).get("out") == str(args.out) else []
    matrix = {}
    if args.single:
        for row in [f"ours-seed{args.seeds[0]}", *[f"single-{d}" for d in domains]]:
            if (args.out / "runs" / row / "summary.json").exists():
                t = domain_table(paired(args.out, [row], domains))
                matrix[row] = {d: t[d]["delta"] for d in domains}
    result = {
        "domains": domains,
        "mean_gain_ci_low": arms["ours"]["mean_gain_ci95"][0],
        "worst_domain_delta": arms["ours"]["worst_domain_delta"],
        "worst_domain_delta_uniform": arms["uniform"]["worst_domain_delta"],
        "mean_gain": arms["ours"]["mean_gain"],
        "mean_gain_uniform": arms["uniform"]["mean_gain"],
        "arms": arms,
        "ours_minus_uniform": differences.get("ours"),
        "minus_uniform": differences,
        "interference_matrix": matrix or None,
        "stratify": {c: {k: v for k, v in r.items() if k != "pass_rates"} for c, r in rates.items()},
        "settings": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()},
        "model": "smollm2-135m-instruct",
        "full_run_command": FULL_RUN,
        "load_average": {"before": load_before, "during": sampler.samples, "after": os.getloadavg()},
        "beside": args.beside,
        "wall_s": time.time() - t0,
    }
    result["invocations"] = [  # a rerun on the same --out trains only the runs not yet finished
        *invocations,
        {"arms": args.arms, "wall_s": result["wall_s"], "load_average": result["load_average"], "beside": args.beside},
    ]
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "multidomain.json").write_text(json.dumps(result, indent=1))
    print(json.dumps({k: result[k] for k in ("domains", "mean_gain", "mean_gain_ci_low", "worst_domain_delta")}))
    print(f"uniform: mean gain {result['mean_gain_uniform']:.3f}, worst {result['worst_domain_delta_uniform']:.3f}")


if __name__ == "__main__":
    main()
