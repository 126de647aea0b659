"""The `code` verifier: untrusted code judged in the sandbox, scored by the share of asserts it passes.

    {"type": "code", "entry_point": "add", "prompt": "def add(a, b):\\n", "tests": "def check(candidate): ...",
     "heldout_tests": "...", "call_timeout_s": 3.0, "budget_s": 10.0}

How a completion is scored:
  1. program = task prompt + completion (a completion that defines the entry point at top
     level, in a ```python block or not, comes after the prompt instead; see
     `code_static.assemble_program`). It does not parse: value 0, flag `syntax_error`.
  2. static cheat checks on the completion's part (`code_static.cheat_flags`): any
     `cheat:*` flag gives value 0 and the program is not run, except the suspicions in
     `CONFIRMED_BY_TESTS` (`cheat:hardcoded_examples`): the program runs, and the flag gives
     0 only if some test (visible or held-out) fails. A correct solution that also keeps a
     table of the docstring examples scores like any correct solution.
  3. the judge (`code_judge.py`) runs the tests in the sandbox against the candidate in a
     separate process; value = asserts passed / asserts in the tests. An assert counts as
     passed when it ran and held every time (asserts in loops are one each); `assert True`
     does not count. `heldout_tests` are scored the same way into the component
     `heldout_pass_fraction` and never touch `value`.

Flags from the run (informational; they do not change `value`): `call_timeout`, `call_died`,
`call_bad_reply`, `call_reply_too_large` (a reply over `MAX_REPLY_ELEMENTS` values, or too slow
to decode before the call's deadline), `load_error`, `load_timeout`, `load_died`, `budget_exhausted`,
`spawn_failed`, `raised:StopIteration` / `raised:SystemExit` (a control-flow exception; it
fails the call and is never re-raised into the tests), `sandbox:<status>` when the run did not
end `ok` (e.g. `sandbox:memory_limit` after the candidate was OOM-killed), `no_verdict` when no
signed verdict came back (the candidate killed the judge, or ran the sandbox out of time or
output: value 0). `cheat:forged_verdict` (a verdict-looking line with a bad signature) and
`cheat:comparison_override` (the entry point returned an object that says it equals anything,
which static checks missed) give 0.

Not the model's fault, so raised instead of scored (the RL loop must skip the sample, not
punish it, and should count these): `VerifierError` when the sandbox itself failed
(`sandbox_error`), the task's own tests are broken, or the judge crashed;
`SandboxUnavailable` when no sandbox can run here.
"""

from __future__ import annotations

import hmac
import json
import secrets
from dataclasses import dataclass
from functools import lru_cache
from hashlib import sha256
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from tempering.errors import UserError
from tempering.types import Reward
from tempering.verifiers.base import VerifierError, register
from tempering.verifiers.code_judge import VERDICT_MAGIC, clean_text
from tempering.verifiers.code_static import (
    CONFIRMED_BY_TESTS,
    SyntaxProblem,
    assemble_program,
    cheat_flags,
    parse_program,
)
from tempering.verifiers.context import VerifierContext

if TYPE_CHECKING:
    from tempering.sandbox.base import Sandbox

JUDGE_FILE = "judge.py"
PAYLOAD_FILE = "payload.json"
MiB = 1024 * 1024


class CodeSpec(BaseModel):
    """The `code` verifier spec; unknown keys are refused."""

    model_config = ConfigDict(extra="forbid")
    type: str = "code"
    entry_point: str = Field(min_length=1)
    """Name of the function under test; the tests call it as `candidate` (or by this name)."""
    tests: str = Field(min_length=1)
    """`def check(candidate): assert ...` (HumanEval shape) or top-level asserts on `entry_point`."""
    prompt: str = ""
    """Trusted code prefix (imports, signature, helpers); prepended to the completion and also run
    in the judge, so tests may call its helpers (HumanEval/32 calls `poly`)."""
    heldout_tests: str | None = None
    """Scored into `heldout_pass_fraction` only; never part of the reward value."""
    reference: str | None = None
    """Trusted reference solution (a completion of `prompt`, run in the judge): inside `check`, the
    entry point's own name calls it, so tests that compute expected values by name (HumanEval/33)
    never compare the candidate with itself. Without it, `check` calling that name is a broken task."""
    call_timeout_s: float = Field(default=3.0, gt=0)
    """Wall-clock limit for loading the program and for each call of the entry point."""
    budget_s: float = Field(default=10.0, gt=0)
    """Wall-clock limit for all loads and calls of one scoring together (visible and held-out tests)."""
    memory_mb: int = Field(default=256, ge=32)
    """Memory of the whole run (judge + candidate processes)."""

    @field_validator("entry_point")
    @classmethod
    def _identifier(cls, value: str) -> str:
        if not value.isidentifier():
            raise ValueError(f"entry_point must be a Python identifier, got {value!r}")
        return value


@dataclass
class JudgeRun:
    """What came back from one sandboxed judge run."""

    status: str
    verdict: dict[str, Any] | None
    forged_lines: int = 0
    stderr: str = ""
    wall_s: float = 0.0


@lru_cache(maxsize=1)
def judge_source() -> str:
    return (Path(__file__).parent / "code_judge.py").read_text()


def run_judge(spec: CodeSpec, program: str, sandbox: Sandbox) -> JudgeRun:
    """Run the judge on `program` in `sandbox` and check the verdict's signature.

    Raises:
        VerifierError: the sandbox failed, or the task's tests are broken.
    """
    from tempering.sandbox import Limits

    key, nonce = secrets.token_bytes(32), secrets.token_hex(16)
    payload = {
        "key": key.hex(),
        "nonce": nonce,
        "program": program,
        "entry_point": spec.entry_point,
        "prompt": spec.prompt,
        "tests": spec.tests,
        "heldout_tests": spec.heldout_tests,
        "reference": spec.reference,
        "call_s": spec.call_timeout_s,
        "budget_s": spec.budget_s,
    }
    data = json.dumps(payload)
    limits = Limits(
        wall_s=spec.budget_s + 3,
        cpu_s=spec.budget_s + 3,
        memory_bytes=spec.memory_mb * MiB,
        processes=64,
        output_bytes=64 * 1024,
        scratch_bytes=max(8 * MiB, 4 * len(data)),
    )
    result = sandbox.exec(
        ["python3", "-I", "-S", JUDGE_FILE, "judge", PAYLOAD_FILE],
        files={JUDGE_FILE: judge_source(), PAYLOAD_FILE: data},
        limits=limits,
    )
    if result.status == "sandbox_error":
        raise VerifierError(f"sandbox failed while judging code (not the model's fault): {result.error}")
    verdict, forged = parse_verdict(result.stdout, key, nonce)
    if verdict is not None and verdict.get("harness_error"):
        raise VerifierError(f"the task's tests are broken (not the model's fault): {verdict['harness_error']}")
    if verdict is not None and verdict.get("judge_error"):
        raise VerifierError(f"the code judge crashed (not the model's fault):\n{verdict['judge_error']}")
    return JudgeRun(result.status, verdict, forged, result.stderr[-2000:], result.wall_s)


def parse_verdict(stdout: str, key: bytes, nonce: str) -> tuple[dict[str, Any] | None, int]:
    """(the verdict signed with `key` for this `nonce`, or None; how many verdict-like lines were forged)."""
    verdict, forged = None, 0
    for line in stdout.splitlines():
        if VERDICT_MAGIC not in line:
            continue
        parts = line.split(" ", 2)
        if len(parts) == 3 and parts[0] == VERDICT_MAGIC:
            good = hmac.new(key, parts[2].encode(), sha256).hexdigest()
            if hmac.compare_digest(good, parts[1]):
                doc = json.loads(parts[2])
                if doc.get("nonce") == nonce and verdict is None:
                    verdict = doc
                    continue
        forged += 1
    return verdict, forged


def reward_from_run(run: JudgeRun) -> Reward:
    """The Reward for a judge run: value = pass fraction of the visible tests (0 on any cheat flag)."""
    flags = []
    if run.status != "ok":
        flags.append(f"sandbox:{run.status}")
    if run.forged_lines:
        flags.append("cheat:forged_verdict")
    if run.verdict is None:
        flags.append("no_verdict")
        detail = f"no signed verdict (sandbox status {run.status}): {run.stderr[-300:]}".strip()
        return Reward(value=0.0, components={"pass_fraction": 0.0}, flags=flags, detail=clean_text(detail, 400))
    v = run.verdict
    flags += sorted(v.get("events", {}))
    if not v.get("all_killed", True):
        flags.append("processes_survived")
    passed, total = v["tests"]["passed"], v["tests"]["sites"]
    value = 0.0 if any(f.startswith("cheat:") for f in flags) else passed / total
    components = {"pass_fraction": value, "asserts_passed": float(passed), "asserts_total": float(total)}
    if "heldout" in v:
        components["heldout_pass_fraction"] = v["heldout"]["passed"] / v["heldout"]["sites"]
    detail = f"{passed}/{total} asserts passed"
    if v.get("load_failure"):
        detail += f"; did not load: {v['load_failure']}"
    elif v.get("first_error"):
        detail += f"; first failed call: {v['first_error']}"
    return Reward(
        value=value, components=components, flags=[clean_text(f, 200) for f in flags], detail=clean_text(detail, 1200)
    )


def _code_check(spec: dict[str, Any]) -> None:
    try:
        CodeSpec.model_validate(spec)
    except ValidationError as exc:
        first = exc.errors()[0]
        raise UserError(f"{'.'.join(map(str, first['loc']))}: {first['msg']}") from None


@register("code", check=_code_check)
def score_code(spec: dict[str, Any], completion: str, ctx: VerifierContext) -> Reward:
    """Static checks, then the sandboxed judge; see the module docstring."""
    parsed = CodeSpec.model_validate(spec)
    program = assemble_program(parsed.prompt, completion, parsed.entry_point)
    try:
        tree = parse_program(program)
    except SyntaxProblem as exc:
        return Reward(value=0.0, components={"pass_fraction": 0.0}, flags=["syntax_error"], detail=str(exc))
    flags = cheat_flags(tree, program, parsed.prompt, parsed.entry_point)
    if set(flags) - CONFIRMED_BY_TESTS:
        return Reward(
            value=0.0,
            components={"pass_fraction": 0.0},
            flags=flags,
            detail="not run: static cheat checks flagged the completion",
        )
    reward = reward_from_run(run_judge(parsed, program.source, ctx.sandbox()))
    return confirm_suspicions(reward, flags) if flags else reward


def confirm_suspicions(reward: Reward, suspicions: list[str]) -> Reward:
    """`reward` as it is when the completion passed every test (visible and held-out): literals
    of the visible examples in correct code are no cheat. Otherwise 0 with the suspicions as
    `cheat:` flags: a table of the examples with a wrong answer everywhere else."""
    held = reward.components.get("heldout_pass_fraction", 1.0)
    if reward.value == 1.0 and held == 1.0:
        return reward
    return reward.model_copy(
        update={
            "value": 0.0,
            "components": {**reward.components, "pass_fraction": 0.0},
            "flags": [*reward.flags, *suspicions],
            "detail": f"{reward.detail}; the code spells out the visible examples and fails other tests",
        }
    )
