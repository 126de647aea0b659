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

from pydantic import field_validator

from tempering.config import LongctxSettings, Options, TaskSourceSettings
from tempering.config.longctx import longctx_settings
from tempering.sources.registry import register_source
from tempering.types import Task


def check_requests(kinds: list[str], settings: LongctxSettings) -> None:
    """Every one-line error of these kinds x lengths x depths, before the first haystack is built."""
    from transformers import AutoConfig

    from tempering.data.longctx import check_request
    from tempering.models.load import resolve_model
    from tempering.models.rope import scaled_window

    window = scaled_window(AutoConfig.from_pretrained(resolve_model(settings.model)), settings.rope_scaling)
    for kind in kinds:
        for length in settings.lengths:
            for depth in settings.depths:
                check_request(kind, length, depth, window)


def longctx_tasks(kind: str, n: int, seed: int, split: str, settings: LongctxSettings) -> list[Task]:
    """`n` tasks of `kind` per length of `settings`, deterministic in `seed`.

    Raises:
        ValueError (`data.longctx.LongctxError`): a bad kind, a length past the model's window or too
            short for the needles.
    """
    from tempering.data.longctx import build_task, task_id
    from tempering.models.load import load_tokenizer

    check_requests([kind], settings)
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


def longctx_sft_rows(kinds: list[str], n: int, seed: int, split: str, settings: LongctxSettings) -> list[dict]:
    """SFT rows (`messages`: the haystack, then the answer) of `n` tasks per kind per length, the
    kinds interleaved in an order fixed by `seed` (so a prefix of the rows holds every kind).

    Raises:
        ValueError: as `longctx_tasks`, before any haystack is built.
    """
    import random

    check_requests(kinds, settings)
    tasks = [t for kind in kinds for t in longctx_tasks(kind, n, seed, split, settings)]
    random.Random(seed).shuffle(tasks)
    return [
        {"messages": [{"role": "user", "content": t.prompt}, {"role": "assistant", "content": t.verifier["answer"]}]}
        for t in tasks
    ]


class LongctxSourceSettings(Options):
    """longctx:<kind>'s own settings."""

    config: dict[str, Any] = {}
    """The haystack settings (`config.LongctxSettings`: lengths, depths, model, ...); checked here."""

    @field_validator("config")
    @classmethod
    def _haystack_settings(cls, value: dict[str, Any]) -> dict[str, Any]:
        longctx_settings(value)  # bad lengths or depths fail with the config, in one line
        return value


@register_source("longctx:", LongctxSourceSettings)
def _longctx_source(s: TaskSourceSettings, arg: str) -> list[Task]:
    return longctx_tasks(arg, s.n, s.seed, s.split, longctx_settings(s.options_as(LongctxSourceSettings).config))
