"""Suites from YAML: built-ins, user suite directories, validation, hash and overrides."""

import tomllib
from pathlib import Path

import pytest

from tempering.evals.suite import (
    Suite,
    SuiteError,
    builtin_suite_dir,
    load_suite,
    metric_k,
    read_suite,
    registered_suites,
    render_messages,
)
from tempering.types import Task
from tests.evals.conftest import recall_tasks, write_jsonl, write_suite

ROOT = Path(__file__).resolve().parents[2]
BUILTIN = {
    "arithmetic": 150,
    "arithmetic-add": 100,
    "humaneval": 164,
    "rg-chain-sum": 100,
    "rg-spell-backward": 100,
    "safety-refuse": 72,
    "safety-comply": 72,
    "honesty-unknown": 48,
    "honesty-known": 36,
}
LONGCTX = [f"longctx-{kind}" for kind in ("passkey", "multikey", "vartrack", "crossfact", "noisy")]


@pytest.fixture
def suite_dir(tmp_path, monkeypatch):
    directory = tmp_path / "suites"
    directory.mkdir()
    monkeypatch.setenv("TEMPERING_SUITES", str(directory))
    return directory


def test_builtin_suites_load_with_their_tasks(suite_dir):
    suites = {s.name: s for s in registered_suites()}
    assert set(suites) == set(BUILTIN) | set(LONGCTX)
    for name in LONGCTX:  # 20 tasks per length; one per length here (an 8k haystack takes a while)
        tasks = suites[name].with_overrides(limit=1).task_list
        assert [t.id.split("-")[2] for t in tasks] == ["L1024", "L2048", "L4096", "L8192"]
        assert all(t.verifier["type"] == "numeric" and t.track == "longctx" for t in tasks)
    for name, n in BUILTIN.items():
        s = suites[name]
        assert len(s.task_list) == n and not s.private
        assert s.hash == load_suite(name).hash  # stable across loads
    assert suites["humaneval"].metrics[:2] == ["pass@1", "pass@10"] and suites["humaneval"].sampling.n >= 10
    assert suites["humaneval"].task_list[0].messages is not None  # chat style: reply with the whole function
    add = suites["arithmetic-add"].task_list
    assert all("+" in t.prompt and t.id.startswith("arithadd-heldout") for t in add)
    chain = suites["rg-chain-sum"].task_list[0].verifier
    assert chain["config"] == {"min_terms": 2, "max_terms": 3, "min_digits": 1, "max_digits": 2}


def test_builtin_suites_ship_as_package_data():
    assert sorted(p.stem for p in builtin_suite_dir().glob("*.yaml")) == sorted([*BUILTIN, *LONGCTX])
    setuptools = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    assert "suites/*.yaml" in setuptools["package-data"]["tempering.evals"]


def test_user_suite_by_name_and_relative_task_file(suite_dir):
    write_jsonl(suite_dir / "recall.jsonl", recall_tasks(5, seed=0))
    write_suite(suite_dir, "recall", Path("recall.jsonl"), private=True)
    s = load_suite("recall")
    assert s.private and len(s.task_list) == 5 and s.primary_metric == "accuracy"
    assert [x.name for x in registered_suites() if x.private] == ["recall"]
    (suite_dir / "arithmetic.yaml").write_text((builtin_suite_dir() / "arithmetic.yaml").read_text())
    with pytest.raises(SuiteError, match="defined twice"):
        registered_suites()


def test_invalid_suites_name_the_file_and_field(tmp_path):
    tasks = write_jsonl(tmp_path / "t.jsonl", recall_tasks(3, seed=0))
    cases = [
        ({"metricz": ["accuracy"]}, "metricz"),
        ({"metrics": ["acc"]}, "unknown metric 'acc'"),
        ({"templates": ["no slot"]}, "exactly one {prompt}"),
        ({"tasks": {"source": str(tasks), "style": "chat"}}, "humaneval source only"),
    ]
    for extra, message in cases:
        path = write_suite(tmp_path, "bad", tasks, **extra)
        with pytest.raises(SuiteError, match=message) as info:
            read_suite(path)
        assert str(path) in str(info.value)
    with pytest.raises(SuiteError, match="no suite 'nope'"):
        load_suite("nope")


def test_hash_covers_tasks_and_definition_not_seeds_or_samples(tmp_path):
    rows = recall_tasks(4, seed=0)
    tasks = write_jsonl(tmp_path / "t.jsonl", rows)
    base = read_suite(write_suite(tmp_path, "s", tasks))
    assert base.with_overrides(seeds=5, samples=9).hash == base.hash
    assert read_suite(write_suite(tmp_path, "s", tasks, templates=["{prompt}"])).hash != base.hash
    assert read_suite(write_suite(tmp_path, "s", tasks, sampling={"temperature": 0.5})).hash != base.hash
    rows[2]["verifier"]["answer"] = "9" if rows[2]["verifier"]["answer"] != "9" else "8"
    write_jsonl(tasks, rows)
    assert read_suite(tmp_path / "s.yaml").hash != base.hash
    assert base.with_overrides(limit=2).task_list == base.task_list[:2]


def test_pass_at_k_needs_enough_samples(tmp_path):
    s = read_suite(
        write_suite(
            tmp_path, "s", write_jsonl(tmp_path / "t.jsonl", recall_tasks(3, seed=0)), metrics=["accuracy", "pass@8"]
        )
    )
    assert metric_k("pass@8") == 8 and metric_k("accuracy") is None
    with pytest.raises(SuiteError, match="pass@8 needs >= 8 samples"):
        s.check_samples()
    s.with_overrides(seeds=2).check_samples()  # 4 samples x 2 seeds


def test_templates_apply_to_the_last_user_message():
    task = Task(
        id="t",
        messages=[{"role": "system", "content": "Be brief."}, {"role": "user", "content": "2+2?"}],
        verifier={"type": "numeric", "answer": "4"},
    )
    assert render_messages(task, "Question: {prompt}") == [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Question: 2+2?"},
    ]
    braces = Task(id="c", prompt="def f(x): return {x: 1}", verifier={"type": "exact", "answer": "x"})
    assert render_messages(braces, "{prompt}")[0]["content"] == "def f(x): return {x: 1}"
    assert Suite(name="x", tasks={"source": "builtin:arithmetic", "n": 2}).templates == ["{prompt}"]


def test_a_longctx_suite_with_a_bad_depth_or_a_length_past_the_window_fails_in_one_line(suite_dir):
    base = (builtin_suite_dir() / "longctx-passkey.yaml").read_text()
    (suite_dir / "deep.yaml").write_text(base.replace("0.75, 1.0]", "0.75, 1.5]").replace("longctx-passkey", "deep"))
    with pytest.raises(SuiteError) as err:
        load_suite("deep")
    assert "deep.yaml" in str(
        err.value
    ) and "tasks.0: Value error, config: depths: 1.5 is outside [0, 1] (task source 'longctx:passkey')" in str(
        err.value
    )
    (suite_dir / "far.yaml").write_text(base.replace("8192]", "16384]").replace("longctx-passkey", "far"))
    with pytest.raises(SuiteError) as err:
        _ = load_suite("far").task_list
    assert "16384 tokens exceeds the model's window of 8192" in str(err.value) and "\n" not in str(err.value)


PLUGIN = """
from tempering.types import Reward
from tempering.verifiers import register


@register("{name}")
def middle_digit(spec, completion, ctx):
    \"\"\"The recall task's own judge, written by a user: the reply's first word is the middle digit.\"\"\"
    words = completion.split()
    right = bool(words) and words[0] == spec["digit"]
    return Reward(value=float(right), components={{"right": float(right)}})
"""


def plugin_suite(tmp_path, monkeypatch, name: str, rows: list[dict]) -> Path:
    """A suite whose tasks are judged by verifier `name`, registered by the plug-in module `name`."""
    monkeypatch.syspath_prepend(str(tmp_path))
    (tmp_path / f"{name}.py").write_text(PLUGIN.format(name=name))
    tasks = [
        {"id": r["id"], "prompt": r["prompt"], "verifier": {"type": name, "digit": r["verifier"]["answer"]}}
        for r in rows
    ]
    return write_suite(tmp_path, "own-judge", write_jsonl(tmp_path / "own.jsonl", tasks), plugins=[name])


def test_a_suite_loads_its_own_verifier_module_through_plugins(recall_model, recall_dir, env, monkeypatch):
    """A user's verifier, in a module the suite names (as `grpo.plugins` names one), judges a
    `temper eval run` exactly as the built-in numeric verifier does on the same answers."""
    import json

    from typer.testing import CliRunner

    from tempering.cli import app

    _, _, rows = recall_model
    suite = plugin_suite(env, monkeypatch, "own_judge_recall", rows[:12])
    builtin = write_suite(env, "numeric-judge", write_jsonl(env / "numeric.jsonl", rows[:12]))
    for path, out in ((suite, "own"), (builtin, "numeric")):
        result = CliRunner().invoke(
            app, ["eval", "run", str(path), "--model", str(recall_dir), "--out", str(env / out)]
        )
        assert result.exit_code == 0, result.output
    own, numeric = (json.loads((env / o / "results.json").read_text())["suites"][0] for o in ("own", "numeric"))
    assert own["task_scores"] == numeric["task_scores"] and own["metrics"]["accuracy"]["mean"] > 0.9
    # the plug-in's source is part of the suite hash: an edited judge is not served from the cache
    before = read_suite(suite).hash
    (env / "own_judge_recall.py").write_text((env / "own_judge_recall.py").read_text() + "\n# edited\n")
    assert read_suite(suite).hash != before
