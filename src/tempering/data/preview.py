"""`temper sft CONFIG --dry-run`: what a run would train on, shown without training.

The preview is built from the run's own prepared data (`recipes.sft.prepare_sft_data`:
load, validate, render with the chat template, mix replay), so its counts and its example
are exactly what training would see. `preview_sft` returns a plain dict (for tests and
scripts); `render_preview` prints it for a person. The wiring (tokenizer, data) lives in
`recipes/sft_dry_run.py`, so this package imports nothing above it.
"""

from __future__ import annotations

from typing import Any

import yaml
from rich.console import Console
from rich.text import Text

from tempering.config import SFTConfig
from tempering.data.render import IGNORE, RenderedExample

TRAINED_STYLE = "bold black on green"
CONTEXT_STYLE = "dim"
MARK_OPEN, MARK_CLOSE = "\u27e6", "\u27e7"  # ⟦ ⟧ around trained text when output is not a terminal
SHOWN_ERRORS = 5


def preview_sft(cfg: SFTConfig, data: Any, tokenizer: Any) -> dict[str, Any]:
    """Resolved config, row and token counts, and the first training example's mask.

    Args:
        cfg: the validated SFT config (paths already resolved by `load_config`).
        data: what `recipes.sft.prepare_sft_data` returned for it (`train`, `summary`, `errors`).
        tokenizer: the tokenizer that rendered `data`.
    Returns:
        {"config", "data" (rows/valid/quarantined and the rest of the run's data summary),
         "errors" (the first few quarantined rows as `file:line: reason`), "tokens"
         (total, loss, mean_length, max_length over the training examples), "example"
         (spans of {"text", "trained"}, or None when nothing is valid)}.
    """
    lengths = [len(ex.input_ids) for ex in data.train]
    return {
        "config": cfg.model_dump(mode="json"),
        "data": data.summary,
        "errors": [str(e) for e in data.errors[:SHOWN_ERRORS]],
        "tokens": {
            "total": sum(lengths),
            "loss": sum(ex.n_loss_tokens for ex in data.train),
            "mean_length": round(sum(lengths) / len(lengths), 1) if lengths else 0,
            "max_length": max(lengths, default=0),
        },
        "example": mask_spans(tokenizer, data.train[0]) if data.train else None,
    }


def mask_spans(tokenizer: Any, example: RenderedExample) -> list[dict[str, Any]]:
    """The example's text cut where the loss mask switches: [{"text", "trained"}, ...]."""
    spans: list[dict[str, Any]] = []
    run: list[int] = []
    for i, (tok, label) in enumerate(zip(example.input_ids, example.labels)):
        trained = label != IGNORE
        if run and trained != (example.labels[i - 1] != IGNORE):
            spans.append({"text": tokenizer.decode(run), "trained": not trained})
            run = []
        run.append(tok)
    if run:
        spans.append({"text": tokenizer.decode(run), "trained": example.labels[-1] != IGNORE})
    return spans


def render_preview(preview: dict[str, Any], console: Console) -> None:
    """Print a preview for a person: trained tokens styled on a terminal, else between ⟦ and ⟧."""

    def say(text: str | Text = "") -> None:  # data is shown as is: no markup, no re-wrapping
        console.print(text, markup=False, highlight=False, soft_wrap=True)

    say("# resolved config")
    say(yaml.safe_dump(preview["config"], sort_keys=False).rstrip())
    d, t = preview["data"], preview["tokens"]
    say()
    extra = "".join(f", {k.replace('_', ' ')} {d[k]}" for k in ("replay_used", "eval_rows") if k in d)
    say(f"rows {d['rows']}, valid {d['valid']}, quarantined {d['quarantined']}{extra}")
    for line in preview["errors"]:
        say(f"  quarantined: {line}")
    say(f"tokens {t['total']} (loss tokens {t['loss']}), mean length {t['mean_length']}, max length {t['max_length']}")
    say()
    if preview["example"] is None:
        say("no valid training example to show")
        return
    if console.is_terminal:
        say(
            Text.assemble(
                "# first training example: ",
                ("trained (loss)", TRAINED_STYLE),
                " / ",
                ("context (no loss)", CONTEXT_STYLE),
            )
        )
        styled = ((s["text"], TRAINED_STYLE if s["trained"] else CONTEXT_STYLE) for s in preview["example"])
        say(Text.assemble(*styled))
    else:
        say(
            f"# first training example: text between {MARK_OPEN} and {MARK_CLOSE} is trained (loss); the rest is context"
        )
        say("".join(f"{MARK_OPEN}{s['text']}{MARK_CLOSE}" if s["trained"] else s["text"] for s in preview["example"]))
