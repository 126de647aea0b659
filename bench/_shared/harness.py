"""The benchmark harness: the host, interleaved rounds, a ratio with its interval, one result file.

A headline ratio is held to the standard of our own evals: several rounds a side, interleaved so
that drift in the machine's load hits both sides alike, the per-round figures kept, and a 95%
interval from `tempering.evals.stats` (resampling rounds, or seeds). A bench script

    sides = {"tempering": lambda: run_side("tempering"), "trl": lambda: run_side("trl")}
    rounds = interleave(sides, rounds=5, warmup=1)            # A B A B ... (warm-up rounds kept, marked)
    write_result(path, benchmark="sft", host=host(precision, threads), rounds=rounds,
                 candidate="tempering", baseline="trl", metric="real_tokens_per_s")

and a time-to-reward bench, per seed one run a side (the side that goes first alternates):

    rounds = paired_seeds(lambda side, seed: {"seconds_to_0_5": run(side, seed)}, ["ours", "trl"], seeds=range(5))
    write_result(path, ..., candidate="ours", baseline="trl", metric="seconds_to_0_5", higher_is_better=False)

(a seed whose run never reached the threshold returns None: its pair is dropped and counted; seeds
run side by side in parallel processes are turned into the same records by `record`; fewer than
`MIN_ROUNDS` seeds is not a headline unless the caller passes `min_rounds=`, which the file records).

`ratio` is candidate over baseline where higher is better (tokens/s) and baseline over candidate
where lower is better (seconds), so above 1 always means the candidate is faster. A round's side
may run in a fresh process: `call_in_subprocess(file, function, kwargs)` returns its JSON.

Load: every round records the 1-minute load average before and after it. A result whose highest
reading exceeds `max_load` (default: the bench's own threads + 1, the load a quiet host shows with
the bench running) is still written, with the figures, but marked `headline: false` and the reason
in `headline_refused`; so is one with fewer than `MIN_ROUNDS` timed rounds a side. The README's
table (`tools/readme_figures.py`) and `tests/test_bench_results.py` refuse such a file as a headline.
"""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from importlib import metadata
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

MIN_ROUNDS = 5
"""Timed rounds a side (or seeds) below which a result is not a headline."""
HOST_FLAG_PREFIXES = ("avx2", "avx512", "amx", "avx_vnni", "avx_ne_convert")
"""The CPU flags a result records: the vector and matrix extensions our precision paths ask about."""


# ---------------------------------------------------------------------------------------------- host


def host_kind(flags: Sequence[str]) -> str:
    """The host as the README's table names it: AMX, AVX512-BF16, AVX512, AVX2 (else "other")."""
    present = set(flags)
    for flag, kind in (("amx_bf16", "AMX"), ("avx512_bf16", "AVX512-BF16"), ("avx512f", "AVX512"), ("avx2", "AVX2")):
        if flag in present:
            return kind
    return "other"


def parse_cpuinfo(text: str) -> tuple[str, list[str]]:
    """The first processor's "model name" and its flags that `HOST_FLAG_PREFIXES` names, sorted."""
    model, flags = "unknown", []
    for line in text.splitlines():
        key, _, value = line.partition(":")
        if key.strip() == "model name" and model == "unknown":
            model = value.strip()
        elif key.strip() == "flags" and not flags:
            flags = sorted(f for f in value.split() if f.startswith(HOST_FLAG_PREFIXES))
    return model, flags


def host(precision: str | None = None, threads: int | None = None, *, cpuinfo: str | None = None) -> dict:
    """What a result was measured on: CPU model and flags, host kind, cores, versions, precision, threads.

    Args:
        precision: the precision the sides ran ("bf16", "fp32").
        threads: torch threads a side ran (default: torch's current count).
        cpuinfo: /proc/cpuinfo's text (read when None; tests pass a fake).
    Under `TEMPERING_CPU_FEATURES` the flags are narrowed as the product narrows them, so an AMX
    host run as an AVX2 one is recorded as AVX2 (`cpu_features_mask` says so).
    """
    from tempering.models.cpu_features import MASK_ENV, parse_mask

    if cpuinfo is None:
        cpuinfo = Path("/proc/cpuinfo").read_text() if Path("/proc/cpuinfo").exists() else ""
    model, flags = parse_cpuinfo(cpuinfo)
    mask = os.environ.get(MASK_ENV) or None
    if mask:
        allowed = parse_mask(mask)
        flags = [f for f in flags if f in allowed]
    if threads is None:
        import torch

        threads = torch.get_num_threads()
    return {
        "cpu_model": model if model != "unknown" else (platform.processor() or platform.machine()),
        "cpu_flags": flags,
        "host_kind": host_kind(flags),
        "cpu_features_mask": mask,
        "cores": len(os.sched_getaffinity(0)),
        "torch": _version("torch"),
        "transformers": _version("transformers"),
        "precision": precision,
        "threads": threads,
    }


def _version(package: str) -> str | None:
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return None


# -------------------------------------------------------------------------------------------- rounds


def add_round_arguments(parser: Any, *, rounds: int = MIN_ROUNDS, warmup: int = 1) -> None:
    """The flags every harnessed bench takes: `--rounds`, `--warmup-rounds`, `--max-load`."""
    parser.add_argument(
        "--rounds", type=int, default=rounds, help=f"timed rounds a side (a headline needs {MIN_ROUNDS})"
    )
    parser.add_argument("--warmup-rounds", type=int, default=warmup, help="rounds run first and not counted")
    parser.add_argument(
        "--max-load", type=float, default=None, help="highest 1-minute load average of a headline (default threads + 1)"
    )


def record(side: str, round: int, result: dict, load_before: float, load_after: float, **fields: Any) -> dict:
    """One run as `rounds` holds it. `interleave` and `paired_seeds` write these; a bench that runs
    its seeds side by side (processes in parallel) builds them itself, `round` = the seed's index
    and `seed=` among `fields`, then calls `ratio` / `write_result` as any other."""
    fields.setdefault("warmup", False)
    return {
        "round": round,
        "side": side,
        **fields,
        "load_before": load_before,
        "load_after": load_after,
        "result": result,
    }


def _timed_round(run: Callable[[], dict], load: Callable[[], float], side: str, round: int, **fields: Any) -> dict:
    """One side's run with the load average before and after it."""
    before = load()
    result = run()
    return record(side, round, result, before, load(), **fields)


def _one_minute_load() -> float:
    return os.getloadavg()[0]


def interleave(
    sides: Mapping[str, Callable[[], dict]],
    *,
    rounds: int = MIN_ROUNDS,
    warmup: int = 1,
    order: str = "ABAB",
    load: Callable[[], float] = _one_minute_load,
) -> list[dict]:
    """Run every side once per round, `warmup` rounds first (kept, `warmup: true`, never counted).

    `order` "ABAB": each round runs the sides in the order given; "ABBA": every other round reverses
    it, so a side is not always the one that runs just after another. Returns one record per run:
    `round`, `side`, `warmup`, `load_before`, `load_after`, `result` (the side's dict).
    """
    if order not in ("ABAB", "ABBA"):
        raise ValueError(f"order must be ABAB or ABBA, got {order!r}")
    names = list(sides)
    records = []
    for i in range(warmup + rounds):
        ordered = names[::-1] if order == "ABBA" and i % 2 else names
        for name in ordered:
            print(f"round {i - warmup if i >= warmup else 'warm-up'}: {name}", flush=True)
            records.append(_timed_round(sides[name], load, round=i - warmup, side=name, warmup=i < warmup))
    return records


def paired_seeds(
    run: Callable[[str, int], dict],
    sides: Sequence[str],
    seeds: Sequence[int],
    *,
    load: Callable[[], float] = _one_minute_load,
) -> list[dict]:
    """Per seed, run every side once (`run(side, seed)`), the first side alternating between seeds.

    The records are `interleave`'s with `seed` added and `round` = the seed's index: `ratio` pairs a
    side's value with the other side's of the same seed (a time-to-reward bench's pairs).
    """
    records = []
    for i, seed in enumerate(seeds):
        ordered = list(sides)[::-1] if i % 2 else list(sides)
        for side in ordered:
            print(f"seed {seed}: {side}", flush=True)
            records.append(
                _timed_round(
                    lambda side=side, seed=seed: run(side, seed), load, round=i, seed=seed, side=side, warmup=False
                )
            )
    return records


def side_values(records: Sequence[dict], side: str, metric: str) -> dict[int, float | None]:
    """A side's `metric` per timed round (warm-up rounds left out); None where the run gave none."""
    return {r["round"]: r["result"].get(metric) for r in records if r["side"] == side and not r["warmup"]}


def side_summary(records: Sequence[dict], side: str, metric: str) -> dict:
    """A side's figures for the result's `runs`: its first timed run's fields, `metric` replaced by
    the median over its timed rounds and the per-round values as `{metric}_rounds`. Where no
    round gave `metric`, the first timed run as it came (its failure)."""
    from statistics import median

    timed = [r["result"] for r in records if r["side"] == side and not r["warmup"]]
    ran = [t for t in timed if t.get(metric) is not None]
    if not ran:
        return timed[0] if timed else {"failed": "no timed round"}
    values = [t[metric] for t in ran]
    return {**ran[0], metric: median(values), f"{metric}_rounds": values}


# ---------------------------------------------------------------------------------------------- ratio


def ratio(
    records: Sequence[dict],
    candidate: str,
    baseline: str,
    metric: str,
    *,
    higher_is_better: bool = True,
    level: float = 0.95,
    seed: int = 0,
) -> dict:
    """The candidate's speed over the baseline's, paired by round: the median of the per-round
    ratios and a percentile bootstrap interval of that median (`evals.stats.bootstrap_statistic`,
    resampling rounds, seeded). Rounds where either side has no value (a seed that never reached
    its threshold) are left out and counted in `dropped_rounds`.

    Raises:
        ValueError: when no round has a value on both sides.
    """
    import numpy as np

    from tempering.evals.stats import bootstrap_statistic

    a, b = side_values(records, candidate, metric), side_values(records, baseline, metric)
    paired = [(a[k], b[k]) for k in sorted(a) if k in b and a[k] is not None and b[k] is not None]
    if not paired:
        raise ValueError(f"no round has {metric!r} for both {candidate!r} and {baseline!r}")
    cand, base = (np.array(col, dtype=float) for col in zip(*paired))
    per_round = cand / base if higher_is_better else base / cand
    est = bootstrap_statistic(np.median, per_round, level=level, resamples=4000, seed=seed)
    return {
        "metric": metric,
        "candidate": candidate,
        "baseline": baseline,
        "higher_is_better": higher_is_better,
        "ratio_median": est.mean,
        "ratio_ci": [est.low, est.high],
        "ratio_level": level,
        "ratio_per_round": [float(v) for v in per_round],
        "paired_rounds": len(paired),
        "dropped_rounds": len(set(a) | set(b)) - len(paired),
        "parity": bool(est.low <= 1.0 <= est.high),
    }


def headline_refusal(records: Sequence[dict], max_load: float, min_rounds: int = MIN_ROUNDS) -> str | None:
    """Why these rounds cannot back a headline (None: they can): the load went above `max_load`,
    a side has fewer than `min_rounds` timed rounds, or both ("; "-joined)."""
    reasons = []
    highest = max(max(r["load_before"], r["load_after"]) for r in records)
    if highest > max_load:
        reasons.append(f"load average reached {highest:.2f} > max_load {max_load:.2f}")
    counts: dict[str, int] = {}
    for r in records:
        counts[r["side"]] = counts.get(r["side"], 0) + (not r["warmup"])
    if min(counts.values()) < min_rounds:
        reasons.append(f"{min(counts.values())} timed rounds a side < {min_rounds}")
    return "; ".join(reasons) or None


def write_result(
    path: Path | None,
    *,
    benchmark: str,
    host: dict,
    rounds: Sequence[dict],
    candidate: str,
    baseline: str,
    metric: str,
    higher_is_better: bool = True,
    max_load: float | None = None,
    min_rounds: int = MIN_ROUNDS,
    extra: Mapping[str, Any] | None = None,
) -> dict:
    """The result file: `extra` (the bench's own fields) then `host`, `rounds`, `ratio_median`,
    `ratio_ci`, `parity`, `headline` / `headline_refused`. Writes `path` (None: only returns it).

    `max_load` defaults to the host's threads + 1 (see the module docstring).
    """
    bound = float(host["threads"] or 1) + 1.0 if max_load is None else max_load
    refused = headline_refusal(rounds, bound, min_rounds)
    result = {
        **(extra or {}),
        "benchmark": benchmark,
        "date": time.strftime("%Y-%m-%d %H:%M:%S"),
        "harness": True,
        "host": host,
        **ratio(rounds, candidate, baseline, metric, higher_is_better=higher_is_better),
        "max_load": bound,
        "min_rounds": min_rounds,
        "headline": refused is None,
        "headline_refused": refused,
        "rounds": list(rounds),
    }
    if path is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(result, indent=1, default=str) + "\n")
    if refused:
        print(f"{benchmark}: not a headline: {refused}", flush=True)
    return result


# -------------------------------------------------------------------------------------- subprocesses


def call_in_subprocess(
    file: Path,
    function: str,
    kwargs: Mapping[str, Any],
    *,
    timeout_s: float,
    env: Mapping[str, str] | None = None,
) -> dict:
    """`function(**kwargs)` of the script `file`, run in a fresh Python process; its dict (JSON).

    The child's output streams through; a failure raises `RuntimeError` with the exit status and
    `subprocess.TimeoutExpired` after `timeout_s` (every wait has a deadline).
    """
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "result.json"
        spec = {"file": str(Path(file).resolve()), "function": function, "kwargs": dict(kwargs), "out": str(out)}
        cmd = [sys.executable, str(Path(__file__).resolve()), json.dumps(spec)]
        rc = subprocess.run(cmd, env={**os.environ, **(env or {})}, timeout=timeout_s).returncode
        if rc != 0:
            raise RuntimeError(f"{Path(file).name}:{function} exited {rc}")
        return json.loads(out.read_text())


def _child(spec_json: str) -> None:
    """Inside `call_in_subprocess`'s process: load the script, call the function, write its JSON."""
    import importlib.util

    spec = json.loads(spec_json)
    here = Path(__file__).resolve()
    sys.path[:0] = [str(here.parents[1]), str(here.parents[2] / "src")]  # bench/ for _shared; this tree's tempering
    module_spec = importlib.util.spec_from_file_location("bench_child", spec["file"])
    assert module_spec is not None and module_spec.loader is not None
    module = importlib.util.module_from_spec(module_spec)
    module_spec.loader.exec_module(module)
    result = getattr(module, spec["function"])(**spec["kwargs"])
    Path(spec["out"]).write_text(json.dumps(result, default=str))


if __name__ == "__main__":
    _child(sys.argv[1])
