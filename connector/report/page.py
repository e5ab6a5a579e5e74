"""The features job's report as one HTML page, with no script or outside file: SVG charts of the windows (a line
per model and arm), the A/B view charted, the tables of the windows, the arms and the users."""

from __future__ import annotations

import html
import math
from pathlib import Path

from connector.errors import DsparkError
from connector.report.results import parse_time, read_run, read_users
from connector.report.tables import (
    ARM_COLUMNS,
    CONTENT_COLUMNS,
    RUN_DETAILS,
    arm_rows,
    cell,
    columns_of,
    counts,
    row_order,
    series,
    weighted_mean,
)

__all__ = ["ARM_CHARTS", "CHARTS", "COLOURS", "CONTENT_CHARTS", "charts_of", "report_html", "user_rows", "write_report"]


# The report's charts: (field, title, scale for display, what an empty chart means).
CHARTS = [
    ("requests", "Requests per window", 1.0, "no windows"),
    ("error_rate", "Error rate (%)", 100.0, "no windows"),
    ("latency_ms_mean", "Round trip, mean (ms, measured by the job)", 1.0, "no request latency (replayed bodies)"),
    ("ttft_ms_mean", "Time to first token, mean (ms, reported by the server)", 1.0,
     "the server reported none (vLLM: --enable-per-request-metrics)"),
    ("tokens_per_second_mean", "Tokens per second, mean (reported by the server)", 1.0, "the server reported none"),
]  # fmt: skip


CONTENT_CHARTS = [
    ("with_code_share", "Answers with code (%)", 100.0, "no answer held code"),
    ("code_blocks_sum", "Code blocks per window", 1.0, "no answer held code"),
    ("boxed_answer_share", "Answers with a boxed answer (%)", 100.0, "no boxed answer"),
    ("risk_high", "High-risk answers per window", 1.0, "no risk levels"),
    ("score_mean", "Score, mean", 1.0, "no scores"),
]


COLOURS = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b"]


# Each line's dash and width, and its points' radius: a line drawn later is thinner, dashed and has smaller points,
# so that where two lines are equal (the arms' requests, an error rate of 0 for both) both still show.
DASHES = ["", "7 4", "2 3", "9 3 2 3", "4 2", "1 2"]


def _style(i: int, count: int) -> tuple[str, float, float, str]:
    """(colour, line width, point radius, dash) of the i-th of `count` lines."""
    wider = count - 1 - i  # lines drawn before the last
    return COLOURS[i % len(COLOURS)], 2.0 + 2.5 * min(wider, 3), 3.5 + 2.0 * min(wider, 3), DASHES[i % len(DASHES)]


def charts_of(rows: list[dict[str, object]]) -> list[tuple[str, str, float, str]]:
    """The charts of a report: the fixed ones, then those of the content features the rows have columns for."""
    present = {key for r in rows for key in r}
    return CHARTS + [c for c in CONTENT_CHARTS if c[0] in present]


def _ticks(top: float) -> list[float]:
    """0, a round step and its multiples up to the first at or above `top` (at most 5 ticks)."""
    raw = top / 4
    magnitude = 10 ** math.floor(math.log10(raw)) if raw > 0 else 1
    step = next(m * magnitude for m in (1, 2, 2.5, 5, 10) if m * magnitude >= raw)
    return [i * step for i in range(math.ceil(top / step - 1e-9) + 1)]


def _label(value: float, percent: bool = False) -> str:
    text = f"{value:,.0f}" if value >= 100 or value == int(value) else f"{value:.3g}"
    return text + "%" * percent


def _chart(rows: list[dict[str, object]], field: str, title: str, scale: float, empty: str) -> str:
    """An inline SVG line chart of `field` over the windows, one line per model and arm (`series`; no script, no
    download): a y-axis with round ticks (a share's in %, up to 100% when all are 0), the windows' start times on
    the x-axis, hollow points for partial windows, and a word where there is nothing to draw."""
    width, height, left, right, top, bottom = 640, 240, 64, 40, 34, 44
    percent = scale == 100.0
    starts = sorted({str(r["window_start"]) for r in rows})
    models = sorted({series(r) for r in rows})
    values = [float(str(r[field])) * scale for r in rows if r.get(field) is not None]
    top_value = max(values, default=0.0) or (100.0 if percent else 1.0)
    ticks = _ticks(top_value)
    top_value = max(top_value, ticks[-1])
    position = {s: i for i, s in enumerate(starts)}
    plot = width - left - right
    # One window: its point in the middle, not at both ends.
    xs = [
        left + plot * ((i + 0.5) / len(starts) if len(starts) == 1 else i / (len(starts) - 1))
        for i in range(len(starts))
    ]

    def y(v: float) -> float:
        return top + (height - top - bottom) * (1 - v / top_value)

    parts = [
        f'<svg class="chart" data-field="{field}" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" xmlns="http://www.w3.org/2000/svg" role="img">',
        f'<text x="{left}" y="20" font-weight="bold">{html.escape(title)}</text>',
    ]
    for tick in ticks:
        colour = "#888" if tick == 0 else "#e4e4e4"
        parts.append(
            f'<line x1="{left}" y1="{y(tick):.1f}" x2="{width - right}" y2="{y(tick):.1f}" stroke="{colour}"/>'
        )
        parts.append(
            f'<text class="ytick" x="{left - 6}" y="{y(tick) + 4:.1f}" text-anchor="end">{_label(tick, percent)}</text>'
        )
    # At most 7 time labels, evenly picked, so that they do not overlap.
    every = max(1, math.ceil(len(starts) / 7))
    for i, start in enumerate(starts):
        if i % every == 0:
            label = html.escape(start[11:19])
            parts.append(f'<text class="xtick" x="{xs[i]:.1f}" y="{height - 24}" text-anchor="middle">{label}</text>')
    parts.append(
        f'<text x="{left + plot / 2:.0f}" y="{height - 6}" text-anchor="middle" fill="#666">window start</text>'
    )
    if not values:
        parts.append(
            f'<text class="nodata" x="{left + plot / 2:.0f}" y="{(top + height - bottom) / 2:.0f}" '
            f'text-anchor="middle" fill="#666">no data: {html.escape(empty)}</text>'
        )
    for i, model in enumerate(models):  # the same style per line on every chart (the page's legend)
        colour, line_width, radius, dash = _style(i, len(models))
        points = sorted(
            (position[str(r["window_start"])], y(float(str(r[field])) * scale), bool(r.get("partial")))
            for r in rows
            if series(r) == model and r.get(field) is not None
        )
        # A line joins consecutive windows only: where a model has no row for a window, its line breaks.
        runs: list[list[tuple[int, float, bool]]] = []
        for point in points:
            if runs and point[0] == runs[-1][-1][0] + 1:
                runs[-1].append(point)
            else:
                runs.append([point])
        dashed = f' stroke-dasharray="{dash}"' if dash else ""
        for run in runs:
            path = " ".join(f"{xs[i]:.1f},{py:.1f}" for i, py, _ in run)
            parts.append(
                f'<polyline class="series" fill="none" stroke="{colour}" stroke-width="{line_width:g}"{dashed} '
                f'points="{path}"/>'
            )
        parts += [
            f'<circle class="{"partial" if partial else "full"}" cx="{xs[i]:.1f}" cy="{py:.1f}" r="{radius:g}" '
            f'fill="{"#fff" if partial else colour}" stroke="{colour}" stroke-width="2"/>'
            for i, py, partial in points
        ]
    parts.append("</svg>")
    return "\n".join(parts)


# The A/B view's charts, each arm over the whole run: (field, title, scale for display, format of a value).
ARM_CHARTS = [
    ("length_share", "Answers cut at max_tokens (finish_reason length), each arm over the run", 100.0, "{:.0f}%"),
    ("completion_tokens_mean", "Out tokens per answer, mean, each arm over the run", 1.0, "{:.1f}"),
]


def _arm_chart(arms: list[dict[str, object]], styles: dict[str, int], field: str, title: str, scale: float,
               spec: str) -> str:  # fmt: skip
    """An inline SVG bar chart of an arm's `field` over the whole run: a bar per model and arm in its line's
    colour, named above it (a model's name may be long), its value beside it."""
    width, left, right, top, label, bar, gap = 640, 12, 70, 34, 16, 20, 10
    height = top + len(arms) * (label + bar + gap) + 4
    values = [float(str(a[field])) * scale if a.get(field) is not None else None for a in arms]
    top_value = max((v for v in values if v is not None), default=0.0) or (100.0 if scale == 100.0 else 1.0)
    plot = width - left - right
    parts = [
        f'<svg class="armchart" data-field="{field}" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" xmlns="http://www.w3.org/2000/svg" role="img">',
        f'<text x="{left}" y="20" font-weight="bold">{html.escape(title)}</text>',
    ]
    for i, (arm, value) in enumerate(zip(arms, values, strict=True)):
        name = series(arm)
        colour = COLOURS[styles.get(name, i) % len(COLOURS)]
        y = top + i * (label + bar + gap)
        shown = "-" if value is None else spec.format(value)
        length = 0.0 if value is None else plot * value / top_value
        parts += [
            f'<text x="{left}" y="{y + 12}">{html.escape(name)}</text>',
            f'<line x1="{left}" y1="{y + label}" x2="{left}" y2="{y + label + bar}" stroke="#888"/>',
            f'<rect class="bar" x="{left}" y="{y + label}" width="{length:.1f}" height="{bar}" fill="{colour}"/>',
            f'<text class="value" x="{left + length + 6:.1f}" y="{y + label + bar * 0.7:.1f}">'
            f"{html.escape(shown)}</text>",
        ]
    parts.append("</svg>")
    return "\n".join(parts)


def _html_table(name: str, columns: list[tuple[str, str, str]], ordered: list[dict[str, object]]) -> str:
    head = "".join(f"<th>{html.escape(h)}</th>" for _, h, _ in columns)
    body = "".join(
        f'<tr class="{"partial" if r.get("partial") else "full"}">'
        + "".join(f"<td>{html.escape(cell(r, f, spec))}</td>" for f, _, spec in columns)
        + "</tr>"
        for r in ordered
    )
    return f'<table id="{name}"><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>'


# The users' table of the report: each user over the whole run.
USER_TABLE = [
    ("user_id", "user", "{}"),
    ("arm", "arm", "{}"),
    ("model", "model", "{}"),
    ("requests", "requests", "{:d}"),
    ("errors", "errors", "{:d}"),
    ("completion_tokens_mean", "out tokens", "{:.1f}"),
    ("latency_ms_mean", "round trip ms", "{:.0f}"),
]


def user_rows(users: list[dict[str, object]]) -> list[dict[str, object]]:
    """Each user over the whole run, from their windows: requests and errors added up, out tokens the mean of
    their answers (a window's mean weighted by its answers), the round trip the mean of their requests."""
    groups: dict[tuple[str, str, str], list[dict[str, object]]] = {}
    for u in users:
        groups.setdefault((str(u["user_id"]), str(u.get("arm")), str(u.get("model"))), []).append(u)
    result = []
    for (user, arm, model), windows in sorted(groups.items()):
        requests = [int(str(w["requests"])) for w in windows]
        errors = [int(str(w.get("errors") or 0)) for w in windows]
        total: dict[str, object] = {"user_id": user, "arm": arm, "model": model, "requests": sum(requests),
                                    "errors": sum(errors)}  # fmt: skip
        answered = [float(n - e) for n, e in zip(requests, errors, strict=True)]
        total["completion_tokens_mean"] = weighted_mean(windows, "completion_tokens_mean", answered)
        total["latency_ms_mean"] = weighted_mean(windows, "latency_ms_mean", [float(n) for n in requests])
        result.append(total)
    return result


def warm_up(rows: list[dict[str, object]]) -> str | None:
    """A note when the run's first window's round trip is warm-up (connections opened, the JVM's code compiled):
    its mean over 3 times the median of the later windows'. None otherwise."""
    by_window: dict[str, list[tuple[float, float]]] = {}
    for r in rows:
        if r.get("latency_ms_mean") is not None:
            by_window.setdefault(str(r["window_start"]), []).append(
                (float(str(r["latency_ms_mean"])), float(str(r["requests"])))
            )
    if len(by_window) < 3:
        return None
    means = [sum(v * n for v, n in pairs) / max(sum(n for _, n in pairs), 1) for _, pairs in sorted(by_window.items())]
    later = sorted(means[1:])
    median = later[len(later) // 2] if len(later) % 2 else (later[len(later) // 2 - 1] + later[len(later) // 2]) / 2
    if means[0] <= 3 * median:
        return None
    return (
        f"The first window's round trip ({means[0]:,.0f} ms) is warm-up: the job's connections being opened and its "
        f"code compiled while the first requests wait; the later windows' median is {median:,.0f} ms."
    )


def start_up(run: dict[str, object] | None, rows: list[dict[str, object]]) -> str | None:
    """When a request-mode run fed its first row, against when the command started (run.json's `started`): the
    gap is the job starting (the simulator, Flink's mini-cluster or the submission, its Python workers)."""
    if not run or run.get("mode") != "request" or "started" not in run:
        return None
    started = parse_time(str(run["started"])[:19])
    fed = [t for r in rows if (t := parse_time(r.get("first_event"))) is not None]
    if started is None or not fed:
        return None
    first = min(fed)
    gap = (first - started).total_seconds()
    return (
        f"{first:%H:%M:%S}, {gap:.0f} s after the start: the job starting (the simulator, Flink's cluster, its "
        "Python workers); windows are aligned to the clock, so the first one starts before it"
    )


def report_html(
    rows: list[dict[str, object]],
    errors: int,
    source: Path,
    run: dict[str, object] | None = None,
    users: list[dict[str, object]] | None = None,
) -> str:
    """A self-contained page: the run's details, totals, one chart per feature, the summary as a table, and
    where the rows had arms, the A/B view (charted) and the users."""
    requests = sum(int(str(r["requests"])) for r in rows)
    models = sorted({series(r) for r in rows})
    windows = _html_table("windows", columns_of(rows), sorted(rows, key=row_order))
    arms = arm_rows(rows, users or [])
    if arms:
        present = {key for r in arms for key, value in r.items() if value is not None}
        columns = ARM_COLUMNS + [c for c in CONTENT_COLUMNS if c[0] in present]
        styles = {name: i for i, name in enumerate(models)}
        bars = "\n".join(_arm_chart(arms, styles, *chart) for chart in ARM_CHARTS)
        windows = (
            f"<h2>A/B: each arm over the whole run</h2>\n{bars}\n" + _html_table("arms", columns, arms) + "\n" + windows
        )
    if users:
        windows += "\n<h2>Users over the whole run</h2>\n" + _html_table("users", USER_TABLE, user_rows(users))
    charts = "\n".join(_chart(rows, *chart) for chart in charts_of(rows))
    # Notes on why a chart's line is as it is, above the charts (between two, one would break their rows).
    notes = "".join(
        f'<p class="note" id="{name}">{html.escape(note)}</p>' for name, note in [("warm-up", warm_up(rows))] if note
    )
    keys = []
    for i, model in enumerate(models):  # each line's sample: its colour, width, dash and point
        colour, width, radius, dash = _style(i, len(models))
        dashed = f' stroke-dasharray="{dash}"' if dash else ""
        keys.append(
            f'<span class="key"><svg width="40" height="14"><line x1="2" y1="7" x2="38" y2="7" stroke="{colour}" '
            f'stroke-width="{min(width, 5):g}"{dashed}/><circle cx="20" cy="7" r="{min(radius, 6):g}" '
            f'fill="{colour}"/></svg> {html.escape(model)}</span>'
        )
    legend = " ".join(keys)
    if any(r.get("partial") for r in rows):
        legend += " &nbsp; &#9675; a window the run covered only in part (marked * in the table)"
    shown = dict(run or {})
    if (fed := start_up(run, rows)) is not None:
        shown["first_fed"] = fed
    details = "".join(
        f"<dt>{html.escape(label)}</dt><dd>{html.escape(str(shown[key]))}</dd>"
        for key, label in [*RUN_DETAILS, ("first_fed", "first row fed")]
        if key in shown
    )
    simulated = ""
    if run and run.get("simulator"):
        simulated = (
            '<p class="note" id="simulated">The answers came from the built-in simulator (the job started it: no '
            "--endpoint was given). Its text, token counts, finish reasons and latencies are made up; they show "
            "what the job computes, not how a model answers.</p>"
        )
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>dspark-vllm features</title>
<style>
body {{ font-family: sans-serif; margin: 24px; color: #222; }}
.chart, .armchart {{ border: 1px solid #ddd; margin: 8px 8px 0 0; font-size: 12px; }}
.armchart {{ border-color: #ccd; }}
.note {{ font-size: 13px; color: #444; max-width: 640px; }}
#simulated {{ background: #fff4d6; border: 1px solid #e0c060; padding: 6px 10px; }}
.key {{ margin-right: 16px; white-space: nowrap; }} .key svg {{ vertical-align: middle; }}
#run {{ display: grid; grid-template-columns: max-content auto; gap: 2px 12px; font-size: 13px; }}
#run dt {{ color: #666; }} #run dd {{ margin: 0; }}
table {{ border-collapse: collapse; margin-top: 16px; font-size: 13px; }}
th, td {{ border: 1px solid #ccc; padding: 3px 8px; text-align: right; }}
th:nth-child(-n+4), td:nth-child(-n+4) {{ text-align: left; }}
tr.partial td {{ color: #777; font-style: italic; }}
</style></head><body>
<h1>dspark-vllm features</h1>
{simulated}
<dl id="run">{details or "<dt>run</dt><dd>no details recorded</dd>"}</dl>
<p id="totals">{counts(rows)}, {requests} requests, {errors} error rows, from {html.escape(str(source))}</p>
<p id="legend">{legend}</p>
{notes}
{charts}
{windows}
</body></html>
"""


def write_report(path: Path, output: Path, rows: list[dict[str, object]], errors: int) -> None:
    page = report_html(rows, errors, output / "features", read_run(output), read_users(output))
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(page, encoding="utf-8")
    except OSError as exc:
        raise DsparkError(f"report {path}: cannot write: {exc.strerror}") from None
    print(f"features: report -> {path}", flush=True)
