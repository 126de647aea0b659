"""Harbor task directories as agent tasks: the `harbor:<dir>` suite (and `harbor`, the shipped ones).

    tasks = load_harbor_tasks("path/to/tasks")     # a folder of task folders, or one task folder

A Harbor task (harbor 0.25, the Terminal-Bench 2 format) is a folder:

    instruction.md          the task text the agent is given
    task.toml               metadata and limits (`TaskToml`: strict, an unknown key is an error)
    environment/Dockerfile  the image: here FROM + WORKDIR + COPY of its own files only
    tests/test.sh           the verifier: runs after the agent, writes /logs/verifier/reward.txt
    solution/solve.sh       the oracle

Each becomes an `AgentTask`: the instruction is the prompt, the files the Dockerfile copies
under its WORKDIR are the starting /work (`harbor_dockerfile.py`), the goal is `harbor_tests`
(the tests folder as shipped, run by `harbor_judge.py` after the agent; its reward is the
episode's, partial credit kept) and the oracle policy runs solve.sh as one `shell` call.

The sandbox has no /app, /tests, /solution or /logs (its root is read-only; /work persists,
/tmp is fresh in every call), so Harbor's absolute paths are rewritten in every text file of
the task when it loads (`map_paths`): the image's WORKDIR -> /work, /tests, /solution and
/logs -> /tmp/harbor/... . A path a script builds at run time from pieces is not rewritten.
"""

from __future__ import annotations

import base64
import re
import tomllib
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from tempering.agents.harbor_dockerfile import HarborTaskError, workspace_files
from tempering.agents.harbor_judge import HARBOR_ROOTS
from tempering.agents.tasks import TIERS, AgentTask

PREFIX = "harbor:"
SHIPPED = "harbor"
"""The suite name of the tasks shipped with Tempering (`shipped_task_dirs`)."""
SHIPPED_DIR = Path(__file__).resolve().parents[3] / "examples" / "harbor"
"""The shipped tasks live in the source tree (`examples/harbor`, written by
`examples/agent/make_harbor_tasks.py`): they are another project's format, kept out of the package."""
TOOLS = ["shell", "python", "read_file", "write_file", "edit_file", "submit"]
MAX_STEPS = 10
DIFFICULTY_TIERS = {"easy": 1, "medium": 2, "hard": 3}


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid")


class VerifierSection(_Section):
    timeout_sec: float = Field(default=600.0, gt=0)
    """Bounds tests/test.sh (and within the sandbox's per-call wall limit)."""
    env: dict[str, str] = Field(default_factory=dict)
    """Environment variables of the test run."""


class AgentSection(_Section):
    timeout_sec: float | None = Field(default=None, gt=0)
    """Read, not enforced: an episode is bounded by its turns and the sandbox's per-call limits."""


class EnvironmentSection(_Section):
    build_timeout_sec: float | None = None
    os: Literal["linux"] = "linux"
    cpus: float | None = None
    memory_mb: int | None = None
    storage_mb: int | None = None
    memory: str | None = None
    storage: str | None = None
    """cpus..storage: read, not enforced (the sandbox's limits apply)."""
    network_mode: Literal["no-network", "public"] | None = None
    allow_internet: bool | None = None
    """Read; the sandbox has no network whatever they say."""
    workdir: str | None = None
    """Harbor: overrides the Dockerfile's WORKDIR; here it must equal it (the WORKDIR becomes /work)."""


class SolutionSection(_Section):
    env: dict[str, str] = Field(default_factory=dict)
    """Environment variables of the oracle's run."""


class PackageSection(_Section):
    name: str
    version: str | None = None
    description: str = ""
    authors: list[dict[str, Any]] = Field(default_factory=list)
    keywords: list[str] = Field(default_factory=list)


class TaskToml(_Section):
    """A Harbor task.toml, strictly: the keys of harbor 0.25's `TaskConfig` this machine
    reproduces or can safely read; `[metadata]` is free-form, as Harbor's is."""

    version: str | None = None
    schema_version: str | None = None
    source: str | None = None
    task: PackageSection | None = None
    metadata: dict[str, Any] = Field(default_factory=dict)
    """Free-form; Tempering reads `split` ("train"/"heldout", default heldout), `tier` (1-3; else
    from `difficulty` easy/medium/hard, default 1), `category` (the task's family) and `max_steps`."""
    verifier: VerifierSection = VerifierSection()
    agent: AgentSection = AgentSection()
    environment: EnvironmentSection = EnvironmentSection()
    solution: SolutionSection = SolutionSection()


UNSUPPORTED = {
    "environment.docker_image": "a prebuilt image cannot be reproduced without Docker",
    "environment.gpus": "no GPUs in the sandbox",
    "environment.gpu_types": "no GPUs in the sandbox",
    "environment.tpu": "no TPUs in the sandbox",
    "environment.mcp_servers": "MCP servers are not run here",
    "environment.env": "host environment variables are not passed to the sandbox",
    "environment.healthcheck": "no services run beside the episode",
    "environment.skills_dir": "agent skills are not installed here",
    "environment.allowed_hosts": "the sandbox has no network",
    "verifier.environment": "a separate verifier container is not reproduced here",
    "verifier.environment_mode": "the verifier runs in the episode's sandbox",
    "verifier.collect": "no services run beside the episode",
    "verifier.user": "every run is the sandbox's own user",
    "verifier.network_mode": "the sandbox has no network",
    "agent.user": "every run is the sandbox's own user",
    "agent.network_mode": "the sandbox has no network",
    "steps": "multi-step tasks are not supported",
    "multi_step_reward_strategy": "multi-step tasks are not supported",
    "artifacts": "artifacts are not collected",
}
"""Keys of Harbor's task.toml this machine cannot honour -> why (refused, never ignored)."""


def parse_task_toml(path: Path, where: str) -> TaskToml:
    """The strict `TaskToml` of `path`. Raises HarborTaskError (one line naming `where` and the key)."""
    try:
        data = tomllib.loads(path.read_text())
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise HarborTaskError(f"{where}: task.toml does not parse: {exc}") from None
    for dotted, why in UNSUPPORTED.items():
        section, _, key = dotted.rpartition(".")
        table = data.get(section, {}) if section else data
        if isinstance(table, dict) and key in table:
            raise HarborTaskError(f"{where}: task.toml: {dotted}: {why}; run it with Harbor under Docker instead")
    try:
        return TaskToml.model_validate(data)
    except ValidationError as exc:
        e = exc.errors()[0]
        key = ".".join(str(p) for p in e["loc"])
        what = "unknown key" if e["type"] == "extra_forbidden" else e["msg"]
        raise HarborTaskError(f"{where}: task.toml: {key}: {what}") from None


def is_harbor_suite(name: str) -> bool:
    return name == SHIPPED or name.startswith(PREFIX)


def load_harbor_suite(name: str) -> list[AgentTask]:
    """`harbor` (the shipped tasks) or `harbor:<dir>`."""
    return load_harbor_tasks(_shipped() if name == SHIPPED else name.removeprefix(PREFIX), suite=SHIPPED)


def shipped_task_dirs() -> list[Path]:
    """The Harbor task folders shipped with Tempering (the `harbor` suite)."""
    return task_dirs(_shipped())


def _shipped() -> Path:
    if not SHIPPED_DIR.is_dir():
        raise HarborTaskError(f"the `harbor` suite needs {SHIPPED_DIR}: run from a Tempering checkout")
    return SHIPPED_DIR


def task_dirs(path: str | Path) -> list[Path]:
    """One task folder (it holds task.toml), or the task folders in `path` (sorted by name): each
    sub-folder holding any of task.toml, instruction.md, tests/. Raises HarborTaskError when none."""
    path = Path(path).expanduser()
    if not path.is_dir():
        raise HarborTaskError(f"harbor: {path} is not a directory")
    if (path / "task.toml").exists():
        return [path]
    found = [
        d
        for d in sorted(path.iterdir())
        if d.is_dir() and any((d / n).exists() for n in ("task.toml", "instruction.md", "tests"))
    ]
    if not found:
        raise HarborTaskError(f"harbor: {path} holds no task folder (none with a task.toml)")
    return found


def load_harbor_tasks(path: str | Path, suite: str = SHIPPED) -> list[AgentTask]:
    """Every Harbor task under `path` (see `task_dirs`) as an `AgentTask` of suite `suite`.

    Raises:
        HarborTaskError: one line naming the task folder: a missing instruction.md, task.toml or
            tests/test.sh, an unknown or unsupported task.toml key, a Dockerfile this machine
            cannot reproduce (`harbor_dockerfile`), a file that is not UTF-8 text.
    """
    return [load_harbor_task(d, suite) for d in task_dirs(path)]


def load_harbor_task(task_dir: Path, suite: str = SHIPPED) -> AgentTask:
    where = f"harbor task {task_dir.name} ({task_dir})"
    for need in ("instruction.md", "task.toml", "tests/test.sh"):
        if not (task_dir / need).is_file():
            raise HarborTaskError(f"{where}: {need} is missing")
    config = parse_task_toml(task_dir / "task.toml", where)
    workdir, workspace = workspace_files(task_dir / "environment", where)
    if config.environment.workdir not in (None, workdir):
        raise HarborTaskError(
            f"{where}: task.toml: environment.workdir {config.environment.workdir} differs from the Dockerfile's "
            f"WORKDIR {workdir} (only the WORKDIR becomes /work here)"
        )

    def mapped(text: str) -> str:
        return map_paths(text, workdir)

    tests = {k: mapped(v) for k, v in _folder(task_dir / "tests", where).items()}
    solution = {k: mapped(v) for k, v in _folder(task_dir / "solution", where).items()}
    meta = config.metadata
    row = {
        "id": task_dir.name,
        "env": suite,
        "prompt": mapped(_text(task_dir / "instruction.md", task_dir, where)),
        "tools": TOOLS,
        "tier": _tier(meta, where),
        "split": meta.get("split", "heldout"),
        "family": meta.get("category"),
        "files": {k: mapped(v) for k, v in workspace.items()},
        "goal": {
            "type": "harbor_tests",
            "tests": tests,
            "script": "test.sh",
            "timeout_s": config.verifier.timeout_sec,
            "env": config.verifier.env,
        },
        "max_steps": meta.get("max_steps", MAX_STEPS),
        "solution": oracle_turns(solution, config.solution.env),
    }
    try:
        return AgentTask.model_validate(row)
    except ValidationError as exc:
        e = exc.errors()[0]
        raise HarborTaskError(f"{where}: {'.'.join(map(str, e['loc'])) or 'task'}: {e['msg']}") from None


_BEFORE = r"(?<![\w.~$/})\]])"
_AFTER = r"(?=[/\s\"'`;:)|&<>,\]}]|\.(?:\s|$)|$)"


def map_paths(text: str, workdir: str) -> str:
    """`text` with Harbor's absolute folders moved to where they are in the sandbox: the image's
    `workdir` -> /work, /tests, /solution, /logs -> under /tmp/harbor (`HARBOR_ROOTS`). Only
    whole path starts are rewritten (`/app/x` and `"/app"`, not `/data/app` or `/apps`)."""
    roots = {**HARBOR_ROOTS, workdir: "/work"}
    alternatives = "|".join(re.escape(r) for r in sorted(roots, key=len, reverse=True))
    pattern = re.compile(f"{_BEFORE}(?:{alternatives}){_AFTER}", re.MULTILINE)
    return pattern.sub(lambda m: roots[m.group(0)], text)


def oracle_turns(solution: dict[str, str], env: dict[str, str]) -> list[list[dict[str, Any]]]:
    """The oracle: solve.sh run from /work as one `shell` call, then `submit`. A lone bash
    script is the call's text itself (readable expert data); otherwise the call first writes
    the solution folder to /tmp/harbor/solution (base64, exact) and runs solve.sh from there."""
    if "solve.sh" not in solution:
        return []
    exports = "".join(f"export {k}={_quote(v)}\n" for k, v in env.items())
    script = solution["solve.sh"]
    first = script.split("\n", 1)[0]
    if len(solution) == 1 and (not first.startswith("#!") or first.rstrip().endswith(("/bash", "/sh", " bash", " sh"))):
        cmd = exports + script
    else:
        home = HARBOR_ROOTS["/solution"]
        lines = [f"mkdir -p {home}"]
        for rel, text in sorted(solution.items()):
            data = base64.b64encode(text.encode()).decode()
            lines.append(f'mkdir -p "$(dirname {home}/{rel})" && echo {data} | base64 -d > {home}/{rel}')
        lines.append(f"chmod +x {home}/solve.sh")
        cmd = exports + "\n".join(lines) + f"\n{home}/solve.sh\n"
    return [
        [{"name": "shell", "arguments": {"cmd": cmd}}],
        [{"name": "submit", "arguments": {"answer": "done"}}],
    ]


def _quote(value: str) -> str:
    return "'" + value.replace("'", "'\\''") + "'"


def _tier(meta: dict[str, Any], where: str) -> int:
    tier = meta.get("tier", DIFFICULTY_TIERS.get(str(meta.get("difficulty", "")).lower(), 1))
    if tier not in TIERS:
        raise HarborTaskError(f"{where}: task.toml: metadata.tier {tier!r} is not one of {TIERS}")
    return tier


def _folder(folder: Path, where: str) -> dict[str, str]:
    """Relative path -> text of every file under `folder` ({} when there is none)."""
    if not folder.is_dir():
        return {}
    return {
        p.relative_to(folder).as_posix(): _text(p, folder.parent, where)
        for p in sorted(folder.rglob("*"))
        if p.is_file()
    }


def _text(path: Path, task_dir: Path, where: str) -> str:
    """A task file's text as stored (CRLF line ends stay). Raises HarborTaskError when it is not UTF-8."""
    try:
        return path.read_bytes().decode("utf-8")
    except UnicodeDecodeError:
        raise HarborTaskError(f"{where}: {path.relative_to(task_dir)} is not UTF-8 text") from None
