"""Task sources by registration: a source is one `@register_source(name, settings)` on its loader.

    class GymSettings(Options):                   # the source's own settings (config.Options)
        config: dict[str, Any] = {}

    @register_source("reasoning_gym:", GymSettings)   # a prefix: `reasoning_gym:<dataset>`
    def _reasoning_gym(s: TaskSourceSettings, arg: str) -> list[Task]:
        gym = s.options_as(GymSettings)             # written beside `source:` in a config

    @register_source("humaneval")                 # an exact name, no settings of its own
    def _humaneval(s: TaskSourceSettings, arg: str) -> list[Task]: ...

A name ending in ":" takes the rest of the value as its argument (`arg`); any other name
matches exactly (`arg` is ""). `tasks.source` values that no name matches are task JSONL
paths. Names follow `config.grpo.SOURCE_NAME` (a word, then optionally ":" and more): the
config loader, which sits below this layer, keeps such values as given instead of resolving
them as paths against the config file, so every registered name is safe from that rewrite.
Validation (`find_source`), path detection (`is_source_name`) and the names listed in
errors (`source_names`) all read this one table; a config's `tasks:` section validates the
source's own keys against the settings class (`config.tasks.source_settings`), so a new source
with settings is one module and no edit elsewhere. Every module of this package registers on
import (`tempering/sources/__init__.py` imports them all); a source outside the package, in any
module imported before the config loads (`TEMPERING_PLUGINS`, an entry point of
`tempering.objectives`, or a test).
"""

from __future__ import annotations

from typing import Callable

from tempering.config import SOURCE_NAME, Options, TaskSourceSettings
from tempering.config.tasks import SOURCE_SETTINGS, match_source
from tempering.errors import InputNotFound, UserError
from tempering.types import Task

SourceLoader = Callable[[TaskSourceSettings, str], list[Task]]

SOURCES: dict[str, SourceLoader] = {}


class UnknownSource(InputNotFound):
    """A `tasks.source` value that names no registered source and no existing file (callers that
    catch a missing file or a bad value both see it)."""


def register_source(name: str, settings: type[Options] = Options) -> Callable[[SourceLoader], SourceLoader]:
    """Register `loader(settings, arg) -> list[Task]` under `name` (an exact name, or a prefix ending in ":").

    `settings`: the source's own settings (an `Options` subclass; the base: none), written beside
    `source:` in a config and read by the loader as `s.options_as(cls)`.

    Raises:
        UserError: the name is taken or does not have the shape of a source name.
    """
    if not SOURCE_NAME.fullmatch(name):
        raise UserError(f"task source name {name!r}: expected a word, optionally followed by ':' (e.g. 'mydata:')")
    if name in SOURCES:
        raise UserError(f"task source {name!r} is registered twice")

    def decorate(loader: SourceLoader) -> SourceLoader:
        SOURCES[name] = loader
        SOURCE_SETTINGS[name] = settings
        return loader

    return decorate


def find_source(value: str) -> tuple[SourceLoader, str] | None:
    """The loader `value` names and its argument, or None (then `value` is a file path)."""
    name = match_source(value, SOURCES)
    if name is None:
        return None
    return SOURCES[name], value[len(name) :] if name.endswith(":") else ""


def is_source_name(value: str) -> bool:
    """Whether `value` names a registered source (a generator or benchmark), not a file."""
    return find_source(value) is not None


def source_names() -> list[str]:
    """The registered names, prefixes written `name:<arg>`, for help and error messages."""
    return sorted(f"{n}<arg>" if n.endswith(":") else n for n in SOURCES)
