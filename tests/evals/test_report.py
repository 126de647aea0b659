"""The HTML report and terminal table, from hand-made results."""

import base64
import io
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from rich.console import Console

from tempering.data.longctx import task_id
from tempering.evals.report import print_table, render_report, task_variances
from tempering.evals.report_longctx import length_depth_figure, length_depth_grid
from tempering.evals.results import EvalResults, MetricResult, SuiteResult
from tempering.evals.stats import ParaphraseSpread, Stability
from tests.evals.conftest import passkey_suite

ROOT = Path(__file__).resolve().parents[2]
PRIVATE_IDS = [f"holdout-secret-{i:03d}" for i in range(12)]


def public_suite(model: str, improved: bool) -> SuiteResult:
    # 20 tasks x 4 samples: 8 always right, 6 flip (variance 0.25), 6 always wrong -> mean 0.55;
    # `improved` turns the 6 wrong ones right -> mean 0.85.
    scores = {
        f"arith-{i:03d}": (
            [1.0] * 4 if i < 8 or improved and i >= 14 else [1.0, 0.0, 1.0, 0.0] if i < 14 else [0.0] * 4
        )
        for i in range(20)
    }
    mean, low, high = (0.850, 0.725, 0.950) if improved else (0.550, 0.400, 0.700)
    return SuiteResult(
        suite="arith-public",
        suite_hash="h-arith",
        track="reasoning",
        model_id=model,
        metrics={
            "accuracy": MetricResult(
                name="accuracy", mean=mean, low=low, high=high, n=20, per_seed=[mean - 0.01, mean + 0.01], std=0.014
            ),
            "format_ok": MetricResult(name="format_ok", mean=0.876, low=0.812, high=0.934, n=20),
        },
        primary_metric="accuracy",
        task_scores=scores,
        stability=Stability(tasks=20, repeats=4, mean_task_variance=0.075, flip_share=0.3, repeat_std=0.021),
        paraphrase=ParaphraseSpread(spread=0.083, std=0.037, min=0.511, max=0.594, n=3),
        truncation_rate=0.05 if improved else 0.125,
        contamination_hits=0,
    )


def private_suite(model: str) -> SuiteResult:
    return SuiteResult(
        suite="holdout-private",
        suite_hash="h-holdout",
        private=True,
        model_id=model,
        metrics={"pass@1": MetricResult(name="pass@1", mean=0.25, low=0.083, high=0.5, n=12)},
        primary_metric="pass@1",
        task_scores={t: [1.0, 0.0] if i < 6 else [0.0, 0.0] for i, t in enumerate(PRIVATE_IDS)},
        truncation_rate=0.05,
        contamination_hits=2,
    )


def results(model: str, improved: bool = False) -> EvalResults:
    return EvalResults(model=model, suites=[public_suite(model, improved), private_suite(model)])


def test_report_is_self_contained_and_holds_the_numbers(tmp_path):
    path = render_report(results("cand-7"), tmp_path)
    assert path == tmp_path / "report.html"
    page = path.read_text()
    assert not re.search(r"""(src|href)\s*=\s*["']?\s*(https?:)?//""", page, re.I)
    assert "http://" not in page and "https://" not in page and "<script" not in page.lower()
    images = re.findall(r'src="data:image/png;base64,([^"]+)"', page)
    assert len(images) == 2 + 3  # one metrics figure per suite + stability, paraphrase, truncation
    for data in images:
        assert base64.b64decode(data).startswith(b"\x89PNG")
    for text in [
        "arith-public",
        "holdout-private",
        "cand-7",
        "0.550",
        "[0.400, 0.700]",
        "0.876",
        "0.250",
        "[0.083, 0.500]",
        "0.075",
        "0.083",
        "12.5%",
        "5.0%",
        "0.014",
    ]:
        assert text in page, text


def test_private_suites_show_aggregates_only(tmp_path):
    page = render_report(results("cand-7"), tmp_path).read_text()
    assert "arith-008" in page  # public: the least stable tasks are named...
    assert not any(t in page for t in PRIVATE_IDS)  # ...private: no task id at all
    assert "per-task detail withheld" in page


def test_before_after_with_delta_and_significance(tmp_path):
    base, cand = results("base-0"), results("cand-7", improved=True)
    page = render_report(cand, tmp_path, compare=base).read_text()
    assert "base-0" in page and "cand-7" in page
    # arith-public: 6 of 20 tasks went 0 -> 1, the rest are unchanged, so delta = +0.300 exactly.
    assert "+0.300 sig" in page and "0.550" in page and "0.850" in page
    # holdout-private is unchanged: delta 0, not significant.
    assert "+0.000</td>" in page


def test_unpairable_suites_fail_loudly(tmp_path):
    base = results("base-0")
    base.suites[0].suite_hash = "other"
    with pytest.raises(ValueError, match="different suite versions"):
        render_report(results("cand-7"), tmp_path, compare=base)


def test_task_variances():
    suite = public_suite("m", improved=False)
    v = task_variances(suite)
    assert v["arith-000"] == 0.0 and v["arith-010"] == 0.25 and len(v) == 20


def test_print_table():
    console = Console(record=True, width=200)
    print_table(results("cand-7", improved=True), compare=results("base-0"), console=console)
    text = console.export_text()
    for cell in ["arith-public", "holdout-private (private)", "accuracy *", "0.850", "0.550", "+0.300 sig", "base-0"]:
        assert cell in text, cell


@pytest.mark.skipif(
    not any(shutil.which(n) for n in ("chromium", "chromium-browser", "google-chrome")),
    reason="Chromium not installed (apt-get install -y chromium); screenshot check skipped",
)
def test_screenshot_is_not_blank(tmp_path):
    from PIL import Image

    html = render_report(results("cand-7", improved=True), tmp_path, compare=results("base-0"))
    png = tmp_path / "report.png"
    proc = subprocess.run(
        [sys.executable, str(ROOT / "tools" / "screenshot_report.py"), str(html), str(png), "--height", "2600"],
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "-> ok" in proc.stdout
    assert Image.open(png).size == (1280, 2600)


def test_blank_page_is_caught(tmp_path):
    # The checker's own specification: a white page fails, a chart passes.
    sys.path.insert(0, str(ROOT / "tools"))
    try:
        from screenshot_report import pixel_stats
    finally:
        sys.path.pop(0)
    from PIL import Image

    Image.new("RGB", (200, 100), "white").save(tmp_path / "white.png")
    assert pixel_stats(tmp_path / "white.png").looks_blank()
    html = render_report(results("cand-7"), tmp_path)
    data = base64.b64decode(re.search(r'base64,([^"]+)"', html.read_text()).group(1))
    Image.open(io.BytesIO(data)).convert("RGB").save(tmp_path / "chart.png")
    assert not pixel_stats(tmp_path / "chart.png").looks_blank()


def test_names_are_plain_text(tmp_path):
    # HTML, TeX and rich markup in names are shown as written, never interpreted.
    odd = results("m<1>")
    odd.suites[0].suite = "gsm[8k] <b>$x_$</b>"
    page = render_report(odd, tmp_path).read_text()
    assert "gsm[8k] &lt;b&gt;$x_$&lt;/b&gt;" in page and "<b>$x_$</b>" not in page
    console = Console(record=True, width=200)
    print_table(odd, console=console)
    assert "gsm[8k] <b>$x_$</b>" in console.export_text()


def test_print_table_keeps_every_column_when_piped():
    # Not a terminal (a pipe, `| tee`): rich assumed 80 columns and cut CI, delta and p away.
    import io

    sink = io.StringIO()
    console = Console(file=sink, width=80)
    assert not console.is_terminal
    print_table(results("cand-7", improved=True), compare=results("base-0"), console=console)
    text = sink.getvalue()
    for cell in ["delta CI", "seed std", "+0.300 sig", "[0.", "arith-public"]:
        assert cell in text, cell
    assert "…" not in text
    assert max(len(line) for line in text.splitlines()) > 80


def assert_titles_inside(fig) -> None:
    """Every axes title of `fig`, as laid out for the PNG, lies inside the figure (nothing clipped)."""
    fig.draw_without_rendering()
    box = fig.bbox
    titles = [t for ax in fig.axes for t in (ax.title, ax._left_title, ax._right_title) if t.get_text()]
    for t in titles:
        ext = t.get_window_extent()
        assert box.x0 <= ext.x0 and ext.x1 <= box.x1 and box.y0 <= ext.y0 and ext.y1 <= box.y1, (
            t.get_text(),
            ext,
            box,
        )


def test_chart_titles_fit_their_charts(tmp_path, monkeypatch):
    from tempering.evals import report

    drawn, real_img = [], report._img

    def keep(fig, alt):  # the real rendering, and the figure kept to measure
        drawn.append(fig)
        return real_img(fig, alt)

    def one_metric(model: str, improved: bool) -> EvalResults:  # the narrowest chart, a long suite name
        suite = public_suite(model, improved)
        suite = suite.model_copy(
            update={"suite": "date-normalisation-four-formats", "metrics": {"accuracy": suite.metrics["accuracy"]}}
        )
        return EvalResults(model=model, suites=[suite, private_suite(model)])

    monkeypatch.setattr(report, "_img", keep)
    render_report(one_metric("cand-7", True), tmp_path, compare=one_metric("base-0", False))
    assert len(drawn) >= 4  # one per suite, stability, paraphrase, truncation
    titled = [fig for fig in drawn if any(ax.get_title() for ax in fig.axes)]
    assert len(titled) >= 3  # the suites' charts and the stability panels
    for fig in titled:
        assert_titles_inside(fig)


def longctx_suite(model: str, scores_by_cell: dict[tuple[int, float], list[list[float]]]) -> SuiteResult:
    scores = {
        task_id("passkey", length, depth, i): samples
        for (length, depth), tasks in scores_by_cell.items()
        for i, samples in enumerate(tasks)
    }
    return passkey_suite(model, scores, suite_hash="h-longctx")


# Two samples per task; a cell is the mean of its tasks' means. 2048 has no task at depth 0.5.
LONGCTX_CELLS = {
    (1024, 0.0): [[1, 1], [1, 0]],  # task means 1, .5 -> 0.75
    (1024, 0.5): [[0, 1]],  # 0.5
    (1024, 1.0): [[1, 1], [1, 1]],  # 1.0
    (2048, 0.0): [[0, 0], [0, 1]],  # 0, .5 -> 0.25
    (2048, 1.0): [[1, 1], [0, 0]],  # 1, 0 -> 0.5
}


def test_length_depth_cells_are_the_means_of_their_tasks():
    grid = length_depth_grid(longctx_suite("m", LONGCTX_CELLS))
    assert grid is not None and grid.lengths == [1024, 2048] and grid.depths == [0.0, 0.5, 1.0]
    np.testing.assert_allclose(grid.means, [[0.75, 0.5, 1.0], [0.25, np.nan, 0.5]])
    assert grid.counts.tolist() == [[2, 1, 2], [2, 0, 2]]
    assert length_depth_grid(public_suite("m", improved=False)) is None  # its ids name no length


def test_the_heatmap_shows_each_cell_next_to_the_base(tmp_path):
    cand = longctx_suite("cand-7", LONGCTX_CELLS)
    base = longctx_suite("base-0", {cell: [[0, 0]] * len(tasks) for cell, tasks in LONGCTX_CELLS.items()})
    fig = length_depth_figure(cand, base)
    base_ax, cand_ax = fig.axes[:2]
    assert [t.get_text() for t in cand_ax.texts] == [
        "0.75\nn=2",
        "0.50\nn=1",
        "1.00\nn=2",
        "0.25\nn=2",
        "–",
        "0.50\nn=2",
    ]
    assert [t.get_text() for t in base_ax.texts][:2] == ["0.00\nn=2", "0.00\nn=1"]
    assert "base base-0" in base_ax.get_title() and "cand-7" in cand_ax.get_title()
    page = render_report(
        EvalResults(model="cand-7", suites=[cand]), tmp_path, compare=EvalResults(model="base-0", suites=[base])
    ).read_text()
    assert "<h2>Length x depth</h2>" in page and 'alt="longctx-passkey by length x depth"' in page
    plain = render_report(results("cand-7"), tmp_path / "plain").read_text()
    assert "Length x depth" not in plain  # no suite there names lengths and depths


def test_nothing_truncated_is_said_not_drawn_as_an_empty_axis(tmp_path):
    clean = [s.model_copy(update={"truncation_rate": 0.0}) for s in results("cand-7").suites]
    page = render_report(EvalResults(model="cand-7", suites=clean), tmp_path).read_text()
    assert len(re.findall(r'src="data:image/png;base64,', page)) == 2 + 2  # no truncation chart
    assert "Nothing truncated: no generation hit the token limit (arith-public, holdout-private)." in page
    # against a base that did truncate, both bars are drawn
    page = render_report(EvalResults(model="cand-7", suites=clean), tmp_path, compare=results("base-0")).read_text()
    assert len(re.findall(r'src="data:image/png;base64,', page)) == 2 + 3 and "Nothing truncated" not in page


def test_compare_shows_the_delta_of_every_metric_the_gate_judges(tmp_path):
    """A secondary metric both runs kept per-task scores of has the delta the gate's rule prints."""
    from tempering.evals.gate import parse_rules, run_gate

    def with_format(res: EvalResults, right: int) -> EvalResults:
        scores = {f"arith-{i:03d}": [1.0 if i < right else 0.0] * 4 for i in range(20)}
        public = res.suites[0].model_copy(update={"metric_task_scores": {"format_ok": scores}})
        return EvalResults(model=res.model, suites=[public, *res.suites[1:]])

    base, cand = with_format(results("base-0"), 15), with_format(results("cand-7", improved=True), 10)
    (check,) = run_gate(parse_rules(["no significant regression on arith-public.format_ok"]), base, cand).rules
    assert not check.passed and "arith-public.format_ok -0.25 [-0.45, -0.05] p=0.013" in check.detail, check.detail
    console = Console(record=True, width=250)
    print_table(cand, compare=base, console=console)
    (row,) = [line for line in console.export_text().splitlines() if "format_ok" in line]
    assert "-0.250 sig" in row and "[-0.450, -0.050]" in row and "0.013" in row, row
    page = render_report(cand, tmp_path, compare=base).read_text()
    assert "-0.250 sig" in page
