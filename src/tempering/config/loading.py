"""Reading a config: YAML, `--set` overrides, flags, relative data paths, one-line errors."""

from __future__ import annotations

import difflib
import os
from pathlib import Path
from typing import Any, Sequence, get_args, get_origin

import yaml
from pydantic import BaseModel, ValidationError

from tempering.config.base import ConfigError, Strict


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


def resolve_paths(model: type[Strict], data: dict, base: Path) -> None:
    """Rewrite, in place, the relative data paths of `data` (read from a file in directory `base`).

    The path fields are those each config class declares (`Strict.path_fields`), found by walking
    `data` along the model's nested sections; a field is resolved only under a class declaring it.
    """
    for name in model.path_fields:
        value = data.get(name)
        if isinstance(value, str):
            data[name] = _resolve_one(model, name, value, base)
        elif isinstance(value, list):
            data[name] = [_resolve_one(model, name, v, base) if isinstance(v, str) else v for v in value]
    for name, field in model.model_fields.items():
        section = _section_class(field.annotation)
        value = data.get(name)
        if section is None or value is None:
            continue
        for item in value if isinstance(value, list) else [value]:
            if isinstance(item, dict):
                resolve_paths(section, item, base)


def declared_paths(model: type[Strict], prefix: str = "") -> list[str]:
    """Every dotted key under `model` that a class declares a path field (`*` walks a list)."""
    keys = [f"{prefix}{name}" for name in model.path_fields]
    for name, field in model.model_fields.items():
        section = _section_class(field.annotation)
        if section is not None:
            many = any(
                get_origin(a) is list for a in (field.annotation, *get_args(field.annotation))
            )  # list | None too
            keys += declared_paths(section, f"{prefix}{name}.{'*.' if many else ''}")
    return keys


def _section_class(annotation: Any) -> type[Strict] | None:
    """The config class a field holds (directly, optional, or in a list), if any."""
    if isinstance(annotation, type) and issubclass(annotation, Strict):
        return annotation
    for arg in get_args(annotation):
        found = _section_class(arg)
        if found is not None:
            return found
    return None


def _resolve_one(model: type[Strict], field: str, value: str, base: Path) -> str:
    if model.names_no_file(field, value):
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


def _message(model: type[BaseModel], error: Any) -> str:
    """pydantic's message, without its "Value error, " prefix; an unknown key gets the closest
    allowed key of its section as a suggestion (difflib), e.g. `did you mean 'steps'?`."""
    msg = str(error["msg"]).removeprefix("Value error, ")
    if error["type"] != "extra_forbidden":
        return msg
    section: type[BaseModel] | None = model
    for key in error["loc"][:-1]:
        if section is not None and isinstance(key, str) and key in section.model_fields:
            section = _section_class(section.model_fields[key].annotation)
    if section is None:
        return msg
    close = difflib.get_close_matches(str(error["loc"][-1]), list(section.model_fields), n=1, cutoff=0.6)
    return f"{msg}; did you mean {close[0]!r}?" if close else f"{msg} (allowed: {', '.join(section.model_fields)})"


def load_config(
    model: type[BaseModel],
    path: str | Path | None,
    overrides: Sequence[str] = (),
    literal: dict[str, Any] | None = None,
) -> Any:
    """Read YAML, apply `key.sub=value` overrides (values parsed as YAML), then `literal`
    values as given (flags such as a run name are strings, never YAML), and validate.

    Relative data paths (the fields each class declares in `path_fields`) in the file resolve against the file's directory;
    those given by overrides or flags are used as given (relative to the working directory).

    Raises:
        ConfigError: naming the file, or the `--set` argument, and every invalid or unknown key.
    """
    data: dict = {}
    if path is not None:
        data = _read_yaml(Path(path))
        if issubclass(model, Strict):  # only Strict sections declare path fields
            resolve_paths(model, data, Path(path).parent)
    given = {_override(data, item): f"--set {item!r}" for item in overrides}
    for key, value in (literal or {}).items():
        set_dotted(data, key, value)
        given[key] = f"the flag for {key} ({value!r})"
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        lines = [
            f"{_blame(e['loc'], given, path)}: {'.'.join(map(str, e['loc']))}: {_message(model, e)}"
            for e in exc.errors()
        ]
        raise ConfigError(lines[0] if len(lines) == 1 else "invalid config:\n  " + "\n  ".join(lines)) from None
