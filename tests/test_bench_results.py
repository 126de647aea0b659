"""The result files the README's headline table quotes (`HEADLINE_ROWS` of tools/readme_figures.py)
carry what the bench harness writes: the host's CPU model, the per-round values, the median ratio
and its interval. The files measured before the harness are listed by name; the list only shrinks:
a listed file that already conforms fails here, so it is taken off when it is re-measured."""

import json
from pathlib import Path

from tests.conftest import load_script

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results"

NOT_YET_REMEASURED = {
    "sft.json",
    "grpo.json",
    "time_to_reward.json",
    "eval.json",
    "inference.json",
    "single_stream.json",
    "speculative.json",
    "sandbox.json",
}


def test_every_headline_file_conforms_unless_listed_and_no_listed_file_conforms():
    tool = load_script("tools/readme_figures.py")
    missing = {
        row.file: tool.headline_schema_missing(json.loads((RESULTS / row.file).read_text()))
        for row in tool.HEADLINE_ROWS
    }
    unlisted_bad = {f: m for f, m in missing.items() if m and f not in NOT_YET_REMEASURED}
    listed_good = sorted(f for f in NOT_YET_REMEASURED if f in missing and not missing[f])
    assert unlisted_bad == {}, "headline files without the harness fields"
    assert listed_good == [], "re-measured: take these off NOT_YET_REMEASURED"
    assert NOT_YET_REMEASURED <= set(missing), "a listed file is not a headline file"


def test_the_single_run_figures_are_kept_for_exactly_the_files_not_yet_remeasured():
    assert set(load_script("tools/readme_figures.py").SINGLE_RUN) == NOT_YET_REMEASURED


def test_a_conforming_headline_is_a_headline_and_its_interval_brackets_its_median():
    tool = load_script("tools/readme_figures.py")
    for row in tool.HEADLINE_ROWS:
        result = json.loads((RESULTS / row.file).read_text())
        if tool.headline_schema_missing(result):
            continue
        low, high = result["ratio_ci"]
        assert result["headline"] is True, f"{row.file}: {result['headline_refused']}"
        assert low <= result["ratio_median"] <= high and result["parity"] == (low <= 1 <= high), row.file


def test_the_schema_check_names_each_missing_field():
    tool = load_script("tools/readme_figures.py")
    full = {"host": {"cpu_model": "X"}, "rounds": [], "ratio_median": 1.2, "ratio_ci": [1.1, 1.3]}
    assert tool.headline_schema_missing(full) == []
    assert tool.headline_schema_missing({**full, "host": {"cpu": "x86_64"}}) == ["host.cpu_model"]
    assert tool.headline_schema_missing({"ratio_ci": [1, 2]}) == ["host.cpu_model", "rounds", "ratio_median"]
