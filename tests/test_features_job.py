"""jobs/features.py without a cluster: how long it runs, its summary table, and its HTML report in a real browser.

The report is rendered by headless Chromium (Debian's `chromium`), and the screenshot is read back: every chart
must show both models' lines in their colours.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from connector.profiles import load_profile
from jobs import features

# Two models, three 1-minute windows; the second model has no window at 12:01 and an error at 12:02.
ROWS = [
    {"window_start": f"2026-11-30 12:0{i}:00.000", "window_end": f"2026-11-30 12:0{i + 1}:00.000",
     "model": "model-a", "profile": "coder", "requests": 100 + 10 * i, "errors": i, "error_rate": i / (100 + 10 * i),
     "latency_ms_mean": 40.0 + i, "latency_ms_max": 90.5, "ttft_ms_mean": 12.25, "tokens_per_second_mean": 61.0 + i,
     "completion_tokens_mean": 64.0}
    for i in range(3)
] + [
    {"window_start": "2026-11-30 12:00:00.000", "window_end": "2026-11-30 12:01:00.000", "model": "model-b",
     "profile": "coder", "requests": 50, "errors": 0, "error_rate": 0.0, "latency_ms_mean": 80.0,
     "latency_ms_max": 120.0, "ttft_ms_mean": None, "tokens_per_second_mean": 30.0, "completion_tokens_mean": 32.5},
    {"window_start": "2026-11-30 12:02:00.000", "window_end": "2026-11-30 12:03:00.000", "model": "model-b",
     "profile": "coder", "requests": 40, "errors": 4, "error_rate": 0.1, "latency_ms_mean": 95.0,
     "latency_ms_max": 300.0, "ttft_ms_mean": None, "tokens_per_second_mean": 28.0, "completion_tokens_mean": 30.0},
]  # fmt: skip


@pytest.fixture
def results(tmp_path: Path) -> Path:
    """An output directory as the job leaves it: committed part files, and an in-progress one (hidden)."""
    (tmp_path / "features").mkdir()
    (tmp_path / "errors").mkdir()
    (tmp_path / "features" / "part-1-0").write_text("".join(json.dumps(r) + "\n" for r in ROWS[:3]))
    (tmp_path / "features" / "part-1-1").write_text("".join(json.dumps(r) + "\n" for r in ROWS[3:]))
    (tmp_path / "features" / ".part-1-2.inprogress.x").write_text(json.dumps(ROWS[0]) + "\n")
    errors = [{"reason": "HTTP 500", "model": "model-a"}] * 3 + [{"reason": "not JSON", "model": "model-b"}] * 4
    (tmp_path / "errors" / "part-1-0").write_text("".join(json.dumps(e) + "\n" for e in errors))
    return tmp_path


def test_without_duration_the_job_sends_prompts_until_cancelled() -> None:
    """Issue 9: the job always set 'prompts.count' (rate x 60 s), so `flink run` without --duration (compose with an
    empty DSPARK_DURATION, the Kubernetes deployment) stopped after a minute."""
    profile = load_profile("coder")
    args = features.parse_args(["--endpoint", "http://vllm:8000", "--rate", "20"])
    assert args.duration is None
    unbounded = features.responses_table(args, profile, args.endpoint, "m").get_options()
    assert unbounded["prompts.rate"] == "20" and "prompts.count" not in unbounded
    bounded = features.parse_args(["--endpoint", "http://vllm:8000", "--rate", "20", "--duration", "90"])
    assert features.responses_table(bounded, profile, bounded.endpoint, "m").get_options()["prompts.count"] == "1800"


def test_summary_has_a_line_per_model_and_window(results: Path) -> None:
    rows, errors = features.read_results(results)
    assert (len(rows), errors) == (5, 7)  # the in-progress part file is not read
    text = features.summary(results, rows, errors, 12.34)
    assert text.splitlines() == [
        f"features: done in 12.3 s: 5 windows, 420 requests (7 errors) for model-a, model-b -> {results / 'features'} "
        f"(errors: {results / 'errors'})",
        "window start         end       model    requests  errors  error %  latency ms  max ms  ttft ms  tokens/s  out tokens",
        "-------------------  --------  -------  --------  ------  -------  ----------  ------  -------  --------  ----------",
        "2026-11-30 12:00:00  12:01:00  model-a       100       0     0.0%          40      90       12      61.0        64.0",
        "2026-11-30 12:01:00  12:02:00  model-a       110       1     0.9%          41      90       12      62.0        64.0",
        "2026-11-30 12:02:00  12:03:00  model-a       120       2     1.7%          42      90       12      63.0        64.0",
        "2026-11-30 12:00:00  12:01:00  model-b        50       0     0.0%          80     120        -      30.0        32.5",
        "2026-11-30 12:02:00  12:03:00  model-b        40       4    10.0%          95     300        -      28.0        30.0",
    ]  # fmt: skip


def test_results_only_prints_the_summary_and_writes_the_report_without_a_job(results: Path) -> None:
    report = results / "out" / "report.html"
    done = subprocess.run(
        [sys.executable, "jobs/features.py", "--results-only", "--output", str(results), "--report", str(report)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        cwd=Path(__file__).resolve().parent.parent,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("features: done: 5 windows, 420 requests (7 errors)")
    assert f"features: report -> {report}" in done.stdout
    page = report.read_text(encoding="utf-8")
    assert page.count('<svg class="chart"') == len(features.CHARTS) == 4
    assert '<p id="totals">5 windows, 420 requests, 7 error rows' in page


def _chromium() -> str:
    for name in ("chromium", "chromium-browser", "google-chrome"):
        if found := shutil.which(name):
            return found
    pytest.skip("no headless browser: apt-get install chromium (.ci/run installs it)")


def test_the_report_renders_in_a_browser_with_both_models_on_every_chart(results: Path, tmp_path: Path) -> None:
    from PIL import Image

    report = tmp_path / "report.html"
    features.write_report(report, results, *features.read_results(results))
    shot = tmp_path / "report.png"
    width, height = 1400, 900
    browser = [_chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars"]
    done = subprocess.run(
        [*browser, f"--window-size={width},{height}", f"--screenshot={shot}", report.as_uri()],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0 and shot.is_file(), done.stderr[-2000:]
    dom = subprocess.run(
        [*browser, "--dump-dom", report.as_uri()], capture_output=True, text=True, timeout=120, check=False
    ).stdout
    # What the browser built: four charts, each with model-a's line through its 3 windows and model-b's broken at
    # 12:01, the window it has no row for (two pieces of one point each), and a dot per window and model.
    assert dom.count('<svg class="chart"') == 4
    assert dom.count('<polyline class="series"') == 4 * 3
    assert dom.count("<circle ") == 4 * 5
    image = Image.open(shot).convert("RGB")
    assert image.size == (width, height)
    # The charts are 640 x 240 in a row of two from (24, ~158): each quadrant holds both models' colours.
    pixels = image.load()
    colours = [tuple(int(c[i : i + 2], 16) for i in (1, 3, 5)) for c in features.COLOURS[:2]]
    for left, top in [(24, 150), (690, 150), (24, 400), (690, 400)]:
        seen = {pixels[x, y] for x in range(left, left + 640) for y in range(top, top + 250)}
        for colour in colours:
            assert colour in seen, (left, top, colour)
