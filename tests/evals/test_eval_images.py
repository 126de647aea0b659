"""Eval samples with prompt pictures: stored once beside samples.jsonl, shown in report.html and `temper eval show`.

The run dir is written as an eval run writes it (`sample_record` per trajectory, then
`write_eval_outputs`), over two real `colour_shape` tasks of 16 x 16 pixels, two samples each.
"""

import base64
import io
import json
import re

from PIL import Image
from typer.testing import CliRunner

from tempering.cli import app
from tempering.cli.eval_show import half_block_preview
from tempering.config.tasks import TaskSourceSettings
from tempering.data.vision_tasks import vision_tasks
from tempering.evals.evaluate import write_eval_outputs
from tempering.evals.report import render_report
from tempering.evals.results import EvalResults, MetricResult, SuiteResult
from tempering.evals.runner import sample_record
from tempering.evals.suite import Suite, render_messages
from tempering.types import Reward, Trajectory

QUESTION = "What colour and shape is the object?"


def pixels(png: bytes) -> bytes:
    with Image.open(io.BytesIO(png)) as img:
        return img.convert("RGB").tobytes()


def task_pixels(task) -> bytes:
    url = task.chat()[0]["content"][0]["image_url"]["url"]
    return pixels(base64.b64decode(url.split(",", 1)[1]))


def trajectory(task, sample: int, answer: str, reward: float) -> Trajectory:
    messages = [*render_messages(task, "{prompt}"), {"role": "assistant", "content": answer}]
    return Trajectory(
        task_id=task.id,
        sample=sample,
        messages=messages,
        token_ids=[1, 2],
        loss_mask=[0, 1],
        logprobs=[0.0, -0.5],
        prompt_length=1,
        rewards=[Reward(value=reward)],
    )


def eval_run(out):
    """Task 0 answered right twice, task 1 wrong twice; returns (tasks, stored records)."""
    tasks = vision_tasks("colour_shape", 2, size=16)
    suite = Suite.of_tasks("vision-colour", tasks, TaskSourceSettings(source="vision:colour_shape", n=2, image_size=16))
    right = tasks[0].verifier["answer"]
    trajs = [trajectory(tasks[0], s, right, 1.0) for s in (0, 1)] + [
        trajectory(tasks[1], s, "no idea", 0.0) for s in (0, 1)
    ]
    records = [sample_record(suite, 0, 0, t) for t in trajs]
    result = SuiteResult(
        suite="vision-colour",
        suite_hash="h-vision",
        model_id="vlm",
        metrics={"accuracy": MetricResult(name="accuracy", mean=0.5, n=2)},
        primary_metric="accuracy",
        task_scores={tasks[0].id: [1.0, 1.0], tasks[1].id: [0.0, 0.0]},
    )
    write_eval_outputs(out, EvalResults(model="vlm", suites=[result]), records)
    return tasks


def test_each_picture_is_stored_once_and_samples_point_to_it(tmp_path):
    tasks = eval_run(tmp_path)
    text = (tmp_path / "samples.jsonl").read_text()
    assert "data:image" not in text  # four samples, no base64 in the file
    stored = sorted((tmp_path / "images").iterdir())
    assert len(stored) == 2 and all(p.suffix == ".png" for p in stored)
    assert {pixels(p.read_bytes()) for p in stored} == {task_pixels(t) for t in tasks}
    rows = [json.loads(line) for line in text.splitlines()]
    for row, task in zip(rows, [tasks[0], tasks[0], tasks[1], tasks[1]]):
        image_part, text_part = row["prompt"]
        url = image_part["image_url"]["url"]
        assert url.startswith("images/") and pixels((tmp_path / url).read_bytes()) == task_pixels(task)
        assert text_part["type"] == "text" and text_part["text"].startswith(QUESTION)


def test_report_shows_each_sample_with_its_picture(tmp_path):
    tasks = eval_run(tmp_path)
    page = (tmp_path / "report.html").read_text()
    section = page[page.index("<h2>Samples</h2>") :]
    rows = section.split("<tr>")[2:]  # after the header row
    assert len(rows) == 4
    expected = [tasks[1], tasks[1], tasks[0], tasks[0]]  # failed first
    for row, task in zip(rows, expected):
        (src,) = re.findall(r'<img class="sample" alt="image 16x16" src="data:image/png;base64,([^"]+)"', row)
        assert pixels(base64.b64decode(src)) == task_pixels(task)
        assert task.id in row and QUESTION in row
    assert "0.00 fail" in rows[0] and "1.00 pass" in rows[3] and tasks[0].verifier["answer"] in rows[3]


def test_eval_show_prints_a_line_per_picture_with_a_file_that_opens(tmp_path):
    tasks = eval_run(tmp_path)
    res = CliRunner().invoke(app, ["eval", "show", str(tmp_path), "--full"], env={"COLUMNS": "300"})
    assert res.exit_code == 0, res.output
    found = re.findall(r"\[image 16x16 (\S+)\]", res.stdout)
    assert len(found) == 4
    for path, task in zip(found, [tasks[0], tasks[0], tasks[1], tasks[1]]):
        with open(path, "rb") as fh:
            assert pixels(fh.read()) == task_pixels(task)
    assert res.stdout.count(QUESTION) == 4
    assert res.stdout.count("▀" * 16) == 4 * 8  # a 16 x 16 picture: 8 preview lines of 16 half-blocks


def test_an_unreadable_picture_is_one_line_naming_why(tmp_path):
    row = {"suite": "s", "task_id": "t-1", "seed": 0, "sample": 0, "completion": "x", "reward": 0.0}
    row |= {"passed": False, "status": "scored"}
    prompt = [
        {"type": "image_url", "image_url": {"url": "images/gone.png"}},
        {"type": "image_url", "image_url": {"url": "data:image/png;base64,!!"}},
        {"type": "text", "text": "What is it?"},
    ]
    (tmp_path / "samples.jsonl").write_text(json.dumps({**row, "prompt": prompt}) + "\n")
    missing = f"[image not shown: image file not found: {tmp_path / 'images' / 'gone.png'}]"
    bad = "[image not shown: image data URL holds invalid base64]"
    res = CliRunner().invoke(app, ["eval", "show", str(tmp_path), "--full"], env={"COLUMNS": "300"})
    assert res.exit_code == 0, res.output
    assert missing in res.stdout and bad in res.stdout and "What is it?" in res.stdout
    result = SuiteResult(
        suite="s",
        suite_hash="h",
        model_id="m",
        metrics={"accuracy": MetricResult(name="accuracy", mean=0.0, n=1)},
        primary_metric="accuracy",
    )
    page = render_report(
        EvalResults(model="m", suites=[result]), tmp_path, samples=[{**row, "prompt": prompt}]
    ).read_text()
    assert missing in page and bad in page and '<img class="sample"' not in page


def test_half_block_preview_colours_each_cell_with_the_pixel_above_and_below():
    img = Image.new("RGB", (2, 4))
    red, green, blue, grey = (255, 0, 0), (0, 255, 0), (0, 0, 255), (9, 9, 9)
    img.putdata([red, green, blue, grey, (1, 2, 3), (4, 5, 6), (7, 8, 9), (200, 100, 50)])  # row-major
    text = half_block_preview(img)
    assert text.plain == "▀▀\n▀▀"  # 2 x 4 pixels: two lines of two cells, each cell two pixel rows
    cells = [(s.start, s.style.color.triplet, s.style.bgcolor.triplet) for s in text.spans]
    assert cells == [(0, red, blue), (1, green, grey), (3, (1, 2, 3), (7, 8, 9)), (4, (4, 5, 6), (200, 100, 50))]


def test_a_private_suite_lists_no_samples_in_the_report(tmp_path):
    result = SuiteResult(
        suite="held",
        suite_hash="h",
        private=True,
        model_id="m",
        metrics={"accuracy": MetricResult(name="accuracy", mean=0.0, n=1)},
        primary_metric="accuracy",
    )
    row = {"suite": "held", "task_id": "9f86d081", "prompt": "secret question", "completion": "secret answer"}
    page = render_report(EvalResults(model="m", suites=[result]), tmp_path, samples=[row]).read_text()
    assert "<h2>Samples</h2>" not in page and "secret" not in page and "9f86d081" not in page
