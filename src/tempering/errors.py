"""User errors vs bugs: the one exception type for bad input, and the crash log of everything else.

A `UserError` is bad input: a config value, a data row, a path, a name the user gave. The CLI
shows it as one line (`error: ...`, exit 2) and nothing else, since the message says what to fix.
Any other exception is a bug, in Tempering or in a library it calls: the CLI says so in one line
and keeps the whole traceback in a `crash.log`, in the run's directory when there is one
(`crashes_into` marks it as the exception passes), else in the temp dir.

`UserError` subclasses `ValueError` so that code and tests catching `ValueError` still catch it;
the reverse does not hold: a plain `ValueError` (torch's, transformers', an internal check's) is
a bug, never shown as a typo in the YAML.
"""

from __future__ import annotations

import os
import tempfile
import time
import traceback
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

CRASH_LOG = "crash.log"
DEBUG_ENV = "TEMPERING_DEBUG"
_RUN_DIR = "_tempering_run_dir"  # the attribute `crashes_into` leaves on an exception


class UserError(ValueError):
    """Bad input: config, data, paths, names; the CLI shows it as one line."""


class InputNotFound(UserError, FileNotFoundError):
    """A file or directory the user named does not exist (still a `FileNotFoundError` for callers)."""


def is_user_error(exc: BaseException) -> bool:
    """True for bad input (one line for the user), False for a bug (a traceback in a crash log)."""
    return isinstance(exc, UserError)


@contextmanager
def crashes_into(run_dir: str | Path) -> Iterator[None]:
    """Mark a bug raised inside as belonging to `run_dir`: its crash log goes there.

    The innermost mark wins (a training stage's run dir inside a pipeline's out dir); user
    errors and interrupts pass unmarked, since they leave no crash log."""
    try:
        yield
    except Exception as exc:
        if not is_user_error(exc) and not hasattr(exc, _RUN_DIR):
            try:
                setattr(exc, _RUN_DIR, Path(run_dir))
            except (AttributeError, TypeError):  # an exception type that takes no attributes
                pass
        raise


def crash_dir(exc: BaseException) -> Path | None:
    """The run dir `crashes_into` marked on `exc`, if any."""
    found = getattr(exc, _RUN_DIR, None)
    return found if isinstance(found, Path) else None


def write_crash_log(exc: BaseException, directory: str | Path | None = None) -> Path:
    """Write `exc`'s full traceback (its causes included) to `directory/crash.log` and return the path.

    Without a directory, or when it cannot be written (the disk the run filled, a read-only
    mount), the log goes to a new `tempering-crash-<time>-*.log` in the temp dir
    (`$TMPDIR`, else /tmp), so a crash is never lost to a second error."""
    text = f"{time.strftime('%Y-%m-%d %H:%M:%S')} pid {os.getpid()}\n" + "".join(traceback.format_exception(exc))
    if directory is not None:
        path = Path(directory) / CRASH_LOG
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
            return path
        except OSError:
            pass
    fd, name = tempfile.mkstemp(prefix=f"tempering-crash-{time.strftime('%Y%m%d-%H%M%S')}-", suffix=".log")
    with os.fdopen(fd, "w") as f:
        f.write(text)
    return Path(name)


def one_line(exc: BaseException) -> str:
    """`Type: message` on one line (a multi-line message's whitespace collapsed)."""
    return " ".join(f"{type(exc).__name__}: {exc}".split())
