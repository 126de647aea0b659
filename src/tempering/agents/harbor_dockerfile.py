"""A Harbor task's environment/Dockerfile, reproduced without Docker where it can be.

    workdir, files = workspace_files(task_dir / "environment", where="harbor task hello")

What this machine can reproduce is a plain image with the task's own files in its working
directory: `FROM` (one stage), `WORKDIR` and `COPY` of files of the build context (the
environment/ folder) to paths under the final working directory. The sandbox's toolchain
stands in for the image (bash, coreutils, python3, git: see docs/agents.md, Harbor tasks).
Anything else (`RUN`, `ENV`, `USER`, `ADD`, `COPY --from`, a copy outside the working
directory, a .dockerignore, ...) changes the image in ways only Docker can build, and is
refused in one line naming the task, the line and the instruction: such a task runs with
Harbor itself (`harbor run -p TASK_DIR`, under Docker).
"""

from __future__ import annotations

import glob
import json
import posixpath
import shlex
from pathlib import Path

from tempering.errors import UserError

ALLOWED = ("FROM", "WORKDIR", "COPY")
DOCKER = "run it with Harbor under Docker instead (`harbor run -p TASK_DIR`)"


class HarborTaskError(UserError):
    """A Harbor task directory that does not load (the message names the task)."""


def workspace_files(env_dir: Path, where: str) -> tuple[str, dict[str, str]]:
    """(the image's working directory, its files relative to it) from `env_dir/Dockerfile`.

    Raises:
        HarborTaskError: no Dockerfile, an instruction this machine cannot reproduce, a source
            outside the build context or missing, a destination outside the working directory,
            a file that is not UTF-8 text.
    """
    dockerfile = env_dir / "Dockerfile"
    if not dockerfile.is_file():
        raise HarborTaskError(f"{where}: environment/Dockerfile is missing")
    if (env_dir / ".dockerignore").exists():
        raise HarborTaskError(f"{where}: environment/.dockerignore is not reproduced here; {DOCKER}")
    workdir, froms, copies, folders = "/", 0, [], {"/"}
    for n, instruction, args in _instructions(dockerfile.read_text()):
        at = f"{where}: environment/Dockerfile line {n}"
        if instruction not in ALLOWED:
            raise HarborTaskError(
                f"{at}: {instruction} cannot be reproduced without Docker (only FROM, WORKDIR and "
                f"COPY of the task's own files can); {DOCKER}"
            )
        if instruction == "FROM":
            froms += 1
            if froms > 1 or args.startswith("--"):
                raise HarborTaskError(f"{at}: only one plain FROM stage can be reproduced; {DOCKER}")
        elif froms == 0:
            raise HarborTaskError(f"{at}: {instruction} before FROM")
        elif instruction == "WORKDIR":
            workdir = posixpath.normpath(posixpath.join(workdir, args.strip()))
            folders.add(workdir)
        else:
            copies.append((at, workdir, _copy_args(args, at)))
    if froms == 0:
        raise HarborTaskError(f"{where}: environment/Dockerfile has no FROM")
    if workdir == "/":
        raise HarborTaskError(f"{where}: environment/Dockerfile sets no WORKDIR (the workspace would be /)")
    files: dict[str, str] = {}
    for at, cwd, (sources, dest) in copies:
        target = posixpath.normpath(posixpath.join(cwd, dest))
        into = dest.endswith("/") or target in folders  # a folder: the sources go into it
        for path, text in _copied(env_dir, sources, target, into, at).items():
            rel = posixpath.relpath(path, workdir)
            if rel == "." or rel.startswith("../"):
                raise HarborTaskError(
                    f"{at}: COPY to {path} is outside the working directory {workdir} (only it becomes "
                    f"the workspace here); {DOCKER}"
                )
            files[rel] = text
    return workdir, files


def _instructions(text: str) -> list[tuple[int, str, str]]:
    """(line number, INSTRUCTION, arguments) with continuation lines joined and comments dropped."""
    out, pending, start = [], "", 0
    for n, line in enumerate(text.splitlines(), 1):
        stripped = line.strip()
        if not pending and (not stripped or stripped.startswith("#")):
            continue
        if pending and stripped.startswith("#"):
            continue  # a comment inside a continued instruction
        start = start if pending else n
        if stripped.endswith("\\"):
            pending += stripped[:-1] + " "
            continue
        full = (pending + stripped).strip()
        pending = ""
        word, _, args = full.partition(" ")
        out.append((start, word.upper(), args.strip()))
    if pending:
        word, _, args = pending.strip().partition(" ")
        out.append((start, word.upper(), args.strip()))
    return out


def _copy_args(args: str, at: str) -> tuple[list[str], str]:
    try:
        parts = json.loads(args) if args.startswith("[") else shlex.split(args)
    except ValueError:
        raise HarborTaskError(f"{at}: COPY arguments do not parse: {args!r}") from None
    flags = [p for p in parts if isinstance(p, str) and p.startswith("--")]
    for flag in flags:  # ownership and modes aside (every file here is the sandbox user's)
        if flag.startswith("--from"):
            raise HarborTaskError(f"{at}: COPY {flag} copies from outside the task; {DOCKER}")
        if not flag.startswith(("--chown=", "--chmod=")):
            raise HarborTaskError(f"{at}: COPY {flag} is not reproduced here; {DOCKER}")
    paths = [p for p in parts if p not in flags]
    if len(paths) < 2 or not all(isinstance(p, str) for p in paths):
        raise HarborTaskError(f"{at}: COPY needs a source and a destination")
    return paths[:-1], paths[-1]


def _copied(context: Path, sources: list[str], dest: str, into: bool, at: str) -> dict[str, str]:
    """Absolute destination path -> text of what `COPY sources dest` puts in the image."""
    root = context.resolve()
    out: dict[str, str] = {}
    into = into or len(sources) > 1
    for source in sources:
        matches = sorted(glob.glob(str(root / source))) if glob.has_magic(source) else [str(root / source)]
        if not matches or not all(Path(m).exists() for m in matches):
            raise HarborTaskError(f"{at}: COPY source {source!r} is not in environment/")
        for match in map(Path, matches):
            if not match.resolve().is_relative_to(root):
                raise HarborTaskError(f"{at}: COPY source {source!r} is outside environment/")
            if match.is_dir():  # a folder's contents go into the destination
                for f in sorted(p for p in match.rglob("*") if p.is_file()):
                    out[posixpath.join(dest, f.relative_to(match).as_posix())] = _text(f, at)
            else:
                target = posixpath.join(dest, match.name) if into or len(matches) > 1 else dest
                out[posixpath.normpath(target)] = _text(match, at)
    return {posixpath.normpath(k): v for k, v in out.items()}


def _text(path: Path, at: str) -> str:
    try:
        return path.read_bytes().decode("utf-8")  # as stored: CRLF line ends stay
    except UnicodeDecodeError:
        raise HarborTaskError(f"{at}: {path.name} is not UTF-8 text (the workspace holds text files only)") from None
