"""The fault battery: a short GRPO run per case, one fault injected into one worker kind at a
random call, and what became of the run (docs/scale.md, No silent hangs).

    python bench/diagnostics/fault_battery.py [--seed 0] [--cases engine:hang,ray_reward:kill]

Each case runs `temper grpo` in its own process on a tiny random Llama (fp32), with
`TEMPERING_FAULTS=<point>:<kind>:<when>` (tempering/faults.py), `when` drawn at random from the
calls the unfaulted run made at that point. The run's setup is the worker's: Ray replicas and
reward actors (`scale:`), the trainer's reward threads, or asynchronous GRPO on the local engine
process (`sampler:`, `max_off_policy_steps: 1`: deterministic, the orchestrator pins the weights
each batch samples from). The sandbox is the exception: no completion of a
random model parses as Python, so a GRPO run never reaches it; its cases run `SANDBOX_RUNS`
programs through a `SandboxPool` in their own process, the fault at a random one of them.
Outcomes:

- `recovered`: the run ended well with the unfaulted run's completions and rewards, in order;
- `stopped`: the run ended with exit 2 and one `error:` line naming the component and the step;
- `named`: the run ended well, its results differ, and the run records why: the faulted sample
  carries the `verifier_error` flag (a timeout), its group is dropped and counted in the step's
  `verifier_failed_groups` (never a model failure; the samples after it differ, since the
  dropped group is refilled);
- for the sandbox, `named`: the faulted run came back within its wall limit with a status that
  says what happened (`timeout`, `sandbox_error`: the code verifier's `verifier_error`) and every
  other program's output was right; `recovered`: every output was right;
- `not_fired`: the fault's call never came (counted apart; the battery draws `when` so it does);
- `silent`: anything else (a run past its bound is killed and counted here).

Writes `bench/results/faults.json`: per case the outcome, `fault_to_end_s` (from the fault
firing to the run's end), the stop line; `faults_cases` and `faults_silent` (must be 0).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT), str(ROOT / "src")]

from bench._shared.paths import RESULTS  # noqa: E402

from tempering import faults  # noqa: E402

COMPONENTS = {  # fault point -> the name its stop line carries, and the run setup it needs
    "engine": ("engine replica", "ray"),
    "engine_process": ("engine process", "process"),
    "ray_reward": ("reward", "ray"),
    "reward_thread": ("reward worker thread", "threads"),
    "sandbox": ("sandbox", None),
}
STEPS = {"ray": 2, "threads": 3, "process": 3}
CASES = [f"{p}:{k}" for p in COMPONENTS for k in faults.KINDS if (p, k) != ("reward_thread", "kill")]
SANDBOX_RUNS, SANDBOX_WALL_S = 6, 5.0
SANDBOX_SCRIPT = f"""
import json, sys
from tempering.sandbox import SandboxPool
from tempering.sandbox.base import Limits
with SandboxPool(size=1) as pool:
    pool.check()  # the self-check's probes run first: the battery's `when` counts past them
    print(json.dumps([(r.status, r.stdout) for r in (
        pool.exec(code=f"print({{k}} * 7)", limits=Limits(wall_s={SANDBOX_WALL_S})) for k in range(int(sys.argv[1]))
    )]))
"""
DEADLINES = {"engine_deadline_s": 10.0, "reward_deadline_s": 5.0}
SAMPLER_CALL_TIMEOUT_S = 10.0  # the engine process's call deadline (`sampler.call_timeout_s`)
GRACE_S, VERIFIER_TIMEOUT_S = 20.0, 30.0
BOUND_S = 600.0  # a case still running after this is a silent hang (killed)


def grpo_config(folder: Path, model: Path, setup: str, steps: int) -> Path:
    """A 2-3 step GRPO config on the tiny model. `setup`: "ray" (engine and rewards as actors),
    "threads" (in-process engine, reward threads with a short grace), "process" (asynchronous,
    K = 1, on the local engine process)."""
    ray = setup == "ray"
    import yaml

    cfg: dict[str, Any] = {
        "model": str(model),
        "lora": None,
        "heldout": None,
        "tasks": {"source": "builtin:arithmetic", "ops": "+", "n": 16},
        "reward": [
            {"name": "correct", "weight": 1.0, "verifier": {"type": "numeric"}},
            {"name": "caps", "weight": 0.5, "verifier": {"type": "regex", "pattern": "[A-Z]{2}", "on": "completion"}},
        ],
        "grpo": {
            "prompts_per_step": 4,
            "group_size": 4,
            "max_new_tokens": 8,
            "generation_chunks": 2,
            "dynamic_sampling": False,
            "truncation": "keep",
            "reward_workers": 2,
            "verifier_timeout_s": 5.0 if setup == "threads" else VERIFIER_TIMEOUT_S,
            # the thread pool: a stuck call stops the run at the first submit after its verdict timed out
            "hang_grace_s": 0.01 if setup == "threads" else GRACE_S,
        },
        "train": {"steps": steps, "precision": "fp32", "threads": 1, "optim": {"lr": 1e-3}},
        "out": str(folder / "runs"),
    }
    if ray:
        cfg["scale"] = {"reward_workers": 2, "engine_replicas": 1, "num_cpus": 2, **DEADLINES}
    if setup == "process":
        cfg["sampler"] = {"threads": 1, "call_timeout_s": SAMPLER_CALL_TIMEOUT_S}
        cfg["grpo"]["max_off_policy_steps"] = 1
    path = folder / f"grpo_{setup}.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


def run(cfg: Path, name: str, spec: str, fault_dir: Path) -> dict[str, Any]:
    """One `temper grpo` process under the fault `spec` ('' counts calls only)."""
    fault_dir.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "PYTHONPATH": f"{ROOT / 'src'}:{ROOT}", faults.DIR_ENV: str(fault_dir)}
    env[faults.ENV] = spec
    cmd = [sys.executable, "-m", "tempering.cli", "grpo", str(cfg), "--name", name]
    t0 = time.time()
    try:
        p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=BOUND_S)
        rc, err = p.returncode, p.stderr
    except subprocess.TimeoutExpired as e:
        rc, err = None, (e.stderr or b"").decode() if isinstance(e.stderr, bytes) else (e.stderr or "")
    return {"rc": rc, "stderr": err, "start": t0, "end": time.time(), "run_dir": cfg.parent / "runs" / name}


def samples(run_dir: Path) -> list[tuple]:
    """The run's completions and rewards in order: those trained, then (asynchronous runs) those
    its last checkpoint records as sampled ahead, so a fault in a batch never trained is compared too."""
    from tempering.rollout.store import read_trajectories

    trained = [(r["task_id"], r["completion"], r["reward"]) for r in read_trajectories(run_dir)]
    last = max((run_dir / "checkpoints").glob("step-*"), default=None)
    state = json.loads((last / "state.json").read_text()) if last is not None else {}
    ahead = [
        (t["task_id"], t["messages"][-1]["content"], t["rewards"])
        for batch in state.get("data", {}).get("ahead", [])
        for group in batch["seen"]
        for t in group["trajectories"]
    ]
    return trained + ahead


def unjudged(run_dir: Path) -> str:
    """What the run recorded of samples it could not judge ('' if none): the `verifier_error`
    flag on the sample and the dropped group counted in the step's `verifier_failed_groups`."""
    from tempering.rollout.store import read_trajectories

    flagged = [r for r in read_trajectories(run_dir) if "verifier_error" in r["flags"]]
    records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    dropped = sum(r.get("verifier_failed_groups", 0) for r in records)
    if not flagged or not dropped:
        return ""
    return f"{len(flagged)} sample(s) flagged verifier_error, {dropped} group(s) dropped (verifier_failed_groups)"


def judge_case(case: str, got: dict[str, Any], baseline: list[tuple], fault_dir: Path) -> dict[str, Any]:
    point = case.split(":")[0]
    fired = faults.fired(fault_dir, point)
    lines = [ln for ln in got["stderr"].splitlines() if ln.startswith("error:")]
    who = COMPONENTS[point][0]
    out: dict[str, Any] = {"fired": fired is not None, "rc": got["rc"]}
    out["fault_to_end_s"] = None if fired is None else round(got["end"] - fired, 1)
    if fired is None:
        out.update(outcome="not_fired")
    elif got["rc"] == 2 and len(lines) == 1 and who in lines[0] and re.search(r" (stuck|died) at step \d", lines[0]):
        out.update(outcome="stopped", line=lines[0])
    elif got["rc"] == 0 and samples(got["run_dir"]) == baseline:
        out.update(outcome="recovered")
    elif got["rc"] == 0 and (why := unjudged(got["run_dir"])):
        out.update(outcome="named", line=why)
    else:
        out.update(outcome="silent", stderr_tail=got["stderr"][-2000:])
    return out


def sandbox_case(kind: str, when: int, fault_dir: Path) -> dict[str, Any]:
    """`SANDBOX_RUNS` sandboxed programs with the fault at the `when`-th (counted after the probes)."""
    fault_dir.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src"), faults.DIR_ENV: str(fault_dir), faults.ENV: ""}
    probes = subprocess.run([sys.executable, "-c", SANDBOX_SCRIPT, "0"], env=env, capture_output=True)
    if probes.returncode != 0:
        raise RuntimeError("the sandbox is unavailable here")
    env[faults.ENV] = f"sandbox:{kind}:{faults.calls(fault_dir, 'sandbox') + when}"
    (fault_dir / "sandbox.count").unlink()
    cmd = [sys.executable, "-c", SANDBOX_SCRIPT, str(SANDBOX_RUNS)]
    p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=BOUND_S)
    end, fired = time.time(), faults.fired(fault_dir, "sandbox")
    results = json.loads(p.stdout.splitlines()[-1]) if p.returncode == 0 else []
    right = [out == f"{k * 7}\n" and status == "ok" for k, (status, out) in enumerate(results)]
    bad = [k for k, ok in enumerate(right) if not ok]
    out: dict[str, Any] = {"when": when, "fired": fired is not None, "rc": p.returncode}
    out["fault_to_end_s"] = None if fired is None else round(end - fired, 1)
    if fired is None:
        out.update(outcome="not_fired")
    elif len(results) == SANDBOX_RUNS and not bad:
        out.update(outcome="recovered")
    elif len(results) == SANDBOX_RUNS and bad == [when - 1] and results[when - 1][0] in ("timeout", "sandbox_error"):
        out.update(outcome="named", line=f"run {when}: status {results[when - 1][0]}, the others right")
    else:
        out.update(outcome="silent", stderr_tail=p.stderr[-2000:])
    return out


def battery(cases: list[str], seed: int, folder: Path) -> dict[str, Any]:
    from bench._shared.model_shapes import build_random_model

    model = build_random_model("tiny", folder / "tiny")
    load_at_start = os.getloadavg()[0]
    rng = random.Random(seed)
    configs: dict[str, Path] = {}
    baselines: dict[str, tuple[list[tuple], Path]] = {}
    table: dict[str, Any] = {}
    for case in cases:
        point, kind, *fixed = case.split(":")  # `point:kind:when` fixes the call (the test's cases)
        if point == "sandbox":
            when = int(fixed[0]) if fixed else rng.randint(1, SANDBOX_RUNS)
            table[case] = sandbox_case(kind, when, folder / f"faults-{point}-{kind}")
            print(case, table[case]["outcome"], table[case].get("fault_to_end_s"), flush=True)
            continue
        setup = COMPONENTS[point][1]
        assert setup is not None
        if setup not in baselines:
            configs[setup] = grpo_config(folder, model, setup, STEPS[setup])
            base_dir = folder / f"faults-base-{setup}"
            got = run(configs[setup], f"base-{setup}", "", base_dir)
            if got["rc"] != 0:
                raise RuntimeError(f"the unfaulted run failed:\n{got['stderr'][-3000:]}")
            baselines[setup] = (samples(got["run_dir"]), base_dir)
        base, base_dir = baselines[setup]
        when = int(fixed[0]) if fixed else rng.randint(1, max(1, faults.calls(base_dir, point)))
        fault_dir = folder / f"faults-{point}-{kind}"
        got = run(configs[setup], f"{point}-{kind}", f"{point}:{kind}:{when}", fault_dir)
        table[case] = {"when": when, **judge_case(case, got, base, fault_dir)}
        print(case, table[case]["outcome"], table[case].get("fault_to_end_s"), flush=True)
    return {
        "faults_cases": len(table),
        "faults_silent": sum(c["outcome"] == "silent" for c in table.values()),
        "faults_not_fired": sum(c["outcome"] == "not_fired" for c in table.values()),
        "components": sorted({c.split(":")[0] for c in table}),
        "deadlines": {
            **DEADLINES,
            "sampler_call_timeout_s": SAMPLER_CALL_TIMEOUT_S,
            "hang_grace_s": GRACE_S,
            "verifier_timeout_s": VERIFIER_TIMEOUT_S,
        },
        # the host is shared: its 1-minute load average when the battery started and ended
        "load_average": {"start": round(load_at_start, 2), "end": round(os.getloadavg()[0], 2)},
        "cases": table,
        "seed": seed,
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--cases", default=",".join(CASES), help="comma-separated point:kind[:when]")
    p.add_argument("--out", default=str(RESULTS / "faults.json"))
    args = p.parse_args()
    with tempfile.TemporaryDirectory(prefix="faults-") as tmp:
        result = battery(args.cases.split(","), args.seed, Path(tmp))
    Path(args.out).write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps({k: result[k] for k in ("faults_cases", "faults_silent")}))


if __name__ == "__main__":
    main()
