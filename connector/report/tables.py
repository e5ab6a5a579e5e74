"""The features job's summary as text: a table per window, model and arm, the A/B view (each arm over the whole
run) and the run's details in one line."""

from __future__ import annotations

from pathlib import Path

__all__ = [
    "ARM_COLUMNS",
    "CONTENT_COLUMNS",
    "RUN_DETAILS",
    "SUMMARY_COLUMNS",
    "arm_rows",
    "arm_table",
    "cell",
    "columns_of",
    "counts",
    "row_order",
    "series",
    "summary",
    "summary_table",
    "weighted_mean",
]


# (field, heading, format) of the summary table and the report's table; content features follow when present.
SUMMARY_COLUMNS = [
    ("window_start", "window start", "{}"),
    ("window_end", "end", "{}"),
    ("model", "model", "{}"),
    ("arm", "arm", "{}"),
    ("requests", "requests", "{:d}"),
    ("errors", "errors", "{:d}"),
    ("error_rate", "error %", "{:.1%}"),
    ("latency_ms_mean", "round trip ms", "{:.0f}"),
    ("latency_ms_max", "max ms", "{:.0f}"),
    ("ttft_ms_mean", "server ttft ms", "{:.0f}"),
    ("tokens_per_second_mean", "tokens/s", "{:.1f}"),
    ("completion_tokens_mean", "out tokens", "{:.1f}"),
]


# The profile's content features (`content_features`), as the summary and the report name them.
CONTENT_COLUMNS = [
    ("code_blocks_sum", "code blocks", "{:d}"),
    ("with_code_share", "with code %", "{:.0%}"),
    ("boxed_answer_share", "boxed answer %", "{:.0%}"),
    ("risk_low", "risk low", "{:d}"),
    ("risk_medium", "risk medium", "{:d}"),
    ("risk_high", "risk high", "{:d}"),
    ("score_mean", "score", "{:.2f}"),
]


def columns_of(rows: list[dict[str, object]]) -> list[tuple[str, str, str]]:
    """The summary's columns: the fixed ones, then the content features the rows hold."""
    present = {key for r in rows for key, value in r.items() if value is not None}
    fixed = [c for c in SUMMARY_COLUMNS if c[0] != "arm" or "arm" in present]
    return fixed + [c for c in CONTENT_COLUMNS if c[0] in present]


def cell(row: dict[str, object], field: str, spec: str) -> str:
    value = row.get(field)
    if value is None:
        return "-"
    if field == "window_start":
        return str(value)[:19] + (" *" if row.get("partial") else "")
    if field == "window_end":  # the date is the start's
        return str(value)[11:19]
    if isinstance(value, str):
        return value
    return spec.format(int(value) if spec == "{:d}" else value)  # type: ignore[call-overload]


def row_order(row: dict[str, object]) -> tuple[str, str, str]:
    return (str(row.get("model")), str(row.get("arm") or ""), str(row.get("window_start")))


def series(row: dict[str, object]) -> str:
    """The line a row belongs to on a chart: its model, and its arm where it has one."""
    return str(row["model"]) + (f" / arm {row['arm']}" if row.get("arm") is not None else "")


def summary_table(rows: list[dict[str, object]]) -> str:
    """One line per model, arm and window, in time order within each; columns aligned."""
    lines = [_aligned(columns_of(rows), sorted(rows, key=row_order))]
    if any(r.get("partial") for r in rows):
        lines.append("* a window the run covered only in part: its counts are not a drop or a rise")
    return "\n".join(lines)


def _aligned(columns: list[tuple[str, str, str]], ordered: list[dict[str, object]]) -> str:
    table = [[heading for _, heading, _ in columns]]
    table += [[cell(r, field, spec) for field, _, spec in columns] for r in ordered]
    widths = [max(len(line[i]) for line in table) for i in range(len(columns))]
    # Text columns left-aligned, numbers right-aligned.
    texts = [spec == "{}" for _, _, spec in columns]
    lines = [
        "  ".join(c.ljust(w) if text else c.rjust(w) for c, w, text in zip(line, widths, texts, strict=True))
        for line in table
    ]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


# The A/B view: (field, heading, format) of each arm over the whole run; the content features follow.
ARM_COLUMNS = [
    ("model", "model", "{}"),
    ("arm", "arm", "{}"),
    ("users", "users", "{:d}"),
    ("requests", "requests", "{:d}"),
    ("errors", "errors", "{:d}"),
    ("error_rate", "error %", "{:.1%}"),
    ("length_share", "length %", "{:.0%}"),
    ("latency_ms_mean", "round trip ms", "{:.0f}"),
    ("completion_tokens_mean", "out tokens", "{:.1f}"),
]


# How a window's feature adds up over a run: a sum, or a mean weighted by the rows it is over (`requests`, or
# `answered`: the rows that are no error).
_SUMS = {"requests", "errors", "code_blocks_sum", "risk_low", "risk_medium", "risk_high"}


_WEIGHTS = {"latency_ms_mean": "requests", "length_share": "answered", "completion_tokens_mean": "answered",
            "with_code_share": "answered", "boxed_answer_share": "answered", "score_mean": "answered"}  # fmt: skip


def weighted_mean(windows: list[dict[str, object]], field: str, weights: list[float]) -> float | None:
    """The mean of the windows' means of `field`, each weighted by the rows it is over (None where none has one)."""
    pairs = [(float(str(w[field])), wt) for w, wt in zip(windows, weights, strict=True) if w.get(field) is not None]
    weight = sum(wt for _, wt in pairs)
    return sum(v * wt for v, wt in pairs) / weight if weight else None


def arm_rows(rows: list[dict[str, object]], users: list[dict[str, object]]) -> list[dict[str, object]]:
    """Each model and arm over the whole run, from its windows: sums added up, means weighted by the rows they
    are over (so an arm's mean is its rows' mean), and how many users asked in it (from OUTPUT/users)."""
    groups: dict[tuple[str, str], list[dict[str, object]]] = {}
    for r in rows:
        if r.get("arm") is not None:
            groups.setdefault((str(r["model"]), str(r["arm"])), []).append(r)
    result = []
    for (model, arm), windows in sorted(groups.items()):
        total: dict[str, object] = {"model": model, "arm": arm}
        total["users"] = len({u["user_id"] for u in users if (str(u.get("model")), str(u.get("arm"))) == (model, arm)})
        weights = {
            "requests": [float(str(w["requests"])) for w in windows],
            "answered": [float(str(w["requests"])) - float(str(w["errors"])) for w in windows],
        }
        fields = {key for w in windows for key, value in w.items() if value is not None}
        for field in sorted(fields & (_SUMS | set(_WEIGHTS))):
            if field in _SUMS:
                total[field] = sum(int(str(w[field])) for w in windows if w.get(field) is not None)
                continue
            total[field] = weighted_mean(windows, field, weights[_WEIGHTS[field]])
        total["error_rate"] = int(str(total["errors"])) / int(str(total["requests"])) if total["requests"] else None
        result.append(total)
    return result


def arm_table(arms: list[dict[str, object]]) -> str:
    present = {key for r in arms for key, value in r.items() if value is not None}
    columns = ARM_COLUMNS + [c for c in CONTENT_COLUMNS if c[0] in present]
    return _aligned(columns, arms)


# (key, label) of the run's details, as run.json holds them.
RUN_DETAILS = [
    ("mode", "mode"),
    ("profile", "profile"),
    ("backend", "parse backend"),
    ("endpoint", "endpoint"),
    ("simulator", "answers from"),
    ("model", "model"),
    ("prompts", "prompts from"),
    ("arms", "arms"),
    ("replay", "replayed from"),
    ("rate", "prompts/s"),
    ("duration_s", "duration s"),
    ("window_s", "window s"),
    ("started", "started"),
]


def _run_line(run: dict[str, object]) -> str:
    return ", ".join(f"{label} {run[key]}" for key, label in RUN_DETAILS if key in run)


def counts(rows: list[dict[str, object]]) -> str:
    """How many windows the rows are of, and how many feature rows (one per window, model and arm)."""
    windows = len({str(r["window_start"]) for r in rows})
    return f"{windows} window{'s' * (windows != 1)}, {len(rows)} feature row{'s' * (len(rows) != 1)}"


def summary(
    output: Path,
    rows: list[dict[str, object]],
    errors: int,
    seconds: float | None,
    run: dict[str, object] | None = None,
    users: list[dict[str, object]] | None = None,
) -> str:
    took = "" if seconds is None else f" in {seconds:.1f} s"
    requests = sum(int(str(r["requests"])) for r in rows)
    models = sorted({str(r["model"]) for r in rows})
    head = (
        f"features: done{took}: {counts(rows)}, {requests} requests ({errors} errors) for "
        f"{', '.join(models) or 'no model'} -> {output / 'features'}; "
        + (f"error rows -> {output / 'errors'}" if errors else "no error rows")
    )
    if run:
        head += f"\nfeatures: run: {_run_line(run)}"
    text = head + ("\n" + summary_table(rows) if rows else "")
    arms = arm_rows(rows, users or [])
    if arms:
        who = f"{len({u['user_id'] for u in users})} users, per window in {output / 'users'}" if users else "no users"
        text += f"\nfeatures: A/B, each arm over the whole run ({who}):\n" + arm_table(arms)
    return text
