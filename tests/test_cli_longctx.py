"""`temper data longctx` and `temper model rope`: rows written with a checksum, one JSON line,
one-line errors before any work."""

import json

import pytest
from typer.testing import CliRunner

from tempering.cli import app
from tests.conftest import tiny_llama

runner = CliRunner()


def run(*args):
    result = runner.invoke(app, [str(a) for a in args])
    if result.exception and not isinstance(result.exception, SystemExit):
        raise result.exception
    return result


def test_data_longctx_writes_sft_rows_with_the_answer_as_the_reply(tmp_path, smol_tokenizer):
    out = tmp_path / "rows.jsonl"
    result = run("data", "longctx", "vartrack", "--n", 2, "--length", 512, "--depth", 0.5, "--out", out)
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout.strip().splitlines()[-1])["rows"] == 2
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert [m["role"] for m in rows[0]["messages"]] == ["user", "assistant"]
    assert rows[0]["messages"][1]["content"].isdigit() and (tmp_path / "rows.jsonl.sha256").is_file()


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["--length", 20000], ["length", "20000", "8192"]),
        (["--depth", 1.5], ["depths", "1.5"]),
        (["--length", 100], ["length", "100", "cannot hold"]),
    ],
)
def test_data_longctx_bad_requests_are_one_line_errors(tmp_path, args, words):
    result = run("data", "longctx", "crossfact", "--out", tmp_path / "x.jsonl", *args)
    assert result.exit_code == 2 and not (tmp_path / "x.jsonl").exists()
    message = result.output.strip()
    assert len(message.splitlines()) == 1 and all(w in message for w in words), message


def test_model_rope_writes_a_scaled_copy_and_refuses_unknown_types(tmp_path, smol_tokenizer):
    source = tmp_path / "tiny"
    tiny_llama().save_pretrained(source)
    smol_tokenizer.save_pretrained(source)
    result = run("model", "rope", source, "--type", "yarn", "--factor", 4, "--out", tmp_path / "scaled")
    assert result.exit_code == 0, result.output
    config = json.loads((tmp_path / "scaled" / "config.json").read_text())
    assert config["rope_parameters"]["rope_type"] == "yarn" and config["max_position_embeddings"] == 2048
    bad = run("model", "rope", source, "--type", "ntk", "--factor", 2, "--out", tmp_path / "other")
    assert bad.exit_code == 2 and "type" in bad.output and len(bad.output.strip().splitlines()) == 1


def test_data_longctx_stage_writes_interleaved_rows_cached_and_seeded(tmp_path, smol_tokenizer):
    import yaml

    from tempering.pipeline.plan import load_plan
    from tempering.pipeline.runner import run_pipeline

    stage = {"kind": "data.longctx", "kinds": ["passkey", "noisy"], "lengths": [512], "depths": [0.5], "n": 3}
    path = tmp_path / "p.yaml"
    path.write_text(yaml.safe_dump({"out": str(tmp_path / "runs"), "stages": {"hay": stage}}))
    first = run_pipeline(load_plan(path, seed=0)).stages[0]
    assert first.status == "done" and first.summary["rows"] == 6
    rows = [json.loads(line) for line in open(first.outputs["data"])]
    asked = [r["messages"][0]["content"] for r in rows]
    assert sum("pass key" in a for a in asked) == 3 and sum("access code" in a for a in asked) == 3
    assert all(r["messages"][1]["content"].isdigit() and r["messages"][1]["content"] in a for r, a in zip(rows, asked))
    assert run_pipeline(load_plan(path, seed=0)).stages[0].status == "cached"
    other = run_pipeline(load_plan(path, seed=1)).stages[0]
    assert other.run_dir != first.run_dir and open(other.outputs["data"]).read() != open(first.outputs["data"]).read()


def test_data_longctx_stage_rejects_an_unknown_kind_in_one_line(tmp_path):
    import yaml

    from tempering.pipeline.plan import PipelineError, load_plan

    path = tmp_path / "p.yaml"
    stage = {"kind": "data.longctx", "kinds": ["haystack"], "lengths": [512]}
    path.write_text(yaml.safe_dump({"out": str(tmp_path / "runs"), "stages": {"hay": stage}}))
    with pytest.raises(PipelineError) as err:
        load_plan(path)
    message = str(err.value)
    assert "kinds.0" in message and "haystack" not in message.split(":")[0] and len(message.splitlines()) == 1
