"""Reading a config: YAML, `--set` overrides, flags, relative data paths, one-line errors."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from tempering.config.base import ConfigError, Strict

# Config keys holding data paths. Relative paths written in a config file resolve against
# the file's directory (the config travels with its data); values given by `--set` or flags
# resolve against the working directory, like any command-line path.
PATH_KEYS = (
    "data.train",
    "data.eval",
    "data.replay.data",
    "tasks.source",
    "heldout.tasks.source",
    "best_of_n.tasks.source",
)


# `tasks.source` values that name a built-in source, not a file.
_BUILTIN_SOURCE = ("builtin:", "humaneval", "reasoning_gym:")


def set_dotted(data: dict, dotted: str, value: Any) -> None:
    """Set `a.b.c` in nested dicts, creating levels as needed (a null level becomes one).

    Raises:
        ConfigError: the key is malformed or a level on its way holds a value, not a section.
    """
    parts = dotted.split(".")
    if not all(p.strip() for p in parts):
        raise ConfigError(f"{dotted!r} is not a key (expected names joined by dots, e.g. train.steps)")
    *parents, leaf = parts
    node = data
    for depth, key in enumerate(parents):
        if node.get(key) is None:
            node[key] = {}
        node = node[key]
        if not isinstance(node, dict):
            where = ".".join(parents[: depth + 1])
            raise ConfigError(f"{where!r} is not a section (it holds {node!r})")
    node[leaf] = value


def _resolve_paths(data: dict, base: Path) -> None:
    """Rewrite the relative data paths of a config read from a file in directory `base`."""
    for dotted in PATH_KEYS:
        *parents, leaf = dotted.split(".")
        node: Any = data
        for key in parents:
            node = node.get(key) if isinstance(node, dict) else None
        if not isinstance(node, dict) or leaf not in node:
            continue
        value = node[leaf]
        if isinstance(value, str):
            node[leaf] = _resolve_one(value, base, dotted)
        elif isinstance(value, list):
            node[leaf] = [_resolve_one(v, base, dotted) if isinstance(v, str) else v for v in value]


def _resolve_one(value: str, base: Path, dotted: str) -> str:
    if dotted.endswith("tasks.source") and value.startswith(_BUILTIN_SOURCE):
        return value
    path = Path(value).expanduser()
    return str(path) if path.is_absolute() else os.path.normpath(base / path)


def _override(data: dict, item: str) -> str:
    """Apply one `--set key.sub=value` (value parsed as YAML); returns the key.

    Errors name the argument as the user typed it, never the config file."""
    if "=" not in item:
        raise ConfigError(f"--set {item!r}: expected key.sub=value")
    key, raw = (x.strip() for x in item.split("=", 1))
    try:
        value = yaml.safe_load(raw)
    except yaml.YAMLError as exc:
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise ConfigError(
            f"--set {item!r}: the value {raw!r} is not valid YAML ({problem}); quote it, e.g. --set 'key=\"text\"'"
        ) from None
    try:
        set_dotted(data, key, value)
    except ConfigError as exc:
        raise ConfigError(f"--set {item!r}: {exc}") from None
    return key


def _read_yaml(path: Path) -> dict:
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError(f"{path}: config file not found") from None
    except (IsADirectoryError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{path}: not a readable YAML file ({exc})") from None
    try:
        data = yaml.safe_load(text) or {}
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"{path}:{mark.line + 1}" if mark is not None else str(path)
        raise ConfigError(f"{where}: invalid YAML ({getattr(exc, 'problem', None) or exc})") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: top level must be a mapping")
    return data


def _blame(loc: tuple, given: dict[str, str], path: str | Path | None) -> str:
    """Who set the invalid value: the `--set` argument or flag covering `loc`, else the file."""
    dotted = ".".join(map(str, loc))
    for key, label in reversed(list(given.items())):
        if dotted == key or dotted.startswith(key + ".") or key.startswith(dotted + "."):
            return label
    return str(path) if path is not None else "config"


def load_config(
    model: type[Strict], path: str | Path | None, overrides: list[str] = (), literal: dict[str, Any] | None = None
) -> Any:
    """Read YAML, apply `key.sub=value` overrides (values parsed as YAML), then `literal`
    values as given (flags such as a run name are strings, never YAML), and validate.

    Relative data paths (`PATH_KEYS`) in the file resolve against the file's directory;
    those given by overrides or flags are used as given (relative to the working directory).

    Raises:
        ConfigError: naming the file, or the `--set` argument, and every invalid or unknown key.
    """
    data: dict = {}
    if path is not None:
        data = _read_yaml(Path(path))
        _resolve_paths(data, Path(path).parent)
    given = {_override(data, item): f"--set {item!r}" for item in overrides}
    for key, value in (literal or {}).items():
        set_dotted(data, key, value)
        given[key] = f"the flag for {key} ({value!r})"
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        lines = [f"{_blame(e['loc'], given, path)}: {'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors()]
        raise ConfigError(lines[0] if len(lines) == 1 else "invalid config:\n  " + "\n  ".join(lines)) from None
