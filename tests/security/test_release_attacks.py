"""Attacks on promotion: a passing gate verdict releases only the weights it judged, on the
suites as they are now, through the real `temper` CLI.

The honest path first (eval, compare with a gate, promote), then what must be refused with a
one-line error: the judged checkpoint changed afterwards, another model (a never-evaluated
LoRA adapter) presented with someone else's passing verdict, and a suite edited since the
verdict. The pipeline's `release` stage goes through the same `promote_judged`, which a scan
of the tree keeps the only caller of `Releases.promote`.
"""

import ast
import json
import shutil
from pathlib import Path

import pytest
import yaml
from safetensors.torch import load_file, save_file
from tests.evals.conftest import env, recall_dir, recall_model, suite_file  # noqa: F401 (fixtures)
from typer.testing import CliRunner

import tempering
from tempering.cli import app
from tempering.runs.registry import Registry

SRC = Path(tempering.__file__).resolve().parent
RULES = ["no significant regression on reasoning", "recall.accuracy >= base - 0.05", "contamination == 0"]
runner = CliRunner()


@pytest.fixture(autouse=True)
def host_guard():
    """These attacks target the registry and model files, not the sandbox: no pool to check."""
    yield


def temper(*args):
    result = runner.invoke(app, [str(a) for a in args])
    if result.exception and not isinstance(result.exception, SystemExit):
        raise result.exception
    return result


def assert_refused(result, why: str) -> None:
    """A one-line error naming the reason, exit 2, no traceback (beside the dim line that says
    which registry the command read)."""
    assert result.exit_code == 2, result.output
    assert why in result.stderr and "Traceback" not in result.output, result.stderr
    lines = [line for line in result.stderr.strip().splitlines() if not line.startswith("registry: ")]
    assert len(lines) == 1, result.stderr


def nudge_weights(model: Path) -> None:
    """Move one weight tensor a little, as a few more training steps would."""
    weights = load_file(model / "model.safetensors")
    name = sorted(weights)[0]
    weights[name] = weights[name] + 1e-3
    save_file(weights, model / "model.safetensors", metadata={"format": "pt"})


@pytest.fixture
def judged(env, recall_dir, suite_file):  # noqa: F811 (pytest fixtures)
    """A candidate checkpoint (a copy of the recall model) evaluated with the base on 20 tasks
    and gated: (candidate dir, gate.json, registry)."""
    cand = env / "cand"
    shutil.copytree(recall_dir, cand)
    for model, out in ((recall_dir, "base-eval"), (cand, "cand-eval")):
        res = temper("eval", "run", suite_file, "--model", model, "--out", env / out, "--limit", 20, "--threads", 1)
        assert res.exit_code == 0, res.output
    (env / "gate.yaml").write_text(yaml.safe_dump({"rules": RULES}))
    res = temper(
        "eval", "compare", env / "base-eval", env / "cand-eval", "--gate", env / "gate.yaml", "--out", env / "cmp"
    )
    assert res.exit_code == 0 and "gate passed" in res.output, res.output
    Registry(env / "registry.sqlite").close()
    return cand, env / "cmp" / "gate.json", env / "registry.sqlite"


def test_an_evaluated_and_gated_checkpoint_is_promoted(judged):
    cand, gate, registry = judged
    verdict = json.loads(gate.read_text())
    assert verdict["passed"] and verdict["candidate"]["model_hash"] and verdict["candidate"]["suites"][0]["limit"] == 20
    res = temper("release", "promote", cand, "--gate", gate, "--registry", registry)
    assert res.exit_code == 0 and "released v1 as production" in res.stdout, res.output


def test_a_checkpoint_changed_after_its_gate_is_refused(judged):
    """As after two more training steps on the same checkpoint dir: its weights moved."""
    cand, gate, registry = judged
    nudge_weights(cand)
    assert_refused(
        temper("release", "promote", cand, "--gate", gate, "--registry", registry), "not the weights the gate judged"
    )
    assert "v1" not in temper("release", "ls", "--registry", registry).stdout


def test_a_never_evaluated_adapter_with_someone_elses_verdict_is_refused(judged, recall_dir):  # noqa: F811
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    _, gate, registry = judged
    adapter = gate.parent.parent / "dpo-adapter"
    base = AutoModelForCausalLM.from_pretrained(recall_dir)
    lora = get_peft_model(base, LoraConfig(r=2, target_modules=["q_proj", "v_proj"], init_lora_weights=False))
    lora.save_pretrained(adapter)
    config = json.loads((adapter / "adapter_config.json").read_text())
    (adapter / "adapter_config.json").write_text(json.dumps({**config, "base_model_name_or_path": str(recall_dir)}))
    assert_refused(
        temper("release", "promote", adapter, "--gate", gate, "--registry", registry), "not the weights the gate judged"
    )


def test_a_verdict_on_a_suite_edited_since_is_refused(judged, env):  # noqa: F811
    cand, gate, registry = judged
    tasks = env / "recall.jsonl"
    rows = [json.loads(line) for line in tasks.read_text().splitlines()]
    rows[0]["prompt"] += " again"  # one of the 20 tasks the gate judged
    tasks.write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert_refused(
        temper("release", "promote", cand, "--gate", gate, "--registry", registry),
        "suite 'recall' changed since the gate judged it",
    )


def test_a_verdict_without_the_judged_identity_is_refused(judged):
    """A gate.json as written before verdicts named their model: it promotes nothing."""
    cand, gate, registry = judged
    verdict = json.loads(gate.read_text())
    del verdict["candidate"]
    gate.write_text(json.dumps(verdict))
    assert_refused(
        temper("release", "promote", cand, "--gate", gate, "--registry", registry),
        "does not name the weights it judged",
    )


# --- one place: every release goes through evals/verdict.py ---

RELEASER = "evals/verdict.py"


def promote_calls(source: str) -> list[int]:
    """Lines of `source` that call a `.promote(...)` or `.decide(...)` method (the two ways to production)."""
    return [
        node.lineno
        for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr in ("promote", "decide")
    ]


def releases_outside_promote_judged(root: Path) -> list[str]:
    return [
        f"{path.relative_to(root)}:{line}"
        for path in sorted(root.rglob("*.py"))
        if path.relative_to(root).as_posix() != RELEASER
        for line in promote_calls(path.read_text(encoding="utf-8"))
    ]


def test_models_are_released_only_through_promote_judged():
    """The CLI and the pipeline's release stage both check the verdict against the model."""
    assert releases_outside_promote_judged(SRC) == []
    assert promote_calls((SRC / RELEASER).read_text(encoding="utf-8"))


def test_a_planted_direct_promotion_is_caught(tmp_path):
    (tmp_path / "evals").mkdir()
    (tmp_path / RELEASER).write_text("releases.promote(model, gate=verdict)\n")
    (tmp_path / "stages.py").write_text(
        '"""Releases(registry).promote(m) in a docstring is no call."""\n'
        "from tempering.runs.releases import Releases\n"
        "def release(registry, m, v):\n"
        "    return Releases(registry).promote(m, gate=v)\n"
        "def graduate(registry, v):\n"
        "    return Releases(registry).decide(v)\n"
    )
    assert releases_outside_promote_judged(tmp_path) == ["stages.py:4", "stages.py:6"]


def test_the_pipeline_release_stage_refuses_a_checkpoint_changed_after_its_gate(judged, tmp_path):
    from tempering.runs.releases import Releases

    cand, gate, _ = judged
    nudge_weights(cand)
    stages = {"ship": {"kind": "release", "model": str(cand), "gate": str(gate)}}
    pipeline = tmp_path / "p.yaml"
    pipeline.write_text(yaml.safe_dump({"out": str(tmp_path / "runs"), "stages": stages}))
    res = temper("run", pipeline)
    assert res.exit_code != 0 and "not the weights the gate judged" in " ".join(res.output.split()), res.output
    assert "Traceback" not in res.output
    with Registry(tmp_path / "runs" / "registry.sqlite") as reg:
        assert Releases(reg).list() == []
