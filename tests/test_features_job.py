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

from connector.errors import OptionsError
from connector.report import page as report_page
from connector.report import results as report_results
from connector.report import tables as report_tables
from jobs import features

# Two models, three 1-minute windows; the second model has no window at 12:01 and an error at 12:02. The run
# began at 12:00:40 and ended at 12:02:20: its first and last windows are partial. Coder content features.
ROWS = [
    {"window_start": f"2026-11-30 12:0{i}:00.000", "window_end": f"2026-11-30 12:0{i + 1}:00.000",
     "model": "model-a", "profile": "coder", "requests": 100 + 10 * i, "errors": i, "error_rate": i / (100 + 10 * i),
     "latency_ms_mean": 40.0 + i, "latency_ms_max": 90.5, "ttft_ms_mean": None, "tokens_per_second_mean": 61.0 + i,
     "completion_tokens_mean": 64.0, "first_event": f"2026-11-30 12:0{i}:{40 if i == 0 else 0:02d}.000",
     "last_event": f"2026-11-30 12:0{i}:{20 if i == 2 else 59:02d}.900", "code_blocks_sum": 50 + i,
     "with_code_share": 0.5}
    for i in range(3)
] + [
    {"window_start": "2026-11-30 12:00:00.000", "window_end": "2026-11-30 12:01:00.000", "model": "model-b",
     "profile": "coder", "requests": 50, "errors": 0, "error_rate": 0.0, "latency_ms_mean": 80.0,
     "latency_ms_max": 120.0, "ttft_ms_mean": None, "tokens_per_second_mean": 30.0, "completion_tokens_mean": 32.5,
     "first_event": "2026-11-30 12:00:41.000", "last_event": "2026-11-30 12:00:59.000", "code_blocks_sum": 10,
     "with_code_share": 0.25},
    {"window_start": "2026-11-30 12:02:00.000", "window_end": "2026-11-30 12:03:00.000", "model": "model-b",
     "profile": "coder", "requests": 40, "errors": 4, "error_rate": 0.1, "latency_ms_mean": 95.0,
     "latency_ms_max": 300.0, "ttft_ms_mean": None, "tokens_per_second_mean": 28.0, "completion_tokens_mean": 30.0,
     "first_event": "2026-11-30 12:02:00.500", "last_event": "2026-11-30 12:02:19.000", "code_blocks_sum": 8,
     "with_code_share": 0.2},
]  # fmt: skip
RUN = {"mode": "request", "profile": "coder", "backend": "auto", "endpoint": "http://127.0.0.1:8000",
       "model": "model-a", "rate": 50, "duration_s": 100.0, "window_s": 60.0, "started": "2026-11-30 12:00:39 UTC"}  # fmt: skip


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
    (tmp_path / features.RUN_FILE).write_text(json.dumps(RUN))
    return tmp_path


def test_without_duration_the_job_sends_prompts_until_cancelled() -> None:
    """The job always set 'prompts.count' (rate x 60 s), so `flink run` without --duration (compose with an
    empty DSPARK_DURATION, the Kubernetes deployment) stopped after a minute. Its feed of the prompts file is
    bounded by --duration only."""
    args = features.parse_args(["--endpoint", "http://vllm:8000", "--rate", "20"])
    assert args.duration is None
    unbounded = features.feed_ddl(args, 24)
    assert "'rows-per-second' = '20'" in unbounded and "'fields.n.kind' = 'random'" in unbounded
    assert "'fields.n.max' = '23'" in unbounded and "sequence" not in unbounded
    bounded = features.parse_args(["--endpoint", "http://vllm:8000", "--rate", "20", "--duration", "90"])
    assert "'fields.n.kind' = 'sequence', 'fields.n.start' = '0', 'fields.n.end' = '1799'" in features.feed_ddl(
        bounded, 24
    )


def test_the_shipped_prompts_file_is_an_ab_test_of_users() -> None:
    """jobs/prompts.json: two arms with their own system prompt and request options, each user in one arm only, the
    arms taking turns so that any rate fills both in every window."""
    arms, prompts = features.load_prompts(features.PROMPTS_FILE)
    assert set(arms) == {"A", "B"} and all(arm["system"] for arm in arms.values())
    assert arms["A"]["max_tokens"] != arms["B"]["max_tokens"]
    user_arms = {(p["user_id"], p["arm"]) for p in prompts}
    assert len({u for u, _ in user_arms}) == len(user_arms) == 8
    assert [p["arm"] for p in prompts[:4]] == ["A", "B", "A", "B"]


@pytest.mark.parametrize(
    ("text", "said"),
    [
        ("[]", "expected an object with 'arms' (an object) and 'prompts' (a list), not empty"),
        ('{"arms": {"A": {"seed": 1}}, "prompts": [{}]}', "arm 'A': seed; an arm takes system, max_tokens, temperature"),
        ('{"arms": {"A": {}}, "prompts": [{"user_id": "u", "arm": "A"}]}', "prompt 1: expected strings user_id, arm, question"),
        ('{"arms": {"A": {}}, "prompts": [{"user_id": "u", "arm": "C", "question": "q"}]}', "prompt 1: arm 'C' is not one of A"),
        ("{", "Expecting property name enclosed in double quotes: line 1 column 2 (char 1)"),
    ],
)  # fmt: skip
def test_a_prompts_file_that_is_not_one_is_one_line(tmp_path: Path, text: str, said: str) -> None:
    """A usage error (`OptionsError`: exit 2 and "features: " before it, as the mistakes below)."""
    path = tmp_path / "prompts.json"
    path.write_text(text)
    with pytest.raises(OptionsError) as exc:
        features.load_prompts(path)
    assert str(exc.value) == f"prompts file {path}: {said}"


# An A/B run: two arms of one model over two windows, arm B with errors, four users.
AB_ROWS = [
    {"window_start": f"2026-11-30 12:00:{s}.000", "window_end": f"2026-11-30 12:00:{s + 10}.000", "model": "m",
     "arm": arm, "profile": "coder", "requests": n, "errors": e, "error_rate": e / n, "length_share": share,
     "latency_ms_mean": lat, "latency_ms_max": lat * 2, "ttft_ms_mean": None, "tokens_per_second_mean": 50.0,
     "completion_tokens_mean": tokens, "first_event": f"2026-11-30 12:00:{s}.100",
     "last_event": f"2026-11-30 12:00:{s + 9}.900", "code_blocks_sum": n - e, "with_code_share": 1.0}
    for s, arm, n, e, share, lat, tokens in [
        (10, "A", 10, 0, 0.5, 20.0, 40.0), (20, "A", 30, 0, 0.7, 40.0, 44.0),
        (10, "B", 10, 2, 0.0, 30.0, 60.0), (20, "B", 30, 6, 0.25, 50.0, 70.0),
    ]
]  # fmt: skip
AB_USERS = [
    {"window_start": "2026-11-30 12:00:10.000", "user_id": u, "arm": a, "model": "m", "requests": 5, "errors": 0}
    for u, a in [("u1", "A"), ("u2", "A"), ("u3", "B")]
] + [{"window_start": "2026-11-30 12:00:20.000", "user_id": "u1", "arm": "A", "model": "m", "requests": 3, "errors": 1}]


def test_the_summary_has_the_arms_and_each_arm_over_the_run(tmp_path: Path) -> None:
    """Features per arm of the rows that asked; an arm's means are its rows' means (the windows' means
    weighted by the rows they are over), its users counted from OUTPUT/users."""
    text = features.summary(tmp_path, AB_ROWS, 8, None, None, AB_USERS)
    lines = text.splitlines()
    assert lines[1].split()[:6] == ["window", "start", "end", "model", "arm", "requests"]
    assert lines[-5:] == [
        f"features: A/B, each arm over the whole run (3 users, per window in {tmp_path / 'users'}):",
        "model  arm  users  requests  errors  error %  length %  round trip ms  out tokens  code blocks  with code %",
        "-----  ---  -----  --------  ------  -------  --------  -------------  ----------  -----------  -----------",
        "m      A        2        40       0     0.0%       65%             35        43.0           40         100%",
        "m      B        1        40       8    20.0%       19%             45        67.5           32         100%",
    ]  # fmt: skip
    page = report_page.report_html(AB_ROWS, 8, tmp_path, None, AB_USERS)
    assert '<table id="arms">' in page and '<table id="users">' in page
    assert page.count('<polyline class="series"') == (len(report_page.charts_of(AB_ROWS)) - 1) * 2  # no ttft: 1 empty
    assert "</svg> m / arm A</span>" in page and "</svg> m / arm B</span>" in page  # the legend's samples


def test_the_summary_counts_windows_and_names_the_error_folder_only_with_errors(tmp_path: Path) -> None:
    """The README's 60 s run said "12 windows" (its 6 windows had a row per arm; the README says 6 or 7), and
    named OUTPUT/errors when there were no error rows: windows and feature rows are counted apart."""
    head = features.summary(tmp_path, AB_ROWS, 0, 60.0, None, AB_USERS).splitlines()[0]
    assert head == (
        f"features: done in 60.0 s: 2 windows, 4 feature rows, 80 requests (0 errors) for m -> "
        f"{tmp_path / 'features'}; no error rows"
    )


def test_help_says_each_default() -> None:
    """`features.py --help` hid --rate's default (and others'): every option with a default says it."""
    parser_help = subprocess.run(
        [sys.executable, "jobs/features.py", "--help"], capture_output=True, text=True, timeout=60, check=True,
        cwd=Path(__file__).resolve().parent.parent,
    ).stdout  # fmt: skip
    flat = " ".join(parser_help.split())
    for option, default in [("--rate", "50"), ("--window", "10.0"), ("--output", "out"), ("--profile", "coder"),
                            ("--concurrency", "64"), ("--watermark-delay", "5.0"), ("--backend", "auto"),
                            ("--checkpoint-interval", "10.0"), ("--progress", "5.0"),
                            ("--prompts", "jobs/prompts.json"), ("--report", "OUTPUT/report.html")]:  # fmt: skip
        said = flat.split(f" {option} ", 1)[1].split(" --", 1)[0]
        assert f"default: {default})" in said, (option, said)
    assert "Exit status: 0 done" in flat


def _closed_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.mark.parametrize(
    ("argv", "status", "said"),
    [
        (["--outptu", "x"], 2, "features.py: unrecognized arguments: --outptu x; did you mean --output? (see features.py --help)"),
        (["--profile", "codr"], 2, "features: unknown profile 'codr': use one of "),
        (["--endpoint", "http://127.0.0.1:{port}"], 1, "features: cannot connect to http://127.0.0.1:{port}: "),
        (["--endpoint", "vllm:8000"], 2, "features: the endpoint must be an http(s) URL such as 'http://127.0.0.1:8000', got 'vllm:8000': it is not an http(s) URL."),
        (["--results-only", "--output", "{tmp}/nowhere"], 2, "features: --output {tmp}/nowhere: no results there"),
        (["--prompts", "{tmp}/none.json"], 2, "features: prompts file {tmp}/none.json: "),
        (["--rate", "0"], 2, "features.py: --rate 0: must be more than 0 (see features.py --help)"),
    ],
)  # fmt: skip
def test_a_mistake_is_one_line_with_the_clis_exit_status(
    tmp_path: Path, argv: list[str], status: int, said: str
) -> None:
    """As `dspark-vllm` answers them (connector/cli/): a wrong --endpoint was a 52-line traceback ending in
    URLError, a misspelt profile one ending in ProfileError, a misspelt option got no "did you mean", and
    --results-only over a folder with no results printed "done: 0 windows" and exited 0. Now one line each,
    before any job starts: 2 a usage error, 1 a server that cannot be reached."""
    port = _closed_port()
    fill = {"port": port, "tmp": tmp_path}
    done = subprocess.run(
        [sys.executable, "jobs/features.py", "--duration", "1", *(a.format(**fill) for a in argv)],
        capture_output=True, text=True, timeout=120, check=False, cwd=Path(__file__).resolve().parent.parent,
    )  # fmt: skip
    assert (done.returncode, done.stdout) == (status, ""), done.stderr[-2000:]
    assert len(done.stderr.splitlines()) == 1 and done.stderr.startswith(said.format(**fill)), done.stderr[-2000:]


def test_summary_has_a_line_per_model_and_window(results: Path) -> None:
    """The run's details, the content features, partial windows marked, the two latencies named for what they
    measure (the summary had "latency ms" beside "ttft ms", and no content feature)."""
    rows, errors = features.read_results(results)
    assert (len(rows), errors) == (5, 7)  # the in-progress part file is not read
    text = features.summary(results, rows, errors, 12.34, features.read_run(results))
    assert text.splitlines() == [
        "features: done in 12.3 s: 3 windows, 5 feature rows, 420 requests (7 errors) for model-a, model-b -> "
        f"{results / 'features'}; error rows -> {results / 'errors'}",
        "features: run: mode request, profile coder, parse backend auto, endpoint http://127.0.0.1:8000, model model-a, "
        "prompts/s 50, duration s 100.0, window s 60.0, started 2026-11-30 12:00:39 UTC",
        "window start           end       model    requests  errors  error %  round trip ms  max ms  server ttft ms  tokens/s  out tokens  code blocks  with code %",
        "---------------------  --------  -------  --------  ------  -------  -------------  ------  --------------  --------  ----------  -----------  -----------",
        "2026-11-30 12:00:00 *  12:01:00  model-a       100       0     0.0%             40      90               -      61.0        64.0           50          50%",
        "2026-11-30 12:01:00    12:02:00  model-a       110       1     0.9%             41      90               -      62.0        64.0           51          50%",
        "2026-11-30 12:02:00 *  12:03:00  model-a       120       2     1.7%             42      90               -      63.0        64.0           52          50%",
        "2026-11-30 12:00:00 *  12:01:00  model-b        50       0     0.0%             80     120               -      30.0        32.5           10          25%",
        "2026-11-30 12:02:00 *  12:03:00  model-b        40       4    10.0%             95     300               -      28.0        30.0            8          20%",
        "* a window the run covered only in part: its counts are not a drop or a rise",
    ]  # fmt: skip


def test_progress_counts_the_rows_written_as_the_readme_says(results: Path) -> None:
    """A progress line said "written out 211" when 60 feature and user rows had been written (the records every
    sink vertex read, committers' included): it counts the feature and user rows the committed files hold."""
    from connector.flink.progress import Snapshot

    (results / "users").mkdir()
    (results / "users" / "part-0-0").write_text("".join(json.dumps(u) + "\n" for u in AB_USERS))
    line = features.progress_line(Snapshot(bodies=420, rows=413, rejected=7), results, True)
    assert line == "features: bodies in 420  rows 413  rejected 7  committed: 5 feature rows, 4 user rows"
    assert features.progress_line(Snapshot(), results, False).endswith("committed: 5 feature rows")


def test_a_run_that_fills_its_windows_has_none_partial() -> None:
    rows = [
        {"window_start": "2026-11-30 12:00:00.000", "window_end": "2026-11-30 12:00:10.000",
         "first_event": "2026-11-30 12:00:00.300", "last_event": "2026-11-30 12:00:09.990"},
        {"window_start": "2026-11-30 12:00:10.000", "window_end": "2026-11-30 12:00:20.000",
         "first_event": "2026-11-30 12:00:10.010", "last_event": "2026-11-30 12:00:19.400"},
    ]  # fmt: skip
    report_results.mark_partial(rows)  # type: ignore[arg-type]
    assert [r["partial"] for r in rows] == [False, False]


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
    assert done.stdout.startswith("features: done: 3 windows, 5 feature rows, 420 requests (7 errors)")
    assert f"features: report -> {report}" in done.stdout
    page = report.read_text(encoding="utf-8")
    # The five charts of every run, and two of the coder profile's content features.
    assert page.count('<svg class="chart"') == len(report_page.CHARTS) + 2 == 7
    assert '<p id="totals">3 windows, 5 feature rows, 420 requests, 7 error rows' in page


def _chromium() -> str:
    for name in ("chromium", "chromium-browser", "google-chrome"):
        if found := shutil.which(name):
            return found
    pytest.skip("no headless browser: apt-get install chromium (.ci/run installs it)")


def _chart_boxes(image) -> list[tuple[int, int, int, int]]:  # type: ignore[no-untyped-def]
    """The charts' frames in a screenshot (1 px #ddd borders, 642 px wide), in reading order: (left, top, right,
    bottom)."""
    width, height = image.size
    pixels = image.load()
    border = (221, 221, 221)
    edges = []  # (y, x) where a horizontal border of a frame starts
    for y in range(height):
        x = 0
        while x < width:
            if pixels[x, y] == border:
                start = x
                while x < width and pixels[x, y] == border:
                    x += 1
                if x - start >= 600:
                    edges.append((y, start, x - 1))
            else:
                x += 1
    boxes = []
    for y, left, right in edges:  # a top edge is followed by the bottom edge of the same span
        bottom = next((y2 for y2, l2, r2 in edges if y2 > y + 100 and (l2, r2) == (left, right)), None)
        if bottom is not None and not any(b[0] == left and b[1] < y < b[3] + 2 for b in boxes):
            boxes.append((left, y, right, bottom))
    return sorted(boxes, key=lambda b: (b[1], b[0]))


def test_the_report_renders_in_a_browser_with_both_models_on_every_chart(results: Path, tmp_path: Path) -> None:
    """In headless Chromium: the run's details, seven charts (five of every run, two of the coder profile's
    content features) with round y ticks and the windows' times on the x-axis, hollow points for the partial
    windows, and a word on the chart that has no data (the report had two y labels, one time repeated at both
    ends of a one-window axis, empty frames with no word, no run details and no content feature)."""
    report = tmp_path / "report.html"
    features.write_report(report, results, *features.read_results(results))
    width, height = 1400, 1600
    dom, image = _render(report, tmp_path, width, height)
    # What the browser built: seven charts; on the six with data model-a's line runs through its 3 windows and
    # model-b's is broken at 12:01, the window it has no row for (two pieces of one point each); a point per
    # window and model, hollow for the four partial ones; the three windows' times under each chart.
    assert dom.count('<svg class="chart"') == 7
    assert dom.count('<polyline class="series"') == 6 * 3
    assert dom.count('<circle class="partial"') == 6 * 4 and dom.count('<circle class="full"') == 6 * 1
    assert dom.count('class="xtick"') == 7 * 3 and "12:01:00</text>" in dom
    assert dom.count('class="ytick"') >= 7 * 3
    assert dom.count('class="nodata"') == 1 and "no data: the server reported none" in dom
    assert "<dt>parse backend</dt><dd>auto</dd>" in dom and "<dt>window s</dt><dd>60.0</dd>" in dom
    assert 'data-field="with_code_share"' in dom and 'data-field="code_blocks_sum"' in dom
    # The seven frames, two a row, all on the page; each holds both models' colours but the one with no data.
    boxes = _chart_boxes(image)
    assert len(boxes) == 7, boxes
    assert len({b[0] for b in boxes}) == 2 and boxes[-1][3] < height
    pixels = image.load()
    colours = [tuple(int(c[i : i + 2], 16) for i in (1, 3, 5)) for c in report_page.COLOURS[:2]]
    fields = [field for field, *_ in report_page.charts_of(features.read_results(results)[0])]
    for field, (left, top, right, bottom) in zip(fields, boxes, strict=True):
        seen = {pixels[x, y] for x in range(left, right) for y in range(top, bottom)}
        for colour in colours:
            assert (colour in seen) == (field != "ttft_ms_mean"), (field, colour)


# The README's A/B run, as its files hold it: two arms of one model asking the same number of requests with no
# errors, the same round trip (195 ms in the first window, then about 10: warm-up) and server figures; arm A's
# answers cut at 48 tokens two in three times (47 out tokens), arm B's never (69). The job started 27 s before
# the first row was fed; the first window (12:01:00) the run covered in part.
README_RUN = {"mode": "request", "profile": "coder", "backend": "cpu (ML_PREDICT, in the JVM; no GPU TaskManagers declared)",
              "endpoint": "http://127.0.0.1:40000", "simulator": "the built-in simulator (seed 7; made up, not a model's)",
              "model": "m", "rate": 50, "duration_s": 60.0, "window_s": 10.0, "started": "2026-11-30 12:00:35 UTC"}  # fmt: skip
README_ROWS = [
    {"window_start": f"2026-11-30 12:01:{s}0.000", "window_end": f"2026-11-30 12:01:{s + 1}0.000", "model": "m",
     "arm": arm, "profile": "coder", "requests": 20 if s == 0 else 25, "errors": 0, "error_rate": 0.0,
     "length_share": share, "latency_ms_mean": lat, "latency_ms_max": lat * 2, "ttft_ms_mean": 80.0,
     "tokens_per_second_mean": 60.0, "completion_tokens_mean": tokens,
     "first_event": f"2026-11-30 12:01:{s}{2 if s == 0 else 0}.000", "last_event": f"2026-11-30 12:01:{s}9.990",
     "code_blocks_sum": code, "with_code_share": with_code}
    for s, lat in [(0, 195.0), (1, 10.0), (2, 11.0), (3, 9.0)]
    for arm, share, tokens, code, with_code in [("A", 2 / 3, 47.0, 8, 1 / 3), ("B", 0.0, 69.0, 25, 1.0)]
]  # fmt: skip
README_USERS = [
    {"window_start": f"2026-11-30 12:01:{s}0.000", "window_end": f"2026-11-30 12:01:{s + 1}0.000", "user_id": user,
     "arm": arm, "model": "m", "requests": n, "errors": 0, "completion_tokens_mean": tokens, "latency_ms_mean": lat}
    for s, lat in [(0, 195.0), (1, 10.0)]
    for user, arm, n, tokens in [("u1", "A", 10, 46.0), ("u2", "A", 10, 48.0), ("u3", "B", 10, 69.0), ("u4", "B", 10, 69.0)]
]  # fmt: skip


def _render(report: Path, tmp_path: Path, width: int, height: int):  # type: ignore[no-untyped-def]
    """The DOM headless Chromium builds from `report`, and its screenshot at width x height."""
    from PIL import Image

    shot = tmp_path / "report.png"
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
    image = Image.open(shot).convert("RGB")
    assert image.size == (width, height)
    return dom, image


def _svg(dom: str, kind: str, field: str) -> str:
    """The markup of the chart of `field` (kind: chart or armchart)."""
    return dom.split(f'<svg class="{kind}" data-field="{field}"', 1)[1].split("</svg>", 1)[0]


def test_the_report_of_the_readme_run_shows_what_it_found(tmp_path: Path) -> None:
    """The report of the README's A/B run, in headless Chromium. It did not say the answers were the simulator's;
    it did not chart the run's two findings (length share 67% vs 0%, out tokens 47 vs 69); arm B's line hid arm
    A's wherever they were equal (requests, error rate, time to first token: every chart here); the error-rate axis
    ran 0-1 under a "%" title; nothing said the first window's 195 ms round trip was warm-up, nor why the first
    row came 27 s after "started"; the users table had no tokens or latency although OUTPUT/users has them."""
    output = tmp_path / "out"
    for folder, rows in (("features", README_ROWS), ("users", README_USERS)):
        (output / folder).mkdir(parents=True)
        (output / folder / "part-0-0").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (output / features.RUN_FILE).write_text(json.dumps(README_RUN))
    report = output / "report.html"
    features.write_report(report, output, *features.read_results(output))
    width, height = 1400, 1800
    dom, image = _render(report, tmp_path, width, height)

    assert '<p class="note" id="simulated">The answers came from the built-in simulator' in dom

    # The findings, charted: a bar per arm, its value beside it.
    def values(svg: str) -> list[str]:
        return [part.split(">", 1)[1].split("<", 1)[0] for part in svg.split('<text class="value"')[1:]]

    length = _svg(dom, "armchart", "length_share")
    assert length.count('<rect class="bar"') == 2 and values(length) == ["67%", "0%"]
    tokens = _svg(dom, "armchart", "completion_tokens_mean")
    assert values(tokens) == ["47.0", "69.0"]
    # A share's axis in %: 0 to 100% when every window's is 0.
    ticks = [t.split(">", 1)[1].split("<", 1)[0] for t in _svg(dom, "chart", "error_rate").split('class="ytick"')[1:]]
    assert ticks[0] == "0%" and ticks[-1] == "100%" and all(t.endswith("%") for t in ticks), ticks
    warm = dom.split('<p class="note" id="warm-up">', 1)[1].split("</p>", 1)[0]
    assert "first window's round trip (195 ms) is warm-up" in warm and "median is 10 ms" in warm
    assert "<dt>first row fed</dt><dd>12:01:02, 27 s after the start: the job starting" in dom
    users = dom.split('<table id="users">', 1)[1].split("</table>", 1)[0]
    assert "<th>out tokens</th><th>round trip ms</th>" in users
    assert "<td>u1</td><td>A</td><td>m</td><td>20</td><td>0</td><td>46.0</td><td>102</td>" in users

    # Every chart shows both arms' colours, although on most of them the two lines are the same.
    boxes = _chart_boxes(image)
    assert len(boxes) == len(report_page.charts_of(README_ROWS)) == 7, boxes
    assert boxes[-1][3] < height
    pixels = image.load()
    colours = [tuple(int(c[i : i + 2], 16) for i in (1, 3, 5)) for c in report_page.COLOURS[:2]]
    for field, (left, top, right, bottom) in zip(
        [f for f, *_ in report_page.charts_of(README_ROWS)], boxes, strict=True
    ):
        seen = {pixels[x, y] for x in range(left, right) for y in range(top, bottom)}
        assert all(colour in seen for colour in colours), (field, [colour in seen for colour in colours])


def test_the_run_details_say_which_backend_parsed() -> None:
    """With the default 'auto' on a machine without a GPU the run line said "parse backend auto", hiding
    the fallback to the CPU; it says what parsed. 'auto' follows the job's configuration (GPU TaskManagers
    declared, `gpu_task_managers`), as the table's planner decides it, never the machine that builds the job."""
    import argparse

    args = argparse.Namespace(replay="bodies/", profile="coder", backend="auto", window=10.0)
    assert features.run_details(args, None, None)["backend"] == "cpu (no GPU TaskManagers declared)"
    args.gpu_task_managers = True
    assert features.run_details(args, None, None)["backend"] == (
        "gpu where a TaskManager has one, else cpu (decided at open: metric backendGpu)"
    )
    args.backend = "cpu"
    assert features.run_details(args, None, None)["backend"] == "cpu"
    # Requests go through ML_PREDICT: its model parses in the TaskManager's JVM on the CPU, or on the GPU route the
    # parse step's SQL function parses the model's raw bodies (the run said "cpu (ML_PREDICT, in the JVM)" for
    # --backend gpu before: the GPU parsed nothing).
    asked = features.parse_args(["--endpoint", "http://127.0.0.1:8000", "--backend", "gpu", "--duration", "60"])
    details = features.run_details(asked, asked.endpoint, "m")
    assert details["backend"] == "gpu (parse_coder after ML_PREDICT, in the Python worker)"
    assert details["arms"] == "A: max_tokens 48, temperature 0.2; B: max_tokens 512, temperature 0.8"
    asked.backend = "cpu"
    assert features.run_details(asked, asked.endpoint, "m")["backend"] == "cpu (ML_PREDICT, in the JVM)"
    asked.backend = "auto"  # the job's configuration declares no GPU TaskManagers (parse_args' default)
    assert features.run_details(asked, asked.endpoint, "m")["backend"] == (
        "cpu (ML_PREDICT, in the JVM; no GPU TaskManagers declared)"
    )
    asked.gpu_task_managers = True
    assert str(features.run_details(asked, asked.endpoint, "m")["backend"]).startswith("gpu (parse_coder after")


def test_the_jobs_configuration_says_whether_it_has_gpu_task_managers() -> None:
    """`run_job` reads the GPU TaskManagers from the job's configuration (the client's config.yaml, `flink run
    -D...`, or the table config)."""
    from pyflink.table import EnvironmentSettings, TableEnvironment

    t_env = TableEnvironment.create(EnvironmentSettings.in_batch_mode())
    assert features.declares_gpu_task_managers(t_env.get_config()) is False
    t_env.get_config().set("external-resources", "gpu")
    t_env.get_config().set("external-resource.gpu.amount", "1")
    assert features.declares_gpu_task_managers(t_env.get_config()) is True


def test_the_gpu_route_asks_the_model_for_raw_bodies_and_parses_them_after_it() -> None:
    """One ML_PREDICT either way: on the GPU route its OUTPUT is the raw body and the request's metadata (the model
    parses no column), and `parse_answer` (the project's parse step) types the body after it; the cpu route is as
    it was."""
    arms, _ = features.load_prompts(features.PROMPTS_FILE)
    profile = features.load_profile("coder")
    gpu = features.parse_args(["--endpoint", "http://127.0.0.1:8000", "--backend", "gpu"])
    cpu = features.parse_args(["--endpoint", "http://127.0.0.1:8000", "--backend", "cpu"])
    gpu_model = features.model_ddl(gpu, profile, arms, "http://127.0.0.1:8000", "m")
    outputs = gpu_model.split(" OUTPUT (")[1].split(") WITH")[0]
    assert outputs == ", ".join(f"`{key}` {kind}" for key, kind, _ in features.MODEL_METADATA)
    assert "`completion_tokens` BIGINT" in features.model_ddl(cpu, profile, arms, "http://127.0.0.1:8000", "m")
    gpu_view = features.answers_sql(gpu, profile, arms)
    assert gpu_view.count("ML_PREDICT(") == 1 and "parse_answer(COALESCE(`raw.body`, X''))" in gpu_view
    assert "parse_answer" not in features.answers_sql(cpu, profile, arms)


@pytest.mark.flink
@pytest.mark.slow
def test_the_job_answers_each_fed_row_once_with_its_user_and_arm(tmp_path: Path) -> None:
    """The job's main command, on the prompts file it ships, through ML_PREDICT against a simulator that
    fails 5% of requests (HTTP 500) and sends 5% malformed bodies: every row fed is counted once in its arm's
    window (errors included) and once in its user's, every error row names its user and arm, the server got one
    request per row (the three sinks share the one ML_PREDICT), and the arms differ as their settings say (arm A
    asks for 48 tokens at most: most of its answers are cut, none of arm B's)."""
    from connector.simulator import testing

    duration, rate = 8, 30
    output = tmp_path / "out"
    faults = {"500": 0.05, "malformed": 0.05}
    with testing.serve_simulator(mode="process", profiles=("coder",), seed=11, faults=faults) as sim:
        done = subprocess.run(
            [sys.executable, "jobs/features.py", "--endpoint", sim.url, "--duration", str(duration), "--rate",
             str(rate), "--window", "4", "--output", str(output), "--progress", "2"],
            capture_output=True, text=True, timeout=600, check=False, cwd=Path(__file__).resolve().parent.parent,
        )  # fmt: skip
        sent = sim.stats().get("requests /v1/chat/completions", 0)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "Traceback" not in done.stdout + done.stderr
    arms, prompts = features.load_prompts(features.PROMPTS_FILE)
    rows, errors = features.read_results(output)
    fed = duration * rate
    assert sent == fed
    assert sum(int(r["requests"]) for r in rows) == fed  # type: ignore[call-overload]
    per_arm = {a: sum(int(r["requests"]) for r in rows if r["arm"] == a) for a in arms}  # type: ignore[call-overload]
    assert per_arm == {"A": fed // 2, "B": fed // 2}
    assert 0 < errors == sum(int(r["errors"]) for r in rows)  # type: ignore[call-overload]
    error_rows = [json.loads(line) for f in sorted((output / "errors").glob("part-*")) for line in f.open()]
    user_arm = {p["user_id"]: p["arm"] for p in prompts}
    assert len(error_rows) == errors and all(user_arm[e["user_id"]] == e["arm"] for e in error_rows)
    users = features.read_users(output)
    assert sum(int(u["requests"]) for u in users) == fed  # type: ignore[call-overload]
    assert {(u["user_id"], u["arm"]) for u in users} == set(user_arm.items())
    view = {str(a["arm"]): a for a in report_tables.arm_rows(rows, users)}
    assert float(view["A"]["length_share"]) > 0.5 and float(view["B"]["length_share"]) == 0.0  # type: ignore[arg-type]
    assert "features: A/B, each arm over the whole run (8 users" in done.stdout
    # The README's command writes the report (it wrote none without --report), beside the files.
    assert f"features: report -> {output / 'report.html'}" in done.stdout
    page = (output / "report.html").read_text(encoding="utf-8")
    assert '<table id="arms">' in page and '<table id="users">' in page and 'id="simulated"' not in page
    # Progress: no line said twice (Flink's REST API refreshed its metrics every 10 s: at 5 s a line, each one came
    # twice), and what was written counted as the README says it, in feature and user rows.
    progress = [line for line in done.stderr.splitlines() if line.startswith("features: bodies in")]
    assert progress and len(progress) == len(set(progress)), progress
    for line in progress:
        committed = line.split("  committed: ", 1)[1]
        feature_rows, user_rows = (int(part.split()[0]) for part in committed.split(", "))
        assert feature_rows <= len(rows) and user_rows <= len(users), line
    assert done.stdout.splitlines()[1].endswith("; no error rows") == (errors == 0)
    run = features.read_run(output)
    assert "(24 prompts, 8 users)" in str(run["prompts"])
    assert run["backend"] == features.run_details(features.parse_args(["--endpoint", sim.url]), sim.url, "m")["backend"]


@pytest.mark.flink
@pytest.mark.slow
def test_the_gpu_route_gives_the_cpu_routes_feature_rows(tmp_path: Path, monkeypatch) -> None:
    """The job's GPU route (the model's raw bodies parsed by `parse_coder` on the gpu backend, libcudf emulated as
    in tests/test_flink_gpu.py) against its cpu route (the model parses in the JVM), over a simulator that sends
    malformed bodies: the same arms' features over the run, the same error rows with the same reasons. One request
    at a time on one instance, so both runs ask in the same order and the simulator's faults fall on the same
    rows (each run has a simulator of the same seed); the windows themselves are of each run's wall clock, so the
    arms are compared over the whole run."""
    from connector.parse import backends
    from connector.simulator import testing
    from tests.libcudf_emulator import EmulatedLibcudfReader

    # PyFlink's local mini-cluster runs its Python workers in this process (loopback): the patch reaches them,
    # and counts the bodies the (emulated) GPU reader was given.
    read: list[int] = []

    class Reader(EmulatedLibcudfReader):
        def read(self, data, schema, *, multiline=False):  # type: ignore[no-untyped-def]
            read.append(1)
            return super().read(data, schema, multiline=multiline)

    monkeypatch.setattr(backends, "_gpu", lambda: backends.GpuBackend(Reader()))
    duration, rate = 4, 20
    arms_of: dict[str, list[dict[str, object]]] = {}
    errors_of: dict[str, list[tuple[object, ...]]] = {}
    for backend in ("cpu", "gpu"):
        # A simulator of its own per run: its faults are drawn in the order of the requests, from its seed.
        with testing.serve_simulator(mode="process", profiles=("coder",), seed=11, faults={"malformed": 0.1}) as sim:
            output = tmp_path / backend
            argv = ["--endpoint", sim.url, "--backend", backend, "--duration", str(duration), "--rate", str(rate),
                    "--concurrency", "1", "--parallelism", "1", "--progress", "0", "--output", str(output)]  # fmt: skip
            before = len(read)
            assert features.main(argv) == 0
            assert (len(read) > before) == (backend == "gpu")  # the GPU read the gpu route's bodies, none of the cpu's
            rows, errors = features.read_results(output)
            assert sum(int(r["requests"]) for r in rows) == duration * rate  # type: ignore[call-overload]
            timing = {"latency_ms_mean", "latency_ms_max"}
            arms_of[backend] = [
                {k: v for k, v in arm.items() if k not in timing} for arm in report_tables.arm_rows(rows, features.read_users(output))
            ]  # fmt: skip
            error_rows = [json.loads(line) for f in sorted((output / "errors").glob("part-*")) for line in f.open()]
            assert len(error_rows) == errors
            errors_of[backend] = sorted(
                (e["user_id"], e["arm"], e["reason"], e["field"], e["http_status"], e["model"]) for e in error_rows
            )
            assert all(e["body"] for e in error_rows)  # (the simulator's `created` is its clock: bodies differ a bit)
            assert (
                features.read_run(output)["backend"]
                == features.run_details(features.parse_args(argv), sim.url, "m")["backend"]
            )
    assert errors_of["cpu"] and all(e[2] for e in errors_of["cpu"])  # the malformed bodies are error rows with a reason
    assert errors_of["gpu"] == errors_of["cpu"]
    # Each run's windows differ (wall clock) and the files hold a window's means to 6 digits: means match to those.
    assert [sorted(arm) for arm in arms_of["gpu"]] == [sorted(arm) for arm in arms_of["cpu"]]
    for gpu, cpu in zip(arms_of["gpu"], arms_of["cpu"], strict=True):
        assert gpu == {k: pytest.approx(v, rel=1e-5) if isinstance(v, float) else v for k, v in cpu.items()}
    assert features.read_run(tmp_path / "gpu")["backend"] == "gpu (parse_coder after ML_PREDICT, in the Python worker)"
