"""The report's Samples section: a few generations per public suite, with their prompt pictures inline.

Per suite, up to `SAMPLES_SHOWN` rows of samples.jsonl, failed ones first (file order within
each): the prompt's text parts and its pictures as small `<img>`s (a data URL as it is, a stored
or other file embedded as a PNG data URL, so the page stays one file), the completion, and the
verdict. A picture that cannot be read is one line naming why. Private suites' rows hold no text
and are not listed; nor are rows with neither prompt nor completion (agent episodes).
"""

from __future__ import annotations

import html
from pathlib import Path
from typing import Any, Sequence

from tempering.data.images import data_url
from tempering.evals.results import SuiteResult
from tempering.evals.sample_images import SampleImage, prompt_pieces

SAMPLES_SHOWN = 8
"""Generations listed per suite (all of them: samples.jsonl, `temper eval show`)."""
TEXT_SHOWN = 600
"""Characters of a prompt part or a completion shown; the rest is cut with an ellipsis."""


def samples_section(suites: Sequence[SuiteResult], samples: Sequence[dict[str, Any]], base: Path) -> list[str]:
    """HTML of the Samples section (empty when no public suite has a listable row); image paths
    in `samples` are read against `base`, the folder samples.jsonl is in."""
    tables = []
    for suite in suites:
        rows = [r for r in samples if r.get("suite") == suite.suite and ("prompt" in r or "completion" in r)]
        if suite.private or not rows:
            continue
        shown = sorted(rows, key=lambda r: bool(r.get("passed")))[:SAMPLES_SHOWN]  # stable: failed first
        tables += [
            f"<h3>{html.escape(suite.suite)}</h3>",
            f'<p class="note">{len(shown)} of {len(rows)} generations, failed first.</p>',
            '<table class="samples"><tr><th>task</th><th>prompt</th><th>completion</th><th>verdict</th></tr>',
            *(_sample_row(r, base) for r in shown),
            "</table>",
        ]
    if not tables:
        return []
    note = "All of them are in samples.jsonl beside this report (<code>temper eval show DIR</code>)."
    return ["<h2>Samples</h2>", f'<p class="note">{note}</p>', *tables]


def _sample_row(row: dict[str, Any], base: Path) -> str:
    where = f"{row.get('task_id')}\nseed {row.get('seed')}, sample {row.get('sample')}"
    prompt = "".join(_piece(p) for p in prompt_pieces(row.get("prompt", ""), base))
    return (
        f"<tr><td>{html.escape(where)}</td><td>{prompt}</td>"
        f"<td>{_text(row.get('completion', ''))}</td><td>{html.escape(_verdict(row))}</td></tr>"
    )


def _piece(piece: str | SampleImage) -> str:
    if isinstance(piece, str):
        return _text(piece)
    if piece.image is None:
        return f'<span class="note">{html.escape(piece.line())}</span>'
    src = piece.url if piece.path is None else data_url(piece.image)  # a data URL is kept as it is
    alt = f"image {piece.image.width}x{piece.image.height}"
    return f'<img class="sample" alt="{alt}" src="{html.escape(src)}">'


def _text(value: Any) -> str:
    text = str(value)
    return html.escape(text if len(text) <= TEXT_SHOWN else text[: TEXT_SHOWN - 1] + "…")


def _verdict(row: dict[str, Any]) -> str:
    status = row.get("status", "scored")
    if status != "scored":
        return str(status)
    reward = row.get("reward")
    mark = "pass" if row.get("passed") else "fail"
    return f"{reward:.2f} {mark}" if isinstance(reward, (int, float)) else mark
