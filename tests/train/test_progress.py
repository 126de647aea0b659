"""Per-step progress on the terminal, and the no-learning-signal warnings."""

import io

from rich.console import Console

from tempering.train.progress import NO_GRADIENT, VERIFIERS_FAILED, TrainProgress, no_signal_reasons
from tests.recipes.conftest import tiny_dir  # noqa: F401  (fixture)
from tests.recipes.test_grpo_e2e import _config
from tests.train.test_trainer import make_trainer


def grpo_record(reward_std=0.3, zero_share=0.0, failed=0, generated=4):
    return {
        "loss": 0.25,
        "real_tokens": 100,
        "reward_mean": 0.5,
        "reward_std": reward_std,
        "zero_variance_share": zero_share,
        "groups_generated": generated,
        "verifier_failed_groups": failed,
    }


def test_sft_fit_prints_plain_progress_lines_when_piped(tmp_path, capsys):
    make_trainer(tmp_path, steps=20).fit()
    lines = [l for l in capsys.readouterr().err.splitlines() if l.startswith("sft step")]
    # first step, then every total // 20 = 1 step: one line per step here, the last included
    assert lines[0].startswith("sft step 1/20") and lines[-1].startswith("sft step 20/20")
    for part in ("loss ", "tok/s", "eta "):
        assert part in lines[-1]
    assert "reward" not in lines[-1]  # SFT has none


def test_plain_lines_every_n_steps_with_reward():
    sink = io.StringIO()
    with TrainProgress("grpo", total=10, console=Console(file=sink, width=200), every=5) as progress:
        for step in range(1, 11):
            progress(step, grpo_record())
    lines = sink.getvalue().splitlines()
    assert [l.split("  ")[0] for l in lines] == ["grpo step 1/10", "grpo step 5/10", "grpo step 10/10"]
    assert "reward 0.500" in lines[-1] and "loss 0.2500" in lines[-1]


def test_bar_on_a_terminal():
    sink = io.StringIO()
    console = Console(file=sink, force_terminal=True, width=200)
    with TrainProgress("grpo", total=3, console=console) as progress:
        for step in range(1, 4):
            progress(step, grpo_record())
    assert "reward 0.500" in sink.getvalue() and "3/3" in sink.getvalue()


def test_no_gradient_and_failed_verifier_warnings_once_then_counted():
    assert no_signal_reasons(grpo_record()) == []
    assert no_signal_reasons(grpo_record(zero_share=1.0)) == [NO_GRADIENT]
    assert no_signal_reasons(grpo_record(reward_std=0.0)) == [NO_GRADIENT]  # dynamic sampling off
    assert no_signal_reasons(grpo_record(failed=4, reward_std=0.0)) == [VERIFIERS_FAILED]
    assert no_signal_reasons({"loss": 1.0, "real_tokens": 5}) == []  # SFT: no reward fields
    sink = io.StringIO()
    with TrainProgress("grpo", total=6, console=Console(file=sink, width=300), every=100) as progress:
        for step in range(1, 7):
            progress(step, grpo_record(reward_std=0.0 if step > 2 else 0.3))
    text = sink.getvalue()
    assert text.count("warning: step") == 1 and "warning: step 3:" in text
    assert "4 steps: every group's samples got the same reward" in text


def test_grpo_cli_shows_reward_per_step(tmp_path, tiny_dir):
    from typer.testing import CliRunner

    from tempering.cli import app

    res = CliRunner().invoke(app, ["grpo", str(_config(tmp_path, tiny_dir, 2))])
    assert res.exit_code == 0, res.output
    print(res.stderr)
    last = [l for l in res.stderr.splitlines() if l.startswith("grpo step")][-1]
    assert last.startswith("grpo step 2/2") and "reward " in last and "tok/s" in last
