"""Scale-out figures on this machine: Ray reward workers, torchrun data parallelism, log-prob mismatch.

    python bench/throughput/scale.py --part verifier   # HumanEval canonical solutions: 1 vs 2 Ray reward workers
    python bench/throughput/scale.py --part ddp        # temper sft tokens/s: 1 process (2 threads) vs torchrun 2 x 1 thread
    python bench/throughput/scale.py --part mismatch   # GRPO on the default model: mean |log p_train - log p_rollout|

Each part merges its figures into bench/results/scale.json (run each under the bench lock;
each stays under 6 minutes). On a 2-core machine the gains are bounded by the 2 cores: the
figures are per-process rates to extrapolate from (docs/scale.md), not a cluster's.
The load average is recorded; other agents' work ran at nice 19 alongside.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # bench/, for _shared
from _shared.paths import RESULTS, ROOT  # noqa: E402

OUT = RESULTS / "scale.json"
MODEL = "smollm2-135m-instruct"


def env() -> dict:
    return {**os.environ, "PYTHONPATH": str(ROOT / "src") + os.pathsep + os.environ.get("PYTHONPATH", "")}


def bench_verifier(n_tasks: int) -> dict:
    """Verdicts/s of the code verifier (sandboxed) through 1 and 2 Ray reward actors, 2 slots each."""
    from tempering.config import ScaleSettings
    from tempering.scale.reward_workers import RayRewardWorkers
    from tempering.scale.runtime import ray_session
    from tempering.sources.humaneval import humaneval_canonical, humaneval_tasks

    jobs = [(t, humaneval_canonical(t.id)) for t in humaneval_tasks()[:n_tasks]]
    out = {"tasks": n_tasks, "sandbox_slots_per_worker": 2, "verifier": "code (HumanEval canonical solutions)"}
    with ray_session(ScaleSettings(num_cpus=2)):
        for n in (1, 2):
            workers = RayRewardWorkers(n, sandbox_slots=2, cpus=0.5)
            try:
                for f in [workers.submit(t, c) for t, c in jobs[: 2 * n]]:  # warm: each pool's self-check
                    f.result()
                t0 = time.perf_counter()
                verdicts = [f.result() for f in [workers.submit(t, c) for t, c in jobs]]
                wall = time.perf_counter() - t0
            finally:
                workers.close()
            passed = sum(v.reward.value == 1.0 for v in verdicts)
            out[f"workers_{n}"] = {
                "wall_s": round(wall, 2),
                "verdicts_per_s": round(len(jobs) / wall, 2),
                "passed": passed,
                "statuses": sorted({v.status for v in verdicts}),
            }
    out["speedup_2_vs_1"] = round(out["workers_2"]["verdicts_per_s"] / out["workers_1"]["verdicts_per_s"], 2)
    return out


def _sft_config(tmp: Path, steps: int, threads: int) -> Path:
    import yaml

    from tempering.data.builtin import arithmetic_conversations

    train = tmp / "train.jsonl"
    train.write_text("".join(json.dumps(r) + "\n" for r in arithmetic_conversations(512, 1)))
    cfg = {
        "model": MODEL,
        "lora": None,
        "data": {"train": str(train), "max_length": 256},
        "train": {
            "steps": steps,
            "batch_size": 16,
            "precision": "auto",
            "threads": threads,
            "optim": {"lr": 1e-5},
            "checkpoint": {"every": 1000, "keep_last": 1},
        },
        "out": str(tmp / "runs"),
    }
    path = tmp / f"sft-{threads}.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


def _tokens_per_s(run_dir: Path, warmup: int) -> dict:
    records = [r for r in map(json.loads, (run_dir / "metrics.jsonl").read_text().splitlines()) if "event" not in r]
    timed = [r for r in records if r["step"] > warmup]
    tokens, seconds = sum(r["real_tokens"] for r in timed), sum(r["step_s"] for r in timed)
    return {
        "timed_steps": len(timed),
        "real_tokens": tokens,
        "seconds": round(seconds, 2),
        "real_tokens_per_s": round(tokens / seconds, 1),
        "losses": [round(r["loss"], 5) for r in records],
    }


def bench_ddp(steps: int, warmup: int) -> dict:
    """`temper sft` on the default model (full parameters): 1 process x 2 threads vs torchrun 2 x 1 thread."""
    from tempering.models.precision import resolve_precision

    out = {
        "model": f"{MODEL} (full params)",
        "global_batch": 16,
        "max_length": 256,
        "warmup_steps": warmup,
        "precision": resolve_precision("auto"),
        "gradient_sync": "bucketed all-reduce (gloo) after accumulation",
    }
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        for procs, threads in ((1, 2), (2, 1)):
            cfg = _sft_config(tmp, steps, threads)
            launcher = (
                [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", str(procs)]
                if procs > 1
                else [sys.executable]
            )
            name = f"p{procs}"
            t0 = time.perf_counter()
            res = subprocess.run(
                launcher + ["-m", "tempering.cli", "sft", str(cfg), "--name", name],
                env=env(),
                capture_output=True,
                text=True,
            )
            if res.returncode:
                raise SystemExit(f"sft with {procs} process(es) failed:\n{res.stderr[-3000:]}")
            out[f"processes_{procs}"] = {
                "threads_per_process": threads,
                "wall_s": round(time.perf_counter() - t0, 1),
                **_tokens_per_s(tmp / "runs" / name, warmup),
            }
    one, two = out["processes_1"], out["processes_2"]
    out["speedup_2_vs_1"] = round(two["real_tokens_per_s"] / one["real_tokens_per_s"], 2)
    out["max_loss_diff_1_vs_2"] = max(abs(a - b) for a, b in zip(one["losses"], two["losses"]))
    return out


def _grpo_config(tmp: Path, precision: str, scale: dict | None, name: str) -> Path:
    import yaml

    cfg = {
        "model": MODEL,
        "lora": {"r": 8, "alpha": 16},
        "heldout": None,
        "name": name,
        "tasks": {"source": "builtin:arithmetic", "ops": "+", "n": 64},
        "grpo": {
            "prompts_per_step": 4,
            "group_size": 4,
            "max_new_tokens": 24,
            "dynamic_sampling": False,
            "generation_chunks": 1,
        },
        "train": {"steps": 2, "precision": precision, "optim": {"lr": 1e-5}},
        "out": str(tmp / "runs"),
    }
    if scale:
        cfg["scale"] = scale
    path = tmp / f"{name}.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


def bench_mismatch(paths: list[str]) -> dict:
    """logprob_mismatch per GRPO step: in-process HF engine (fp32 and auto precision) and a Ray replica."""
    from tempering.models.precision import resolve_precision

    out = {
        "model": f"{MODEL} (LoRA r=8)",
        "metric": "mean over sampled tokens of |log p_train - log p_rollout|",
        "steps": 2,
        "samples_per_step": 16,
    }
    settings = {
        "hf_fp32": ("fp32", None),
        "hf_auto": ("auto", None),
        "ray_replica_fp32": ("fp32", {"reward_workers": 1, "engine_replicas": 1, "num_cpus": 2}),
    }
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        for key in paths:
            precision, scale = settings[key]
            cfg = _grpo_config(tmp, precision, scale, key)
            t0 = time.perf_counter()
            res = subprocess.run(
                [sys.executable, "-m", "tempering.cli", "grpo", str(cfg)], env=env(), capture_output=True, text=True
            )
            if res.returncode:
                raise SystemExit(f"grpo {key} failed:\n{res.stderr[-3000:]}")
            lines = (tmp / "runs" / key / "metrics.jsonl").read_text().splitlines()
            steps = [r for r in map(json.loads, lines) if "logprob_mismatch" in r]
            out[key] = {
                "precision": resolve_precision(precision),
                "wall_s": round(time.perf_counter() - t0, 1),
                "logprob_mismatch": [r["logprob_mismatch"] for r in steps],
                "sync_s": [round(r["sync_s"], 3) for r in steps if "sync_s" in r],
                "sync_mb": [round(r["sync_mb"], 2) for r in steps if "sync_mb" in r],
            }
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--part", choices=["verifier", "ddp", "mismatch", "mismatch-ray"], required=True)
    ap.add_argument("--tasks", type=int, default=40)
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--warmup", type=int, default=2)
    args = ap.parse_args()
    t0 = time.perf_counter()
    if args.part == "verifier":
        result = bench_verifier(args.tasks)
    elif args.part == "ddp":
        result = bench_ddp(args.steps, args.warmup)
    else:
        keys = ["ray_replica_fp32"] if args.part == "mismatch-ray" else ["hf_fp32", "hf_auto"]
        result = bench_mismatch(keys)
    result.update(
        seconds=round(time.perf_counter() - t0, 1),
        date=time.strftime("%Y-%m-%d %H:%M:%S"),
        load_avg=os.getloadavg(),
        cpus=os.cpu_count(),
        machine=platform.machine(),
        note="run under the bench lock at normal nice; other agents' work ran at nice 19 alongside",
    )
    data = json.loads(OUT.read_text()) if OUT.is_file() else {"benchmark": "scale"}
    data.setdefault("mismatch", {}).update(result) if args.part.startswith("mismatch") else data.update(
        {args.part: result}
    )
    OUT.write_text(json.dumps(data, indent=1) + "\n")
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
