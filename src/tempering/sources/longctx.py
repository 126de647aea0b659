"""`longctx:<kind>`: RULER-style long-context tasks (`data.longctx`) as `Task`s.

A suite's task source passes the haystack settings as `config` (`config.LongctxSettings`):

    tasks: {source: "longctx:passkey", n: 20, split: heldout, seed: 0,
            config: {lengths: [1024, 2048, 4096], depths: [0, 0.5, 1]}}

`n` tasks per length, cycling through the depths. Each task's id names its kind, length and
depth (`longctx-passkey-L4096-d0.50-3`), so results break down by length x depth; the verifier is
`numeric` on the planted answer. Lengths are checked against the model's window (with its RoPE
scaling) before any haystack is built.
"""

from __future__ import annotations

from typing import Any

from tempering.config import LongctxSettings, TaskSourceSettings
from tempering.config.longctx import longctx_settings
from tempering.sources.registry import register_source
from tempering.types import Task


def longctx_tasks(kind: str, n: int, seed: int, split: str, settings: LongctxSettings) -> list[Task]:
    """`n` tasks of `kind` per length of `settings`, deterministic in `seed`.

    Raises:
        ValueError (`data.longctx.LongctxError`): a bad kind, a length past the model's window or too
            short for the needles.
    """
    from transformers import AutoConfig

    from tempering.data.longctx import build_task, check_request, task_id
    from tempering.models.load import load_tokenizer, resolve_model
    from tempering.models.rope import context_window

    window = context_window(AutoConfig.from_pretrained(resolve_model(settings.model)))
    for length in settings.lengths:  # every one-line error before the first haystack
        for depth in settings.depths:
            check_request(kind, length, depth, window)
    tokenizer = load_tokenizer(settings.model)
    tasks = []
    for length in settings.lengths:
        for i in range(n):
            depth = settings.depths[i % len(settings.depths)]
            built = build_task(kind, length, depth, seed * 100_003 + i, tokenizer, split, settings.distractors)
            tasks.append(
                Task(
                    id=task_id(kind, length, depth, i),
                    prompt=built.prompt,
                    verifier={"type": "numeric", "answer": str(built.answer)},
                    track="longctx",
                    source=f"longctx:{kind}",
                )
            )
    return tasks


@register_source("longctx:", takes_config=True)
def _longctx_source(s: TaskSourceSettings, arg: str) -> list[Task]:
    config: dict[str, Any] = getattr(s, "config", None) or {}  # suites carry the haystack settings
    return longctx_tasks(arg, s.n, s.seed, s.split, longctx_settings(config))
