"""`temper eval show`: read back the samples of an eval run (tables, panels, --failed, --full).

A panel shows a prompt's pictures as `[image WxH <file>]` lines (the PNG stored beside
samples.jsonl, `evals/sample_images.py`), each followed by a small half-block preview.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Optional

import typer
from rich.color import Color
from rich.console import Console, Group, RenderableType
from rich.markup import escape
from rich.panel import Panel
from rich.style import Style
from rich.table import Table
from rich.text import Text

from tempering.errors import UserError

SAMPLES = "samples.jsonl"
PREVIEW_COLUMNS = 16
"""Width in characters of a picture's preview (each character shows two pixel rows)."""


class SamplesError(UserError):
    """samples.jsonl is missing or a line of it is not a JSON object."""


def read_samples(path: Path) -> list[dict[str, Any]]:
    """Every row of a samples.jsonl (or of `<dir>/samples.jsonl`); bad lines name file:line."""
    file = path / SAMPLES if path.is_dir() else path
    if not file.is_file():
        raise SamplesError(f"{file}: not found (`temper eval run --out DIR` writes DIR/{SAMPLES})")
    rows = []
    with file.open(encoding="utf-8", errors="replace") as fh:
        for n, line in enumerate(fh, 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as exc:
                raise SamplesError(f"{file}:{n}: not JSON ({exc.msg})") from None
            if not isinstance(row, dict):
                raise SamplesError(f"{file}:{n}: expected a JSON object")
            rows.append(row)
    return rows


def select_samples(
    rows: list[dict[str, Any]], suite: str | None = None, failed: bool = False, task: str | None = None
) -> list[dict[str, Any]]:
    """The rows matching every filter given (file order kept)."""
    return [
        r
        for r in rows
        if (suite is None or r.get("suite") == suite)
        and (not failed or not r.get("passed"))
        and (task is None or str(r.get("task_id")) == task)
    ]


def _one_line(text: Any, width: int) -> str:
    if text is None:
        return "(private)"
    flat = str(text).replace("\n", "\\n")
    return flat if len(flat) <= width else flat[: width - 1] + "…"


def _reward(row: dict[str, Any]) -> str:
    value = row.get("reward")
    mark = "[green]pass[/green]" if row.get("passed") else "[red]fail[/red]"
    return f"{value:.2f} {mark}" if isinstance(value, (int, float)) else mark


def samples_table(rows: list[dict[str, Any]]) -> Table:
    table = Table("suite", "task", "seed", "#", "reward", "status", "completion")
    for r in rows:
        status = r.get("status", "")
        table.add_row(
            escape(str(r.get("suite", ""))),
            escape(str(r.get("task_id", ""))),
            str(r.get("seed", "")),
            str(r.get("sample", "")),
            _reward(r),
            status if status == "scored" else f"[yellow]{escape(str(status))}[/yellow]",
            escape(_one_line(r.get("completion"), 60)),
        )
    return table


def half_block_preview(image: Any, columns: int = PREVIEW_COLUMNS) -> Text:
    """`image` shrunk to `columns` characters wide, each `▀` coloured with the pixel above (foreground)
    and the one below (background)."""
    width = min(columns, image.width)
    height = max(2, round(image.height * width / image.width / 2) * 2)
    small = image.convert("RGB").resize((width, height))
    text = Text(no_wrap=True)
    for y in range(0, height, 2):
        for x in range(width):
            top, bottom = small.getpixel((x, y)), small.getpixel((x, y + 1))
            text.append("▀", Style(color=Color.from_rgb(*top), bgcolor=Color.from_rgb(*bottom)))
        text.append("\n" if y + 2 < height else "")
    return text


def prompt_renderables(prompt: Any, base: Path) -> list[RenderableType]:
    """A prompt's text parts, and per picture its `[image WxH <file>]` line and preview."""
    from tempering.evals.sample_images import prompt_pieces

    out: list[RenderableType] = []
    for piece in prompt_pieces(prompt, base):
        if isinstance(piece, str):
            out.append(Text(piece))
        else:
            out.append(Text(piece.line(), style="cyan" if piece.image is not None else "yellow"))
            if piece.image is not None:
                out.append(half_block_preview(piece.image))
    return out


def sample_panel(row: dict[str, Any], base: Path) -> Panel:
    """One generation in full; picture paths in its prompt are read against `base` (the samples' folder)."""
    prompt = row.get("prompt")
    parts: list[RenderableType] = [
        Text("prompt", style="bold"),
        *(prompt_renderables(prompt, base) if prompt is not None else [Text("(private)")]),
        Text("\ncompletion", style="bold"),
        Text(str(row.get("completion", "(private)"))),
    ]
    if row.get("detail"):
        parts += [Text("\ndetail", style="bold"), Text(str(row["detail"]))]
    title = (
        f"{escape(str(row.get('suite')))} / {escape(str(row.get('task_id')))}  seed {row.get('seed')} "
        f"sample {row.get('sample')}  template {escape(str(row.get('template', '-')))}"
    )
    return Panel(Group(*parts), title=title, subtitle=f"{_reward(row)}  {escape(str(row.get('status', '')))}")


def eval_show(
    run_dir: Path = typer.Argument(..., help="An eval output dir (holding samples.jsonl) or the file itself."),
    suite: Optional[str] = typer.Option(None, help="Only this suite."),
    failed: bool = typer.Option(False, "--failed", help="Only generations that did not pass."),
    task: Optional[str] = typer.Option(None, help="Only this task id (shown in full, one panel per sample)."),
    limit: int = typer.Option(20, help="Rows to show (0: all)."),
    full: bool = typer.Option(False, "--full", help="One panel per generation (prompt, completion, detail)."),
) -> None:
    """Browse an eval run's stored generations: prompt, completion, reward, status."""
    from tempering.cli.common import fail

    out = Console()
    if limit < 0:
        fail(f"--limit must be 0 (all) or more, not {limit}")
    try:
        rows = read_samples(run_dir)
    except SamplesError as exc:
        fail(exc)
    for name, value, key, plural in (("--suite", suite, "suite", "suites"), ("--task", task, "task_id", "task ids")):
        present = sorted({str(r.get(key)) for r in rows})
        if value is not None and value not in present:  # a typo is no empty result
            listed = ", ".join(present[:20]) + (f", ... ({len(present)} in all)" if len(present) > 20 else "")
            fail(f"{name} {value!r}: not in {run_dir} ({plural} there: {listed or 'none'})")
    chosen = select_samples(rows, suite, failed, task)
    shown = chosen[:limit] if limit else chosen
    if task is not None or full:
        base = run_dir if run_dir.is_dir() else run_dir.parent
        for row in shown:
            out.print(sample_panel(row, base))
    else:
        from tempering.tables import print_wide

        print_wide(out, samples_table(shown))
    passed = sum(bool(r.get("passed")) for r in chosen)
    out.print(
        f"{len(shown)} shown of {len(chosen)} matching ({passed} passed); {len(rows)} in the file", highlight=False
    )
