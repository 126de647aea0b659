"""The evaluation report: one self-contained `report.html`, and the same numbers as a terminal table.

    render_report(candidate, "runs/eval", compare=base)   # -> runs/eval/report.html
    print_table(candidate, compare=base)

`compare` is the base model's `EvalResults`; `results` is the model being reported (the
candidate). With a base, each suite present in both shows before/after bars and the paired
delta of its primary metric (`tempering.evals.results.compare`: bootstrap over tasks, the
delta is significant when its interval excludes 0). A suite that cannot be paired (other
suite hash, other task ids) raises, as it does for the gate. A suite whose task ids name a
length and a depth (the `longctx-*` suites) also gets a length x depth heatmap
(`evals/report_longctx.py`).

The HTML holds everything inline: CSS in a <style> block, figures as base64 PNG data URIs,
no scripts and no external URLs, so it can be mailed or archived as one file.

Private suites show aggregates only. Results never hold task text; the one per-task detail
the report shows (the ids of the least stable tasks) is left out for private suites. Given the
run's `samples` (samples.jsonl rows), a Samples section lists a few generations of each public
suite with their prompt pictures (`evals/report_samples.py`).
"""

from __future__ import annotations

import base64
import html
import io
from pathlib import Path
from typing import Any, Sequence

import matplotlib
import numpy as np
from matplotlib.figure import Figure
from rich import box
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from tempering.evals.report_longctx import length_depth_figure
from tempering.evals.report_samples import samples_section
from tempering.evals.results import EvalResults, MetricResult, SuiteComparison, SuiteResult, compare_metrics
from tempering.evals.results import compare as compare_results
from tempering.tables import print_wide

BASE_COLOR, CAND_COLOR = "#9aa5b1", "#2f6fdf"
UNSTABLE_SHOWN = 5  # least stable task ids listed per public suite

_CSS = """
body { font-family: -apple-system, "Segoe UI", Helvetica, Arial, sans-serif; margin: 24px auto;
       max-width: 1180px; color: #1d232b; background: #ffffff; padding: 0 16px; }
h1 { font-size: 24px; margin-bottom: 4px; } h2 { font-size: 18px; margin-top: 32px;
     border-bottom: 1px solid #d8dde3; padding-bottom: 4px; }
.meta { color: #5b6675; font-size: 13px; }
.grid { display: flex; flex-wrap: wrap; gap: 12px; }
.grid img, .panel img { border: 1px solid #e3e7ec; border-radius: 4px; max-width: 100%; height: auto; }
table { border-collapse: collapse; font-size: 13px; margin-top: 8px; }
th, td { border-bottom: 1px solid #e3e7ec; padding: 4px 10px; text-align: right; }
th { background: #f3f5f8; } td.name, th.name { text-align: left; }
.up { color: #1a7f37; font-weight: 600; } .down { color: #c0362c; font-weight: 600; }
.private { font-size: 11px; color: #8a4b00; background: #fff3e0; border-radius: 3px; padding: 1px 5px; }
.note { color: #5b6675; font-size: 12px; }
table.samples th, table.samples td { text-align: left; vertical-align: top; white-space: pre-wrap; max-width: 480px; }
img.sample { width: 96px; height: auto; image-rendering: pixelated; display: block; margin: 2px 0; }
"""


def render_report(
    results: EvalResults,
    out_dir: str | Path,
    *,
    compare: EvalResults | None = None,
    samples: Sequence[dict[str, Any]] = (),
    seed: int = 0,
) -> Path:
    """Write `out_dir/report.html` for `results`, against the base `compare` when given (paired
    bootstrap with `seed`, the gate's: the deltas shown are the ones it judges).

    `samples` are the run's samples.jsonl rows, stored in `out_dir` (their image paths are read
    against it); with them the report lists a few generations per public suite.

    Returns:
        The path of the written report.
    Raises:
        ValueError: when a suite in both results cannot be paired (see `results.compare`).
    """
    comparisons = _comparisons(results, compare, seed)
    base_suites = {s.suite: s for s in compare.suites} if compare is not None else {}
    with matplotlib.rc_context({"text.parse_math": False}):  # names are plain text: "$x$" is not TeX
        body = _body(results, compare, base_suites, comparisons)
    out = Path(out_dir)
    body = "\n".join([body, *samples_section(results.suites, samples, out)])
    out.mkdir(parents=True, exist_ok=True)
    path = out / "report.html"
    title = html.escape(f"Tempering eval report: {results.model}")
    path.write_text(
        f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8"><title>{title}</title>'
        f"<style>{_CSS}</style></head><body>\n{body}\n</body></html>\n",
        encoding="utf-8",
    )
    return path


def _body(
    results: EvalResults,
    compare: EvalResults | None,
    base_suites: dict[str, SuiteResult],
    comparisons: dict[tuple[str, str], SuiteComparison],
) -> str:
    parts = [
        _header(results, compare),
        "<h2>Metrics</h2>",
        '<p class="note">Bars: mean over tasks; whiskers: the confidence interval recorded with the results '
        "(bootstrap over tasks, 95% by default).</p>",
        '<div class="grid">',
    ]
    for suite in results.suites:
        primary = comparisons.get((suite.suite, suite.primary_metric or ""))
        fig = _metrics_figure(suite, base_suites.get(suite.suite), primary)
        parts.append(_img(fig, f"metrics of {suite.suite}"))
    parts.append("</div>")
    parts += _length_depth_section(results.suites, base_suites)
    parts += _stability_section(results.suites)
    parts += _figure_section(
        "Paraphrase spread", _paraphrase_figure(results.suites), "No suite recorded paraphrased variants."
    )
    parts += _figure_section(
        "Truncation rate", _truncation_figure(results.suites, base_suites), _no_truncation(results.suites, base_suites)
    )
    parts += ["<h2>All numbers</h2>", _numbers_table(results, base_suites, comparisons)]
    parts += _contamination_section(results.suites)
    return "\n".join(parts)


def print_table(
    results: EvalResults, *, compare: EvalResults | None = None, console: Console | None = None, seed: int = 0
) -> None:
    """Every metric of every suite as a rich table; with a base, the paired delta of every metric
    that can be paired (`_comparisons`, bootstrap `seed`)."""
    comparisons = _comparisons(results, compare, seed)
    base_suites = {s.suite: s for s in compare.suites} if compare is not None else {}
    table = Table(
        box=box.SIMPLE_HEAD, title=escape(results.model + (f"  vs base {compare.model}" if compare is not None else ""))
    )
    for col in _columns(with_base=compare is not None):
        table.add_column(col, justify="left" if col in ("suite", "metric") else "right")
    for suite in results.suites:
        for metric in suite.metrics.values():
            name = escape(suite.suite) + (" (private)" if suite.private else "")
            row = [
                name,
                escape(_metric_label(suite, metric.name)),
                _f(metric.mean),
                _ci(metric.low, metric.high),
                str(metric.n),
                _f(metric.std),
            ]
            if compare is not None:
                paired = comparisons.get((suite.suite, metric.name))
                row += _delta_cells(base_suites.get(suite.suite), paired, metric.name, rich=True)
            table.add_row(*row)
    print_wide(console or Console(), table)


# ---------------------------------------------------------------------------- numbers


def _comparisons(
    results: EvalResults, base: EvalResults | None, seed: int = 0
) -> dict[tuple[str, str], SuiteComparison]:
    """(suite, metric) -> the paired comparison the gate reads: the primary metric of each shared
    suite (`results.compare`) and every other metric both runs kept per-task scores of
    (`results.compare_metrics`), with the same bootstrap seed."""
    if base is None:
        return {}
    paired = [*compare_results(base, results, seed=seed), *compare_metrics(base, results, seed=seed)]
    return {(c.suite, c.metric): c for c in paired}


def _columns(with_base: bool) -> list[str]:
    base = ["base", "delta", "delta CI", "p"] if with_base else []
    return ["suite", "metric", "mean", "CI", "n", "seed std", *base]


def _f(x: float | None, digits: int = 3) -> str:
    return "–" if x is None else f"{x:.{digits}f}"


def _ci(low: float | None, high: float | None) -> str:
    return "–" if low is None or high is None else f"[{low:.3f}, {high:.3f}]"


def _metric_label(suite: SuiteResult, name: str) -> str:
    return name + (" *" if name == suite.primary_metric else "")


def _delta_cells(base: SuiteResult | None, comparison: SuiteComparison | None, metric: str, *, rich: bool) -> list[str]:
    """Base mean, delta, delta CI and p for one metric; delta and test where it was paired (`_comparisons`)."""
    base_metric = base.metrics.get(metric) if base is not None else None
    if comparison is None or comparison.metric != metric:
        return [_f(base_metric.mean if base_metric else None), "–", "–", "–"]
    c = comparison.comparison
    delta = f"{c.delta:+.3f}" + (" sig" if c.significant else "")
    if rich and c.significant:
        delta = f"[{'green' if c.delta > 0 else 'red'}]{delta}[/]"
    return [_f(comparison.base_mean), delta, _ci(c.low, c.high), f"{c.p_value:.3g}"]


def task_variances(suite: SuiteResult) -> dict[str, float]:
    """Population variance (ddof=0) of each task's samples, for tasks with two or more samples."""
    return {task: float(np.var(scores)) for task, scores in suite.task_scores.items() if len(scores) >= 2}


# ---------------------------------------------------------------------------- HTML pieces


def _header(results: EvalResults, base: EvalResults | None) -> str:
    against = f" &middot; compared with base <b>{html.escape(base.model)}</b>" if base is not None else ""
    return (
        f"<h1>Eval report: {html.escape(results.model)}</h1>"
        f'<div class="meta">{len(results.suites)} suite(s) &middot; '
        f"created {results.created.isoformat(timespec='minutes')} &middot; "
        f"Tempering {html.escape(results.tempering_version)}{against}</div>"
    )


def _img(fig: Figure, alt: str) -> str:
    _widen_to_titles(fig)
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=100)
    data = base64.b64encode(buf.getvalue()).decode("ascii")
    return f'<img alt="{html.escape(alt)}" src="data:image/png;base64,{data}">'


def _figure_section(title: str, fig: Figure | None, empty: str) -> list[str]:
    body = _img(fig, title) if fig is not None else f'<p class="note">{empty}</p>'
    return [f"<h2>{title}</h2>", f'<div class="panel">{body}</div>']


def _length_depth_section(suites: Sequence[SuiteResult], base_suites: dict[str, SuiteResult]) -> list[str]:
    """A heatmap per suite whose task ids name lengths and depths (long-context suites); none otherwise."""
    figures = [(s.suite, fig) for s in suites if (fig := length_depth_figure(s, base_suites.get(s.suite))) is not None]
    if not figures:
        return []
    return [
        "<h2>Length x depth</h2>",
        '<p class="note">Primary metric by prompt length (rows) and depth of the answer in the haystack '
        "(columns): the mean over the tasks in each cell, n of them.</p>",
        '<div class="grid">',
        *(_img(fig, f"{name} by length x depth") for name, fig in figures),
        "</div>",
    ]


def _stability_section(suites: Sequence[SuiteResult]) -> list[str]:
    parts = _figure_section(
        "Stability", _stability_figure(suites), "No suite recorded repeats or several samples per task."
    )
    rows = []
    for suite in suites:
        variances = task_variances(suite)
        unstable = sorted((-v, t) for t, v in variances.items() if v > 0)[:UNSTABLE_SHOWN]
        if suite.private and variances:
            rows.append(
                f'<tr><td class="name">{html.escape(suite.suite)} <span class="private">private</span></td>'
                f'<td class="name">per-task detail withheld</td></tr>'
            )
        elif unstable:
            listed = ", ".join(f"{html.escape(t)} ({-v:.3f})" for v, t in unstable)
            rows.append(f'<tr><td class="name">{html.escape(suite.suite)}</td><td class="name">{listed}</td></tr>')
    if rows:
        parts += [
            '<p class="note">Least stable tasks (variance across samples):</p><table><tr>'
            '<th class="name">suite</th><th class="name">task (variance)</th></tr>',
            *rows,
            "</table>",
        ]
    return parts


def _numbers_table(
    results: EvalResults, base_suites: dict[str, SuiteResult], comparisons: dict[tuple[str, str], SuiteComparison]
) -> str:
    with_base = bool(base_suites)
    rows = [
        "<table><tr>"
        + "".join(f'<th class="{"name" if h in ("suite", "metric") else ""}">{h}</th>' for h in _columns(with_base))
        + "</tr>"
    ]
    for suite in results.suites:
        tag = ' <span class="private">private</span>' if suite.private else ""
        for metric in suite.metrics.values():
            cells = [_f(metric.mean), _ci(metric.low, metric.high), str(metric.n), _f(metric.std)]
            if with_base:
                base = base_suites.get(suite.suite)
                cells += _delta_cells(base, comparisons.get((suite.suite, metric.name)), metric.name, rich=False)
            rows.append(
                f'<tr><td class="name">{html.escape(suite.suite)}{tag}</td>'
                f'<td class="name">{html.escape(_metric_label(suite, metric.name))}</td>'
                + "".join(f"<td{_delta_class(c)}>{html.escape(c)}</td>" for c in cells)
                + "</tr>"
            )
    rows.append("</table>")
    rows.append(_suite_facts_table(results.suites))
    return (
        "\n".join(rows) + '<p class="note">* primary metric (what a suite-level gate rule reads). '
        "delta: paired over tasks, for every metric both runs kept per-task scores of (what "
        "<code>suite.metric</code> gate rules read). sig: the delta's interval excludes 0.</p>"
    )


def _delta_class(cell: str) -> str:
    if not cell.endswith(" sig"):
        return ""
    return ' class="up"' if cell.startswith("+") else ' class="down"'


def _contamination_section(suites: Sequence[SuiteResult]) -> list[str]:
    """Training rows (ids or file:line) found to hold each suite's tasks; rows name training data only."""
    dirty = [s for s in suites if s.contaminated_rows]
    if not dirty:
        return []
    parts = [
        "<h2>Contamination</h2>",
        '<p class="note">Training rows of this model\'s lineage that contain suite tasks (see evals.leakage).</p>',
        '<table><tr><th class="name">suite</th><th>rows</th><th class="name">training rows</th></tr>',
    ]
    for s in dirty:
        listed = "<br>".join(html.escape(r) for r in s.contaminated_rows)
        parts.append(
            f'<tr><td class="name">{html.escape(s.suite)}</td><td>{len(s.contaminated_rows)}</td>'
            f'<td class="name">{listed}</td></tr>'
        )
    return parts + ["</table>"]


def _suite_facts_table(suites: Sequence[SuiteResult]) -> str:
    head = [
        "suite",
        "model",
        "tasks",
        "task var.",
        "flip share",
        "repeat std",
        "paraphrase spread",
        "truncation",
        "verifier errors",
        "contamination hits",
    ]
    rows = [
        "<table><tr>"
        + "".join(f'<th class="{"name" if h in ("suite", "model") else ""}">{h}</th>' for h in head)
        + "</tr>"
    ]
    for s in suites:
        st, pp = s.stability, s.paraphrase
        cells = [
            str(len(s.task_scores) or s.metrics[s.primary_metric].n),
            _f(st.mean_task_variance if st else None),
            _f(st.flip_share if st else None),
            _f(st.repeat_std if st else None),
            _f(pp.spread if pp else None),
            "–" if s.truncation_rate is None else f"{s.truncation_rate:.1%}",
            str(s.verifier_errors),
            str(s.contamination_hits),
        ]
        rows.append(
            f'<tr><td class="name">{html.escape(s.suite)}</td><td class="name">{html.escape(s.model_id)}</td>'
            + "".join(f"<td>{html.escape(c)}</td>" for c in cells)
            + "</tr>"
        )
    return "\n".join(rows + ["</table>"])


def _widen_to_titles(fig: Figure, pad_in: float = 0.1) -> None:
    """Widen `fig` until every axes title lies inside it (a layout never shrinks a title, so a
    long suite name or the delta line over a one-bar chart would be cut at the PNG's edge).
    A title is centred over its axes, not the figure: widen by twice the larger overhang."""
    for _ in range(4):  # the layout re-centres the axes after each widening
        fig.draw_without_rendering()
        box = fig.bbox
        over = max(
            (
                max(box.x0 - t.x0, t.x1 - box.x1)
                for t in (ax.title.get_window_extent() for ax in fig.axes if ax.get_title())
            ),
            default=0.0,
        )
        if over <= 0:
            return
        fig.set_figwidth(fig.get_figwidth() + 2 * (over / fig.dpi + pad_in))


# ---------------------------------------------------------------------------- figures


def _bar_errors(metrics: Sequence[MetricResult | None]) -> np.ndarray:
    """(2, M) distances from each mean down to low and up to high (0 where no interval)."""
    err = np.zeros((2, len(metrics)))
    for i, m in enumerate(metrics):
        if m is not None and m.low is not None and m.high is not None:
            err[:, i] = [max(m.mean - m.low, 0.0), max(m.high - m.mean, 0.0)]
    return err


def _metrics_figure(suite: SuiteResult, base: SuiteResult | None, comparison: SuiteComparison | None) -> Figure:
    names = list(suite.metrics)
    fig = Figure(figsize=(max(3.6, 1.3 * len(names) + 1.6), 3.4), layout="constrained")
    ax = fig.add_subplot()
    x = np.arange(len(names))
    cand = [suite.metrics[n] for n in names]
    values = [m.mean for m in cand] + [m.high for m in cand if m.high is not None]
    if base is None:
        ax.bar(x, [m.mean for m in cand], 0.6, yerr=_bar_errors(cand), capsize=4, color=CAND_COLOR)
    else:
        old = [base.metrics.get(n) for n in names]
        values += [m.mean for m in old if m is not None] + [m.high for m in old if m is not None and m.high is not None]
        ax.bar(
            x - 0.2,
            [m.mean if m else 0.0 for m in old],
            0.4,
            yerr=_bar_errors(old),
            capsize=3,
            color=BASE_COLOR,
            label=f"base {base.model_id}",
        )
        ax.bar(
            x + 0.2,
            [m.mean for m in cand],
            0.4,
            yerr=_bar_errors(cand),
            capsize=3,
            color=CAND_COLOR,
            label=suite.model_id,
        )
        fig.legend(fontsize=7, loc="outside lower center", ncols=2, frameon=False)
    for i, m in enumerate(cand):  # the value sits above the whisker, where it cannot collide with it
        top = m.high if m.high is not None else m.mean
        ax.annotate(
            f"{m.mean:.3f}",
            (x[i] + (0.2 if base is not None else 0.0), top),
            xytext=(0, 2),
            textcoords="offset points",
            ha="center",
            va="bottom",
            fontsize=7,
        )
    ax.set_xticks(x, [_metric_label(suite, n) for n in names], fontsize=8)
    if all(0.0 <= v <= 1.0 for v in values):
        ax.set_ylim(0, 1.12)
    ax.spines[["top", "right"]].set_visible(False)
    title = suite.suite + ("  [private]" if suite.private else "")
    if comparison is not None:
        c = comparison.comparison
        title += f"\n{comparison.metric}: Δ {c.delta:+.3f} [{c.low:+.3f}, {c.high:+.3f}], p={c.p_value:.3g}" + (
            " (significant)" if c.significant else " (n.s.)"
        )
    ax.set_title(title, fontsize=9)
    return fig


def _stability_figure(suites: Sequence[SuiteResult]) -> Figure | None:
    recorded = [s for s in suites if s.stability is not None]
    spread = [(s.suite, list(task_variances(s).values())) for s in suites]
    spread = [(name, v) for name, v in spread if v]
    if not recorded and not spread:
        return None
    fig = Figure(figsize=(10, 3.4), layout="constrained")
    left, right = fig.subplots(1, 2)
    if recorded:
        y = np.arange(len(recorded))
        for offset, label, field, color in [
            (-0.27, "mean task variance", "mean_task_variance", "#2f6fdf"),
            (0.0, "flip share", "flip_share", "#e3a21a"),
            (0.27, "repeat std", "repeat_std", "#6b8e23"),
        ]:
            left.barh(y + offset, [getattr(s.stability, field) for s in recorded], 0.27, label=label, color=color)
        left.set_yticks(y, [s.suite for s in recorded], fontsize=8)
        left.set_ylim(max(len(recorded), 2) - 0.5, -0.5)  # a lone suite keeps slim bars
        left.legend(fontsize=7, frameon=False)
    else:
        _empty_axes(left, "no repeats recorded")
    left.set_title("Across repeats (recorded)", fontsize=9)
    if spread:
        jitter = np.random.default_rng(0)  # a strip plot: one dot per task, spread vertically to stay visible
        for y, (_, v) in enumerate(spread):
            right.scatter(v, y + jitter.uniform(-0.2, 0.2, len(v)), s=9, alpha=0.5, color=CAND_COLOR)
            right.plot([np.mean(v)] * 2, [y - 0.3, y + 0.3], color="#1d232b", linewidth=2)
        right.set_yticks(range(len(spread)), [name for name, _ in spread], fontsize=8)
        right.set_ylim(len(spread) - 0.5, -0.5)
        right.set_xlabel("variance of a task's samples (bar: mean)", fontsize=8)
    else:
        _empty_axes(right, "one sample per task")
    right.set_title("Per-task variance across samples", fontsize=9)
    for ax in (left, right):
        ax.spines[["top", "right"]].set_visible(False)
    return fig


def _empty_axes(ax, text: str) -> None:
    ax.text(0.5, 0.5, text, ha="center", va="center", fontsize=9, color="#5b6675", transform=ax.transAxes)
    ax.set_xticks([]), ax.set_yticks([])


def _paraphrase_figure(suites: Sequence[SuiteResult]) -> Figure | None:
    recorded = [(s.suite, s.paraphrase) for s in suites if s.paraphrase is not None]
    if not recorded:
        return None
    fig = Figure(figsize=(7, 0.6 * len(recorded) + 1.2), layout="constrained")
    ax = fig.add_subplot()
    for y, (_, p) in enumerate(recorded):
        ax.hlines(y, p.min, p.max, color=CAND_COLOR, linewidth=3)
        ax.plot([p.min, p.max], [y, y], "o", color=CAND_COLOR)
        ax.annotate(
            f"spread {p.spread:.3f} (std {p.std:.3f}, {p.n} variants)",
            (p.max, y),
            xytext=(8, -3),
            textcoords="offset points",
            fontsize=8,
        )
    ax.set_yticks(range(len(recorded)), [name for name, _ in recorded], fontsize=8)
    ax.set_ylim(max(len(recorded), 2) - 0.5, -0.5)
    if all(0.0 <= p.min and p.max <= 1.0 for _, p in recorded):
        ax.set_xlim(0.0, 1.0)
    ax.set_xlabel("accuracy across paraphrased variants (min to max)", fontsize=8)
    ax.spines[["top", "right"]].set_visible(False)
    return fig


def _truncated_anywhere(suites: Sequence[SuiteResult], base_suites: dict[str, SuiteResult]) -> bool:
    both = [*suites, *(base_suites.get(s.suite) for s in suites)]
    return any(s is not None and s.truncation_rate for s in both)


def _no_truncation(suites: Sequence[SuiteResult], base_suites: dict[str, SuiteResult]) -> str:
    """What the truncation section says when it draws no chart (an axis of zero-length bars says nothing)."""
    recorded = [html.escape(s.suite) for s in suites if s.truncation_rate is not None]
    if not recorded:
        return "No suite recorded a truncation rate."
    where = ", ".join(recorded) + (", and the base" if base_suites else "")
    return f"Nothing truncated: no generation hit the token limit ({where})."


def _truncation_figure(suites: Sequence[SuiteResult], base_suites: dict[str, SuiteResult]) -> Figure | None:
    recorded = [s for s in suites if s.truncation_rate is not None]
    if not recorded or not _truncated_anywhere(recorded, base_suites):
        return None
    fig = Figure(figsize=(7, 0.6 * len(recorded) + 1.2), layout="constrained")
    ax = fig.add_subplot()
    y = np.arange(len(recorded))
    rates = [100 * r for s in recorded if (r := s.truncation_rate) is not None]  # every recorded one
    base = [base_suites.get(s.suite) for s in recorded]
    if any(b is not None and b.truncation_rate is not None for b in base):
        ax.barh(
            y - 0.2, [100 * (b.truncation_rate or 0.0) if b else 0.0 for b in base], 0.4, color=BASE_COLOR, label="base"
        )
        ax.barh(y + 0.2, rates, 0.4, color=CAND_COLOR, label="candidate")
        ax.legend(fontsize=7, frameon=False)
    else:
        ax.barh(y, rates, 0.5, color=CAND_COLOR)
    ax.set_yticks(y, [s.suite for s in recorded], fontsize=8)
    ax.invert_yaxis()
    ax.set_xlabel("% of generations cut off at the token limit", fontsize=8)
    ax.spines[["top", "right"]].set_visible(False)
    return fig
