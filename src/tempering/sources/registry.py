"""Task sources by registration: a source is one `@register_source(name)` on its loader.

    @register_source("reasoning_gym:")            # a prefix: `reasoning_gym:<dataset>`
    def _reasoning_gym(s: TaskSourceSettings, arg: str) -> list[Task]: ...

    @register_source("humaneval")                 # an exact name
    def _humaneval(s: TaskSourceSettings, arg: str) -> list[Task]: ...

A name ending in ":" takes the rest of the value as its argument (`arg`); any other name
matches exactly (`arg` is ""). `tasks.source` values that no name matches are task JSONL
paths. Names follow `config.grpo.SOURCE_NAME` (a word, then optionally ":" and more): the
config loader, which sits below this layer, keeps such values as given instead of resolving
them as paths against the config file, so every registered name is safe from that rewrite.
Validation (`find_source`), path detection (`is_source_name`) and the names listed in
errors (`source_names`) all read this one table.
"""

from __future__ import annotations

from typing import Callable

from tempering.config import SOURCE_NAME, TaskSourceSettings
from tempering.errors import InputNotFound, UserError
from tempering.types import Task

SourceLoader = Callable[[TaskSourceSettings, str], list[Task]]

SOURCES: dict[str, SourceLoader] = {}
CONFIGURED: set[str] = set()  # sources whose loader reads a suite task source's `config:` mapping


class UnknownSource(InputNotFound):
    """A `tasks.source` value that names no registered source and no existing file (callers that
    catch a missing file or a bad value both see it)."""


def register_source(name: str, takes_config: bool = False) -> Callable[[SourceLoader], SourceLoader]:
    """Register `loader(settings, arg) -> list[Task]` under `name` (an exact name, or a prefix ending in ":").

    `takes_config`: the loader reads the `config:` mapping a suite's task source may carry.

    Raises:
        ValueError: the name is taken or does not have the shape of a source name.
    """
    if not SOURCE_NAME.fullmatch(name):
        raise UserError(f"task source name {name!r}: expected a word, optionally followed by ':' (e.g. 'mydata:')")
    if name in SOURCES:
        raise UserError(f"task source {name!r} is registered twice")

    def decorate(loader: SourceLoader) -> SourceLoader:
        SOURCES[name] = loader
        if takes_config:
            CONFIGURED.add(name)
        return loader

    return decorate


def find_source(value: str) -> tuple[SourceLoader, str] | None:
    """The loader `value` names and its argument, or None (then `value` is a file path)."""
    if value in SOURCES and not value.endswith(":"):
        return SOURCES[value], ""
    prefix, colon, arg = value.partition(":")
    if colon and f"{prefix}:" in SOURCES:
        return SOURCES[f"{prefix}:"], arg
    return None


def takes_config(value: str) -> bool:
    """Whether the source `value` names reads a `config:` mapping (see `register_source`)."""
    prefix, colon, _ = value.partition(":")
    return value in CONFIGURED or (bool(colon) and f"{prefix}:" in CONFIGURED)


def check_config(source: str, config: dict) -> None:
    """Raise ValueError when `config` is given to a source that reads none (it would do nothing)."""
    if config and not takes_config(source):
        raise UserError(f"'config' applies to sources that read one (reasoning_gym, longctx), not {source!r}")


def is_source_name(value: str) -> bool:
    """Whether `value` names a registered source (a generator or benchmark), not a file."""
    return find_source(value) is not None


def source_names() -> list[str]:
    """The registered names, prefixes written `name:<arg>`, for help and error messages."""
    return sorted(f"{n}<arg>" if n.endswith(":") else n for n in SOURCES)
