"""`temper data synth`: the flywheel, generate -> verify -> keep the best -> (reflow) -> SFT set.

For each task, `n` candidates are sampled and scored through the one rollout path (the same
verifiers as RL rewards and evals). The best candidate that passed (highest reward, then
shortest, then first) becomes an SFT row `{"messages": [prompt..., answer], "meta": {...}}`.

`reflow: final_answer` rewrites the kept answer into the form the task asks for: only the
verifier's extracted final answer (for `numeric`, its last number). The rewrite is scored
again by the same verifier and kept only if it still passes; the row's provenance says
which happened and keeps the original text.

Provenance of each kept row (`meta`): generator model and its weight hash, sampling settings
and seed, verifier type, score, how many of the n candidates passed, reflow.
Candidates that failed go to `failures.jsonl` (prompt, completion, reward, finish reason),
the input of `temper data failures`; with `pairs: true`, a preference pair per task with a
correct and a failed candidate goes to `pairs.jsonl` (the shared pair row, source
"verifier").
"""

from __future__ import annotations

from typing import Any, Sequence

from rich.console import Console

from tempering.atomic import write_jsonl_atomic
from tempering.config import SynthConfig
from tempering.recipes.stratify import sample_task_source
from tempering.runs.stage import StageSpec, input_list, run_stage
from tempering.types import Task, Trajectory


def reflow_final_answer(task: Task, completion: str) -> str | None:
    """The final answer alone, as the task's verifier extracts it (None: nothing to extract)."""
    from tempering.numbers import NUMBER
    from tempering.verifiers.answers import extract_final_answer

    answer = extract_final_answer(completion)
    if task.verifier.get("type") == "numeric":
        numbers = NUMBER.findall(answer)
        return numbers[-1].replace(",", "").replace(" ", "") if numbers else None
    return answer or None


def pick_best(group: Sequence[Trajectory], min_score: float) -> Trajectory | None:
    """The passed candidate with the highest reward (then the shortest, then the first)."""
    good = [t for t in group if t.scored and t.reward.passed and t.reward.value >= min_score]
    if not good:
        return None
    return min(good, key=lambda t: (-t.reward.value, len(t.completion), t.sample))


def synth_rows(
    tasks: Sequence[Task], groups: Sequence[Sequence[Trajectory]], cfg: SynthConfig, generator_hash: str
) -> tuple[list[dict], list[dict], list[dict], dict[str, Any]]:
    """(SFT rows, failed candidates, preference pairs, counts) from scored candidates."""
    from tempering.rollout.rollout import judge

    sft, failures, pairs = [], [], []
    counts = {
        "tasks": len(tasks),
        "candidates": 0,
        "passed": 0,
        "kept": 0,
        "verifier_errors": 0,
        "reflowed": 0,
        "reflow_rejected": 0,
    }
    for task, group in zip(tasks, groups):
        counts["candidates"] += len(group)
        counts["verifier_errors"] += sum(1 for t in group if not t.scored)
        passed = [t for t in group if t.scored and t.reward.passed]
        counts["passed"] += len(passed)
        failed = [t for t in group if t.scored and not t.reward.passed]
        failures += [failure_row(task, t) for t in failed]
        best = pick_best(group, cfg.min_score)
        if best is None:
            continue
        answer, reflow = best.completion, {"kind": "none"}
        if cfg.reflow == "final_answer":
            new = reflow_final_answer(task, best.completion)
            if new is not None and new != best.completion.strip():
                verdict = judge(task, new)
                if verdict.status == "scored" and verdict.reward.passed:
                    answer, reflow = new, {"kind": "final_answer", "original": best.completion}
                    counts["reflowed"] += 1
                else:
                    reflow = {"kind": "final_answer", "rejected": "the rewrite did not verify", "original": None}
                    counts["reflow_rejected"] += 1
        meta = {
            "task_id": task.id,
            "source": task.source,
            "track": task.track,
            "generator": cfg.model,
            "generator_hash": generator_hash,
            "sampling": {**cfg.sampling.model_dump(), "n": cfg.n, "seed": cfg.seed},
            "verifier": task.verifier.get("type"),
            "score": best.reward.value,
            "components": best.reward.components,
            "passed_of_n": f"{len(passed)}/{len(group)}",
            "reflow": reflow,
        }
        sft.append({"messages": [*task.chat(), {"role": "assistant", "content": answer}], "meta": meta})
        if cfg.pairs and failed:
            worst = min(failed, key=lambda t: (t.reward.value, t.sample))
            pairs.append(
                {
                    "prompt": task.chat(),
                    "chosen": answer,
                    "rejected": worst.completion,
                    "source": "verifier",
                    "meta": {**meta, "rejected_score": worst.reward.value},
                }
            )
    counts["kept"] = len(sft)
    counts["pairs"] = len(pairs)
    counts["failures"] = len(failures)
    return sft, failures, pairs, counts


def failure_row(task: Task, t: Trajectory) -> dict[str, Any]:
    """A failed candidate as `temper data failures` reads it."""
    return {
        "task_id": task.id,
        "sample": t.sample,
        "prompt": task.chat(),
        "completion": t.completion,
        "reward": t.reward.value,
        "components": t.reward.components,
        "flags": t.reward.flags,
        "detail": t.reward.detail,
        "finish_reason": t.finish_reason,
        "verifier": task.verifier.get("type"),
    }


def synth_stage(cfg: SynthConfig, force: bool = False) -> StageSpec:
    inputs = input_list([(cfg.tasks.source, "tasks")])
    return StageSpec("synth", cfg.out, cfg.name, cfg.model_dump(), inputs, cfg.model, 1, cfg.seed, cfg.threads, force)


def run_synth(cfg: SynthConfig, force: bool = False, console: Console | None = None) -> dict[str, Any]:
    """Generate, verify, keep, reflow and write the SFT set (and failures, pairs); recorded as a run."""
    console = console or Console(stderr=True)
    with run_stage(synth_stage(cfg, force)) as stage:
        if stage.finished:
            return stage.summary
        tasks, groups, generator_hash = sample_task_source(cfg, cfg.n, "synth", console)
        sft, failures, pairs, counts = synth_rows(tasks, groups, cfg, generator_hash)
        outputs, digests = {}, {}
        for key, rows in (("sft", sft), ("failures", failures)) + ((("pairs", pairs),) if cfg.pairs else ()):
            path = stage.run_dir / f"{key}.jsonl"
            _, digests[key] = write_jsonl_atomic(path, rows, sidecar=True)
            stage.record_output(key, path)
            outputs[key] = str(path)
        summary = {
            "steps": 1,
            "model": cfg.model,
            "generator_hash": generator_hash,
            "reflow": cfg.reflow,
            **counts,
            "pass_rate": counts["passed"] / max(counts["candidates"] - counts["verifier_errors"], 1),
            **{f"{k}_file": v for k, v in outputs.items()},
            "sha256": digests,
        }
        stage.finish(summary, outputs)
    return stage.summary
