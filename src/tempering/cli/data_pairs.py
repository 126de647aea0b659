"""`temper data pairs | agree | audit`: build preference pairs, measure their agreement, audit them."""

from __future__ import annotations

import json
from pathlib import Path
from typing import List, Optional

import typer
from rich.table import Table

from tempering.cli.common import err, fail, retired_option
from tempering.config import PairsConfig, load_config
from tempering.sources.registry import source_names


def data_pairs(
    config: Optional[Path] = typer.Argument(None, help="Optional YAML (PairsConfig); flags and --set override it."),
    out_file: Optional[str] = typer.Option(None, "--out", "-o", help="Pair JSONL to write (replaced)."),
    model: Optional[str] = typer.Option(None, help="Generator model spec (default: the default model)."),
    source: Optional[str] = typer.Option(
        None, "--tasks", help=f"Task source: {', '.join(source_names())} or a task JSONL (default builtin:arithmetic)."
    ),
    n: Optional[int] = typer.Option(None, help="Tasks to sample."),
    split: Optional[str] = typer.Option(None, help="builtin:arithmetic split: train | heldout (disjoint)."),
    ops: Optional[str] = typer.Option(None, help="builtin:arithmetic operations, e.g. '+' or '+-*'."),
    task_seed: Optional[int] = typer.Option(None, help="Seed of the built-in task generator."),
    k: Optional[int] = typer.Option(None, help="Candidates sampled per task."),
    seed: Optional[int] = typer.Option(None, help="Sampling seed."),
    set_: List[str] = typer.Option([], "--set", help="Override any field: --set sampling.temperature=0.8."),
    runs: Optional[str] = typer.Option(
        None, "--root", help="Run root where the generation is recorded (default runs)."
    ),
    _source: Optional[str] = retired_option("--source", "--tasks", takes_value=True),
    _runs: Optional[str] = retired_option("--runs", "--root", takes_value=True),
    name: Optional[str] = typer.Option(None, help="Run name (default pairs-<timestamp>)."),
    threads: Optional[int] = typer.Option(None, help="torch threads."),
    force: bool = typer.Option(False, "--force", help="Re-use a run name even though the config changed."),
) -> None:
    """Verifier-built preference pairs from a model's own samples; ends with one JSON line."""
    flags = {
        "output": out_file,
        "model": model,
        "tasks.source": source,
        "tasks.n": n,
        "tasks.split": split,
        "tasks.ops": ops,
        "tasks.seed": task_seed,
        "k": k,
        "seed": seed,
        "out": runs,
        "name": name,
        "threads": threads,
    }
    cfg = load_config(PairsConfig, config, list(set_), {k_: v for k_, v in flags.items() if v is not None})
    from tempering.recipes.pairs import run_pairs

    summary = run_pairs(cfg, console=err, force=force)
    table = Table(title=f"verifier-built pairs -> {summary['output']}")
    for col in ("tasks", "samples", "strict", "sloppy", "wrong", "pairs_correct", "pairs_strict", "reformatted"):
        table.add_column(col, justify="right")
    table.add_row(
        *(
            str(summary.get(c, ""))
            for c in ("tasks", "samples", "strict", "sloppy", "wrong", "pairs_correct", "pairs_strict", "reformatted")
        )
    )
    err.print(table)
    print(
        json.dumps(
            {
                k_: summary.get(k_)
                for k_ in (
                    "tasks",
                    "samples",
                    "judged",
                    "strict",
                    "sloppy",
                    "wrong",
                    "tasks_with_correct",
                    "tasks_paired",
                    "pairs",
                    "pairs_correct",
                    "pairs_strict",
                    "reformatted",
                    "output",
                    "run_id",
                    "seconds",
                )
            }
        )
    )


def _load_pairs_or_fail(files: List[Path], quarantine: Optional[Path]) -> tuple:
    """(pairs, locations, load result) of files; bad rows printed, quarantined if asked, counted."""
    from tempering.data.io import NoRows, where, write_quarantine
    from tempering.data.preference import load_pairs

    try:
        loaded = load_pairs([str(f) for f in files])
    except NoRows as exc:  # an empty file is bad data: exit 1 like a bad row
        fail(str(exc), 1)
    for e in loaded.errors[:20]:
        err.print(f"[yellow]{e}[/yellow]", markup=True)
    if len(loaded.errors) > 20:
        err.print(f"[yellow]... {len(loaded.errors) - 20} more bad rows[/yellow]")
    if quarantine and loaded.errors:
        write_quarantine(loaded.errors, quarantine)
    pairs = [r.value for r in loaded.records]
    where = [where(r.source, r.location) for r in loaded.records]
    return pairs, where, loaded


def data_agree(
    files: List[Path] = typer.Argument(..., help="Pair files (JSONL, JSON, Parquet) whose rows carry `votes`."),
    min_agreement: Optional[float] = typer.Option(
        None,
        "--min-agreement",
        min=0.0,
        max=1.0,
        help="Keep rows whose majority is `chosen` with at least this share of the votes (e.g. 0.75 = 3 of 4).",
    ),
    flip: bool = typer.Option(
        False, "--flip", help="Keep rows whose majority prefers `rejected`, sides swapped (default: drop them)."
    ),
    weight: bool = typer.Option(
        False,
        "--weight",
        help="Multiply each kept row's `weight` by its support (the "
        "share of votes for its chosen side; a tie vote counts half).",
    ),
    out_file: Optional[Path] = typer.Option(None, "--out", "-o", help="Write the kept rows here (JSONL)."),
    quarantine: Optional[Path] = typer.Option(None, help="Write invalid rows here (JSONL)."),
) -> None:
    """Annotator agreement: alpha, kappa, per-annotator agreement; filter or weight pairs by it.

    Ends with one JSON line: rows, valid, quarantined, voted, kept, alpha, kappa, ...
    """
    from tempering.data.agreement import agreement_report, apply_filter, filter_pairs

    pairs, _, loaded = _load_pairs_or_fail(files, quarantine)
    report = agreement_report([p.votes for p in pairs])
    result = filter_pairs(report.items, min_agreement or 0.0, flip, weight)
    table = Table(title=f"annotators ({report.voted} of {report.rows} rows voted)")
    for col in ("annotator", "votes", "judged", "agrees with majority"):
        table.add_column(col, justify="right" if col != "annotator" else "left")
    for name, a in report.annotators.items():
        table.add_row(
            name,
            str(a["votes"]),
            str(a["judged"]),
            "-" if a["agreement"] != a["agreement"] else f"{a['agreement']:.1%}",
        )
    err.print(table)
    s = report.summary()
    err.print(
        f"Krippendorff's alpha {s['alpha']}, Fleiss' kappa {s['kappa']} (over {s['kappa_items']} items), "
        f"mean per-item agreement {s['mean_agreement']}"
    )
    if out_file is not None:
        from tempering.recipes.pairs import write_jsonl

        rows = [p.to_row() for p in pairs]
        write_jsonl(apply_filter(rows, result, report.items), out_file)
        err.print(f"kept {len(result.kept)} of {len(pairs)} rows -> {out_file}")
    print(
        json.dumps(
            {
                "rows": loaded.rows,
                "valid": len(pairs),
                "quarantined": len(loaded.errors),
                "voted": report.voted,
                "unvoted": report.rows - report.voted,
                "kept": len(result.kept),
                "flipped": len(result.flipped),
                "dropped": result.dropped,
                "alpha": s["alpha"],
                "kappa": s["kappa"],
                "kappa_items": s["kappa_items"],
                "mean_agreement": s["mean_agreement"],
                "annotators": {
                    k: {
                        "votes": v["votes"],
                        "agreement": None if v["agreement"] != v["agreement"] else round(v["agreement"], 4),
                    }
                    for k, v in report.annotators.items()
                },
                "min_agreement": min_agreement,
                "out": str(out_file) if out_file else None,
            }
        )
    )


def data_audit(
    files: List[Path] = typer.Argument(..., help="Pair files of one split (JSONL, JSON, Parquet)."),
    against: List[Path] = typer.Option(
        [], "--against", help="Another split's pair file; prompts shared with it are reported (repeatable)."
    ),
    quarantine: Optional[Path] = typer.Option(None, help="Write invalid rows here (JSONL)."),
    strict: bool = typer.Option(False, "--strict", help="Exit 1 when the audit finds anything."),
) -> None:
    """Audit pairs: length bias, ties, chosen == rejected, duplicates, prompts shared across splits.

    Ends with one JSON line.
    """
    from tempering.data.audit import audit_pairs, prompt_keys

    pairs, where, loaded = _load_pairs_or_fail(files, quarantine)
    others = {}
    for path in against:
        other, _, _ = _load_pairs_or_fail([path], None)
        others[str(path)] = prompt_keys(other)
    audit = audit_pairs(pairs, where, others)
    s = audit.summary()
    table = Table(title=f"pair audit ({s['rows']} valid rows)")
    table.add_column("check")
    table.add_column("value", justify="right")
    table.add_row("chosen longer than rejected", f"{s['chosen_longer_share']:.1%}" if s["rows"] else "-")
    table.add_row("mean chars chosen / rejected", f"{s['mean_chars_chosen']} / {s['mean_chars_rejected']}")
    for key in ("tie_votes", "tie_majority", "identical", "duplicate_rows", "repeated_prompts"):
        table.add_row(key.replace("_", " "), str(s[key]))
    for name, n in s["across_splits"].items():
        table.add_row(f"prompts shared with {name}", str(n))
    err.print(table)
    for key, w in audit.findings():
        examples = audit.examples.get(key, [])
        err.print(f"[yellow]warning:[/yellow] {w}" + (f" (e.g. {', '.join(examples[:3])})" if examples else ""))
    print(json.dumps({**s, "valid": len(pairs), "quarantined": len(loaded.errors), "examples": audit.examples}))
    raise typer.Exit(1 if strict and (audit.warnings() or loaded.errors) else 0)
