"""The fault battery (bench/diagnostics/fault_battery.py): no fault leaves a run hanging silently.

A reduced battery runs here (a hung engine replica, a killed reward actor and a killed local engine
process under asynchronous GRPO are replaced and the run gives the unfaulted completions and
rewards; a hung reward thread stops the run with one line naming it and the step); the committed `bench/results/faults.json` of the whole battery must
count no silent case and cover every worker kind and fault kind."""

import json
from pathlib import Path

import pytest

from tests.conftest import load_script

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_a_reduced_battery_recovers_or_stops_with_a_named_line(tmp_path):
    pytest.importorskip("ray")
    fb = load_script("bench/diagnostics/fault_battery.py")
    cases = ["engine:hang:2", "ray_reward:kill:5", "reward_thread:hang:2", "engine_process:kill:5"]
    result = fb.battery(cases, 0, tmp_path)
    cases = result["cases"]
    assert all(c["fired"] for c in cases.values())
    assert cases["engine:hang:2"]["outcome"] == "recovered"
    assert cases["ray_reward:kill:5"]["outcome"] == "recovered"
    assert cases["engine_process:kill:5"]["outcome"] == "recovered"  # a batch sampled in the background
    stop = cases["reward_thread:hang:2"]
    assert stop["outcome"] == "stopped" and stop["rc"] == 2
    assert stop["line"].startswith("error: reward worker thread stuck at step 2: scoring task ")
    assert result["faults_silent"] == 0


def test_the_committed_battery_has_no_silent_case_and_covers_every_worker_and_fault_kind():
    result = json.loads((ROOT / "bench/results/faults.json").read_text())
    fb = load_script("bench/diagnostics/fault_battery.py")
    assert result["faults_silent"] == 0 and result["faults_not_fired"] == 0
    assert result["faults_cases"] == len(result["cases"]) == len(fb.CASES)
    assert set(result["cases"]) == set(fb.CASES)
    assert set(result["components"]) == {"engine", "engine_process", "ray_reward", "reward_thread", "sandbox"}
    assert {c.split(":")[1] for c in result["cases"]} == {"hang", "kill", "slow"}
    assert all(c["outcome"] in ("recovered", "stopped", "named") and c["fired"] for c in result["cases"].values())
