"""The `reasoning_gym` verifier: a reasoning-gym dataset's own `score_answer` on the extracted answer, in the sandbox.

Answer extraction from a chat completion:
  1. the content of the last `<answer>...</answer>` tag pair, stripped (reasoning-gym's own
     convention, which the task prompt asks for);
  2. else the shared final-answer rule of `tempering.verifiers.answers.extract_final_answer`
     (last `\\boxed{}`, else the text after the last "answer is"/"answer:", else the whole
     completion, stripped).
The dataset then scores that string against the entry stored in the spec (see
`tempering.sources.reasoning_gym`); many datasets give partial credit, so `value` may lie
strictly between 0 and 1. `components.correct` is 1 only for a full score.

Why the sandbox: several datasets' scorers `eval` the answer or give it to `sympy.parse_expr`
(countdown, spiral_matrix, string_insertion, polynomial_multiplication, n_queens, ...), so
the answer is code. Every dataset is scored the same way, with no allow-list to keep in
step with reasoning-gym: `reasoning_gym_judge.py` runs in the context's sandbox, in a fresh
process per answer, with the host's library folders bound read-only (`VerifierContext`), and
nothing of the training process in reach. What the answer can and cannot do there is in
that file's docstring; here it becomes:

  * value 0, flag `cheat:code_execution`: the answer started a program, opened a socket,
    loaded a C library or wrote a file (the judge's tripwire);
  * value 0, flag `sandbox:timeout` / `sandbox:memory_limit` / `sandbox:output_limit`:
    the scoring ran past `timeout_s` (default `DEADLINE_S`) or its memory;
  * value 0, flag `no_verdict` or `cheat:forged_verdict`: the answer ended the scorer
    before it reported, or printed a report of its own (any line after the judge's marker
    that is not its report, however malformed or deeply nested, is a forged one);
  * value 0, flag `scorer_raised:<Exception>`: the dataset's scorer raised on the answer
    (some do not catch a malformed one); the oracle answers of every dataset score cleanly;
  * `VerifierError` (not the model's fault, the sample is skipped): the sandbox failed, or
    reasoning-gym could not be loaded there (the scorer never reached the answer).
"""

from __future__ import annotations

import json
import re
import sys
import threading
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tempering.errors import UserError
from tempering.types import Reward
from tempering.verifiers.answers import extract_final_answer
from tempering.verifiers.base import VerifierError, deadline_of, register
from tempering.verifiers.context import VerifierContext, library_binds
from tempering.verifiers.reasoning_gym_judge import MAGIC, TRIPWIRE_EXIT

if TYPE_CHECKING:
    from tempering.sandbox.base import ExecResult

_ANSWER_TAG = re.compile(r"<answer>(.*?)</answer>", re.DOTALL)
JUDGE_FILE, PAYLOAD_FILE = "reasoning_gym_judge.py", "payload.json"
DEADLINE_S = 10.0
"""Default seconds for one scoring in the sandbox, library import included (spec `timeout_s`)."""
MiB = 1024 * 1024
_IMPORT_LOCK = threading.Lock()


def extract_tagged_answer(completion: str) -> str:
    """The answer of a completion, by the rule in the module docstring."""
    tagged = _ANSWER_TAG.findall(completion)
    return tagged[-1].strip() if tagged else extract_final_answer(completion)


@register("reasoning_gym")
def score_reasoning_gym(spec: dict[str, Any], completion: str, ctx: VerifierContext) -> Reward:
    missing = [k for k in ("dataset", "seed", "size", "config", "entry") if k not in spec]
    if missing:
        raise UserError(f"reasoning_gym verifier spec is missing {missing}: {spec}")
    answer = extract_tagged_answer(completion)
    result = run_judge(spec, answer, ctx)
    value, flags = reading(result)
    return Reward(
        value=value,
        components={"correct": 1.0 if value >= 1.0 and not flags else 0.0},
        flags=flags,
        detail=f"extracted: {answer!r}",
    )


def run_judge(spec: dict[str, Any], answer: str, ctx: VerifierContext) -> ExecResult:
    """Score `answer` with the spec's dataset in the sandbox; the raw run."""
    from tempering.sandbox import Limits

    deadline = deadline_of(spec, DEADLINE_S)
    payload = {
        "python": list(sys.version_info[:2]),
        "paths": [inside for _, inside in library_binds()],
        "module": dataset_module(spec["dataset"]),
        "dataset": spec["dataset"],
        "seed": spec["seed"],
        "size": spec["size"],
        "config": spec["config"],
        "answer": answer,
        "entry": spec["entry"],
    }
    data = json.dumps(payload)
    limits = Limits(
        wall_s=deadline,
        cpu_s=deadline,
        memory_bytes=768 * MiB,
        processes=16,
        output_bytes=64 * 1024,
        scratch_bytes=max(8 * MiB, 4 * len(data)),
    )
    return ctx.sandbox().exec(
        ["python3", "-I", "-S", JUDGE_FILE, PAYLOAD_FILE],
        files={JUDGE_FILE: judge_source(), PAYLOAD_FILE: data},
        limits=limits,
    )


def reading(result: ExecResult) -> tuple[float, list[str]]:
    """(value, flags) of a judge run, by the table in the module docstring.

    Raises:
        VerifierError: the sandbox failed, or the scorer never got to the answer.
    """
    if result.status == "sandbox_error":
        raise VerifierError(f"sandbox failed while scoring reasoning-gym (not the model's fault): {result.error}")
    if result.status == "nonzero_exit" and result.exit_code == TRIPWIRE_EXIT:
        return 0.0, ["cheat:code_execution"]
    reports = [report_of(line) for line in result.stdout.splitlines() if line.startswith(MAGIC + " ")]
    docs = [d for d in reports if d is not None]
    if "ready" not in [d.get("stage") for d in docs]:
        if result.status != "nonzero_exit":  # the answer never ran: limits hit while loading the library
            raise VerifierError(f"reasoning-gym did not load in the sandbox ({result.status}): {result.error}")
        raise VerifierError(f"reasoning-gym could not be loaded in the sandbox: {result.stderr.strip()[-400:]}")
    if result.status != "ok":
        return 0.0, [f"sandbox:{result.status}"]
    if len(docs) < len(reports) or len(docs) > 2:  # the judge prints two reports, each a JSON object
        return 0.0, ["cheat:forged_verdict"]
    verdicts = [d for d in docs if d.get("stage") != "ready"]
    if len(verdicts) != 1:
        return 0.0, ["no_verdict"]
    if "error" in verdicts[0]:  # scorers that do not catch a malformed answer (prime_factorization's int())
        return 0.0, [f"scorer_raised:{str(verdicts[0]['error']).split(':', 1)[0]}"]
    value = verdicts[0].get("score")
    if not isinstance(value, (int, float)) or not 0.0 <= value <= 1.0:
        return 0.0, ["cheat:forged_verdict"]
    return float(value), []


def report_of(line: str) -> dict[str, Any] | None:
    """The JSON object after the marker, or None (not JSON, not an object, or nested past the
    parser's depth limit: the answer can print anything after the marker)."""
    from pydantic_core import from_json

    try:
        doc = from_json(line.split(" ", 1)[1])  # depth-limited: `[` * 5000 is a ValueError, not a RecursionError
    except ValueError:
        return None
    return doc if isinstance(doc, dict) else None


@lru_cache(maxsize=256)
def dataset_module(name: str) -> str:
    """The module that defines reasoning-gym's dataset `name` (the sandbox imports only it).

    Raises:
        ValueError: no such dataset.
    """
    # The package first: its __init__ registers the datasets. `from reasoning_gym.factory import ...`
    # alone returns the registry half filled while another scoring thread is still running that
    # __init__ (a parent package being initialised is not waited for), and every dataset not yet
    # registered read as unknown: a verifier error (seen once in stratify: 45 of 48 samples). One thread
    # imports, the others wait.
    with _IMPORT_LOCK:
        import reasoning_gym  # noqa: F401
        from reasoning_gym.factory import DATASETS

    if name not in DATASETS:
        raise UserError(f"unknown reasoning-gym dataset {name!r}")
    return DATASETS[name][0].__module__


@lru_cache(maxsize=1)
def judge_source() -> str:
    return (Path(__file__).parent / JUDGE_FILE).read_text()
