"""`temper data mix` end to end: config paths, quarantine, atomic output with checksum, registry."""

import hashlib
import json

from typer.testing import CliRunner

from tempering.cli import app
from tempering.runs.registry import Registry


def _rows(path, n, word, bad=0):
    lines = [
        json.dumps(
            {
                "messages": [
                    {"role": "user", "content": f"{word} {i}"},
                    {"role": "assistant", "content": f"{word} answer {i}"},
                ]
            }
        )
        for i in range(n)
    ]
    path.write_text("\n".join(lines + ["{not json"] * bad) + "\n")


def test_mix_cli_writes_records_and_reports(tmp_path):
    data = tmp_path / "cfg"
    data.mkdir()
    _rows(data / "math.jsonl", 300, "math", bad=1)
    _rows(data / "code.jsonl", 40, "code")
    _rows(data / "gen.jsonl", 200, "general")
    cfg = data / "mix.yaml"
    cfg.write_text(f"""sources:
  - {{name: math, data: math.jsonl, track: reasoning, weight: 2}}
  - {{name: code, data: code.jsonl, track: code, weight: 1, max_epochs: 2}}
replay: {{data: gen.jsonl, ratio: 0.25}}
size: 400
out: {tmp_path / "runs"}
""")  # relative data paths resolve against the config's directory
    res = CliRunner().invoke(app, ["data", "mix", str(cfg), "--name", "m", "--seed", "1"])
    assert res.exit_code == 0, res.output
    summary = json.loads(res.stdout.strip().splitlines()[-1])
    assert summary["rows"] == 400 and summary["quarantined"] == 1
    assert summary["capped"] == ["code"]  # 2/3 * 0.75 * 400 = 200 rows wanted, cap 2 x 40 = 80
    out = tmp_path / "runs" / "m" / "mix.jsonl"
    body = out.read_bytes()
    assert hashlib.sha256(body).hexdigest() == summary["sha256"]
    assert (tmp_path / "runs" / "m" / "mix.jsonl.sha256").read_text().split()[0] == summary["sha256"]
    texts = [json.loads(line)["messages"][0]["content"].split()[0] for line in body.decode().splitlines()]
    assert texts.count("general") == 100 and texts.count("code") == 80 and texts.count("math") == 220
    index = [json.loads(line) for line in (tmp_path / "runs" / "m" / "mix_index.jsonl").read_text().splitlines()]
    assert [r["source"] for r in index] == [{"general": "replay"}.get(t, t) for t in texts]
    quarantine = (tmp_path / "runs" / "m" / "quarantine.jsonl").read_text()
    assert "math.jsonl" in quarantine
    with Registry(tmp_path / "runs" / "registry.sqlite") as reg:
        run = reg.get(summary["run_id"])
        roles = {(i.role, i.path.split("/")[-1]) for i in reg.inputs(run["id"])}
        assert run["kind"] == "mix" and run["status"] == "finished"
        assert {("train", "math.jsonl"), ("train", "code.jsonl"), ("replay", "gen.jsonl")} <= roles
        shares = {s["source"]: s["realised"] for s in run["metrics"]["sources"]}
        assert shares == {"math": 0.55, "code": 0.2, "replay": 0.25}
    again = CliRunner().invoke(app, ["data", "mix", str(cfg), "--name", "m", "--seed", "1"])
    assert again.exit_code == 0 and json.loads(again.stdout.strip().splitlines()[-1])["sha256"] == summary["sha256"]


def test_mix_cli_bad_input_is_one_line(tmp_path):
    cfg = tmp_path / "mix.yaml"
    cfg.write_text(
        f"sources:\n  - {{name: a, data: nowhere.jsonl, track: reasoning}}\nsize: 10\nout: {tmp_path / 'runs'}\n"
    )
    res = CliRunner().invoke(app, ["data", "mix", str(cfg)])
    assert res.exit_code == 2 and "Traceback" not in res.output
    assert res.stderr.strip().splitlines() == [res.stderr.strip()] and "nowhere.jsonl" in res.stderr
    cfg.write_text("sources:\n  - {name: a, data: x.jsonl, track: poetry}\nsize: 10\n")
    res = CliRunner().invoke(app, ["data", "mix", str(cfg)])
    assert res.exit_code == 2 and "track" in res.stderr and len(res.stderr.strip().splitlines()) == 1


def test_mix_by_tokens_with_the_model_tokenizer(tmp_path):
    _rows(tmp_path / "a.jsonl", 50, "alpha")
    _rows(tmp_path / "b.jsonl", 50, "beta gamma delta epsilon zeta eta theta")
    cfg = tmp_path / "mix.yaml"
    cfg.write_text(
        "sources:\n  - {name: a, data: a.jsonl, weight: 1}\n  - {name: b, data: b.jsonl, weight: 3}\n"
        f"size: 4000\nby: tokens\ntokenizer: smollm2-135m-instruct\nout: {tmp_path / 'runs'}\n"
    )
    res = CliRunner().invoke(app, ["data", "mix", str(cfg), "--name", "t"])
    assert res.exit_code == 0, res.output
    summary = json.loads((tmp_path / "runs" / "t" / "summary.json").read_text())
    shares = {s["source"]: s["token_share"] for s in summary["sources"]}
    assert abs(shares["a"] - 0.25) < 0.01 and abs(shares["b"] - 0.75) < 0.01
    assert abs(summary["tokens"] - 4000) <= 60  # each source stops within half a row of its quota
    assert summary["token_unit"] == "smollm2-135m-instruct"
