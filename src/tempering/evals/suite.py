"""Eval suites: a named set of tasks, prompt templates, sampling settings and metrics, from YAML.

    name: arithmetic-add
    track: reasoning
    tasks: {source: "builtin:arithmetic", ops: "+", split: heldout, n: 100}
    templates: ["{prompt}", "Question: {prompt}"]     # the first is the canonical prompt
    sampling: {temperature: 0.7, max_new_tokens: 16, n: 4}
    metrics: [accuracy, mean_reward, "pass@4"]         # the first is the primary metric
    seeds: 1
    private: false
    plugins: [my_judges]                                # modules that register the tasks' own verifiers

Where suites are found (`load_suite(name)`, `registered_suites()`): the built-in suites
shipped in `tempering/evals/suites/*.yaml`, then every `*.yaml` in the user suite
directories: `$TEMPERING_SUITES` (directories separated by the OS path separator), else
`~/.config/tempering/suites`. The private-overlap check before training
(`evals.leakage.check_private_overlap`) reads the private suites among these, so a private
suite is protected by putting its YAML there. A path to a YAML file also works anywhere a
name does.

The suite hash covers what decides the scores: the tasks' full content (prompt, verifier
spec, id), the templates, metrics, sampling temperature / top-p / token limit, the name,
track and privacy. It leaves out the number of samples and seeds, which change only how
precisely the same quantities are estimated, so runs with other seeds still pair.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import sys
from functools import cached_property
from importlib.resources import files
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from tempering.algorithms import import_plugins, is_module_name
from tempering.config import SamplingSettings, TaskSourceSettings
from tempering.errors import UserError
from tempering.sources.registry import is_source_name
from tempering.types import Task

METRIC = re.compile(r"accuracy|mean_reward|pass@(?P<k>[1-9]\d*)")
SUITES_ENV = "TEMPERING_SUITES"
PROMPT_SLOT = "{prompt}"
_UNHASHED_SAMPLING = {"n"}  # how many samples: precision of the estimate, not what is measured


class SuiteError(UserError):
    """A suite that cannot be found, parsed or validated; the message names the file."""


class SuiteTasks(TaskSourceSettings):
    """A task source of a suite: the training task sources, plus two source options."""

    style: Literal["completion", "chat"] | None = None
    """humaneval only: the raw function prompt ("completion") or a chat request for the whole function ("chat")."""

    @model_validator(mode="after")
    def _options_fit_source(self) -> SuiteTasks:
        if self.style is not None and self.source != "humaneval":
            raise ValueError(f"'style' applies to the humaneval source only, not {self.source!r}")
        return self

    def load(self) -> list[Task]:
        from tempering.sources.tasks import load_tasks

        if self.source == "humaneval" and self.style is not None:
            from tempering.sources.humaneval import humaneval_tasks

            return humaneval_tasks(self.style)[: self.n]
        return load_tasks(self)


class SuiteSampling(SamplingSettings):
    """A suite's sampling: the shared `SamplingSettings` (suite defaults) plus samples per task."""

    temperature: float = Field(default=0.7, ge=0)
    """Softmax temperature; 0 is greedy (then extra samples and seeds repeat the same answer)."""
    max_new_tokens: int = Field(default=64, ge=1)
    """Most tokens generated per completion; a completion cut here counts as truncated."""
    n: int = Field(default=1, ge=1)
    """Samples per task per seed (pass@k needs n * seeds >= k)."""


class Suite(BaseModel):
    """One eval suite; see the module docstring for the YAML shape."""

    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True)
    name: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
    """Suite name (letters, digits, '.', '_', '-'): how runs, caches and gates refer to it."""
    description: str = ""
    """One line on what the suite measures (shown in reports)."""
    track: str = "general"
    """Capability track (a gate rule may name it)."""
    tasks: list[SuiteTasks] = Field(min_length=1)
    """One task source or a list of them; task ids must be unique across them."""
    templates: list[str] = [PROMPT_SLOT]
    """Prompt templates applied to the (last) user message; the first is the canonical one,
    the others are paraphrase variants measured once (first seed) for the paraphrase spread."""
    sampling: SuiteSampling = SuiteSampling()
    """How answers are sampled (temperature, top-p, token limit, samples per task)."""
    metrics: list[str] = ["accuracy"]
    """`accuracy` (share of samples judged correct), `mean_reward` (mean verifier value),
    `pass@k` (unbiased, from all samples of a task). The first is the primary metric."""
    seeds: int = Field(default=1, ge=1)
    """Sampling seeds 0..seeds-1. Each seed is one full repeat of the evaluation: the spread
    over seeds and the stability over repeats come from them (a repeat with the same seed
    would be identical, so repeats and seeds are one setting)."""
    private: bool = False
    """Held out: no task text or id leaves the evaluation (results hold hashed ids), and
    training refuses data that overlaps it."""
    plugins: list[str] = []
    """Modules imported before the suite's tasks load (module names on the path, as
    `grpo.plugins`): each registers its own verifiers on import (`@register` of
    `tempering.verifiers`), which the tasks' `verifier.type` may then name. The suite hash covers
    their source files, so a changed verifier is not served from the cache (docs/verifiers.md)."""
    path: Path | None = Field(default=None, exclude=True)
    """The YAML file the suite came from (not part of its definition)."""
    given_tasks: list[Task] | None = Field(default=None, exclude=True)
    """Tasks built in memory (`Suite.of_tasks`); `tasks` then only records where they came from."""
    limit: int | None = Field(default=None, ge=1, exclude=True)
    """At most this many tasks per task source (`with_overrides(limit=)`); the hash covers it
    through the tasks, and results record it so a gate verdict can be re-checked."""

    @field_validator("plugins")
    @classmethod
    def _plugins(cls, v: list[str]) -> list[str]:
        bad = [m for m in v if not is_module_name(m)]
        if bad:
            raise ValueError(f"{bad[0]!r} is not a module name (dotted words on the path), not a path")
        return v

    @field_validator("tasks", mode="before")
    @classmethod
    def _one_or_many(cls, v: Any) -> Any:
        return [v] if isinstance(v, dict) else v

    @field_validator("templates")
    @classmethod
    def _templates(cls, v: list[str]) -> list[str]:
        if not v:
            raise ValueError("needs at least one template")
        bad = [t for t in v if t.count(PROMPT_SLOT) != 1]
        if bad:
            raise ValueError(f"each template needs exactly one {PROMPT_SLOT}: {bad[0]!r}")
        if len(set(v)) != len(v):
            raise ValueError("templates repeat")
        return v

    @field_validator("metrics")
    @classmethod
    def _metrics(cls, v: list[str]) -> list[str]:
        if not v:
            raise ValueError("needs at least one metric")
        bad = [m for m in v if not METRIC.fullmatch(m)]
        if bad:
            raise ValueError(f"unknown metric {bad[0]!r} (known: accuracy, mean_reward, pass@<k>)")
        if len(set(v)) != len(v):
            raise ValueError("metrics repeat")
        return v

    @property
    def primary_metric(self) -> str:
        return self.metrics[0]

    def model_copy(self, *, update: dict[str, Any] | None = None, deep: bool = False) -> Suite:
        """A validated copy with `update` applied; its tasks and hash are computed afresh."""
        return Suite.model_validate(
            {
                **self.model_dump(),
                "path": self.path,
                "given_tasks": self.given_tasks,
                "limit": self.limit,
                **(update or {}),
            }
        )

    @classmethod
    def of_tasks(cls, name: str, tasks: list[Task], origin: TaskSourceSettings, **fields: Any) -> Suite:
        """A suite over tasks already in memory (e.g. GRPO's held-out tasks with its reward applied).

        `origin` is the task source they were drawn from (recorded, not loaded again).
        """
        return cls.model_validate({"name": name, "tasks": [origin.model_dump()], "given_tasks": list(tasks), **fields})

    def with_overrides(
        self, *, seeds: int | None = None, samples: int | None = None, limit: int | None = None
    ) -> Suite:
        """A copy with another seed count, samples per task, or at most `limit` tasks per source."""
        update: dict[str, Any] = {}
        if seeds is not None:
            update["seeds"] = seeds
        if samples is not None:
            update["sampling"] = self.sampling.model_copy(update={"n": samples})
        if limit is not None:
            update["limit"] = min(limit, self.limit or limit)
            update["tasks"] = [t.model_copy(update={"n": min(t.n, limit)}) for t in self.tasks]
            if self.given_tasks is not None:
                update["given_tasks"] = self.given_tasks[:limit]
        return self.model_copy(update=update)

    def check_samples(self) -> None:
        """pass@k needs at least k samples per task over all seeds."""
        total = self.sampling.n * self.seeds
        for m in self.metrics:
            k = metric_k(m)
            if k is not None and k > total:
                raise SuiteError(
                    f"suite {self.name!r}: {m} needs >= {k} samples per task, "
                    f"got {self.sampling.n} x {self.seeds} seed(s) = {total}"
                )

    def computable_metrics(self) -> list[str]:
        """The metrics the drawn samples can give (a pass@k needs k samples per task), in order."""
        total = self.sampling.n * self.seeds
        return [m for m in self.metrics if (metric_k(m) or 1) <= total]

    @cached_property
    def task_list(self) -> list[Task]:
        """The suite's tasks, loaded once (file sources resolve next to the suite's YAML)."""
        try:  # the verifiers the tasks name must be registered before their specs are checked
            import_plugins(self.plugins)
        except UserError as exc:
            raise SuiteError(f"suite {self.name!r}: plugins: {exc}") from None
        tasks: list[Task] = list(self.given_tasks or [])
        for source in self.tasks if self.given_tasks is None else []:
            try:
                tasks += _relative_to(source, self.path).load()
            except ValueError as exc:  # a bad task row or verifier spec: file:line and the reason
                raise SuiteError(f"suite {self.name!r}: {exc}") from None
        seen: set[str] = set()
        for t in tasks:
            if t.id in seen:
                raise SuiteError(f"suite {self.name!r}: task id {t.id!r} appears twice")
            seen.add(t.id)
        if not tasks:
            raise SuiteError(f"suite {self.name!r} has no tasks")
        return tasks

    @cached_property
    def full_hash(self) -> str:
        """sha256 of the definition and the tasks' content (see the module docstring)."""
        definition = {
            "name": self.name,
            "track": self.track,
            "templates": self.templates,
            "metrics": self.metrics,
            "private": self.private,
            "sampling": self.sampling.model_dump(
                exclude=_UNHASHED_SAMPLING | ({k for k in ("stop_token_ids", "stop") if not getattr(self.sampling, k)})
            ),
        }
        tasks = self.task_list  # imports the plug-ins first
        if self.plugins:  # their code judges: a change is a new suite hash (no stale cached scores)
            definition["plugins"] = {m: _source_digest(m) for m in self.plugins}
        h = hashlib.sha256(json.dumps(definition, sort_keys=True).encode())
        for task in tasks:
            h.update(b"\0" + task.model_dump_json().encode())
        return h.hexdigest()

    @property
    def hash(self) -> str:
        return self.full_hash[:16]


def _source_digest(module: str) -> str:
    """sha256 of an imported module's source file (16 hex digits)."""
    path = getattr(sys.modules.get(module), "__file__", None)
    return hashlib.sha256(Path(path).read_bytes() if path else b"").hexdigest()[:16]


def metric_k(metric: str) -> int | None:
    """k of a `pass@k` metric, else None."""
    m = METRIC.fullmatch(metric)
    return int(m["k"]) if m and m["k"] else None


def render_messages(task: Task, template: str) -> list[dict[str, Any]]:
    """The task's chat messages with `template` applied to the last user message."""
    messages = task.chat()
    for m in reversed(messages):
        if m["role"] == "user":
            content = m.get("content") or ""
            if isinstance(content, list):  # text and image parts: the template applies to the text parts
                m["content"] = [
                    {**p, "text": template.replace(PROMPT_SLOT, p["text"])} if p.get("type") == "text" else p
                    for p in content
                ]
            else:
                m["content"] = template.replace(PROMPT_SLOT, content)
            return messages
    raise SuiteError(f"task {task.id!r} has no user message to apply a template to")


def _relative_to(source: SuiteTasks, suite_path: Path | None) -> SuiteTasks:
    if is_source_name(source.source) or suite_path is None or Path(source.source).is_absolute():
        return source
    candidate = suite_path.parent / source.source
    return source.model_copy(update={"source": str(candidate)}) if candidate.exists() else source


# ---------------------------------------------------------------------------- finding suites


def builtin_suite_dir() -> Path:
    return Path(str(files("tempering.evals").joinpath("suites")))


def user_suite_dirs() -> list[Path]:
    """`$TEMPERING_SUITES` (path-separator list), else ~/.config/tempering/suites."""
    env = os.environ.get(SUITES_ENV)
    if env is not None:
        return [Path(p).expanduser() for p in env.split(os.pathsep) if p]
    return [Path("~/.config/tempering/suites").expanduser()]


def suite_files() -> dict[str, Path]:
    """Suite name (the file stem) -> YAML file, built-in first, then user directories.

    Raises:
        SuiteError: when two files define the same name.
    """
    found: dict[str, Path] = {}
    for directory in [builtin_suite_dir(), *user_suite_dirs()]:
        if not directory.is_dir():
            continue
        for path in sorted(directory.glob("*.yaml")):
            if path.stem in found:
                raise SuiteError(f"suite {path.stem!r} is defined twice: {found[path.stem]} and {path}")
            found[path.stem] = path
    return found


def read_suite(path: str | Path) -> Suite:
    """Parse one suite YAML; errors name the file and each invalid field."""
    path = Path(path)
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except yaml.YAMLError as exc:
        raise SuiteError(f"{path}: invalid YAML: {exc}") from None
    if not isinstance(data, dict):
        raise SuiteError(f"{path}: a suite file must be a mapping")
    try:
        suite = Suite.model_validate({**data, "path": path})
    except ValidationError as exc:
        lines = [f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors()]
        raise SuiteError(f"{path}: invalid suite\n  " + "\n  ".join(lines)) from None
    in_suite_dir = path.parent.resolve() in {d.resolve() for d in [builtin_suite_dir(), *user_suite_dirs()]}
    if in_suite_dir and suite.name != path.stem:
        raise SuiteError(f"{path}: suite name {suite.name!r} must match the file name in a suite directory")
    return suite


def load_suite(ref: str | Path) -> Suite:
    """A suite by name (built-in or user directory) or by path to its YAML."""
    path = Path(ref)
    if path.suffix in (".yaml", ".yml") or path.exists():
        if not path.is_file():
            raise SuiteError(f"suite file not found: {path}")
        return read_suite(path)
    known = suite_files()
    if str(ref) not in known:
        raise SuiteError(f"no suite {str(ref)!r} (known: {', '.join(sorted(known))}; or give a YAML path)")
    return read_suite(known[str(ref)])


def registered_suites() -> list[Suite]:
    """Every suite in the built-in and user suite directories."""
    return [read_suite(p) for p in suite_files().values()]
