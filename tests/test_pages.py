"""Figures that cannot drift: every table the README and docs/ show, and every figure their prose quotes from the
records, is what benchmarks/tables.py computes from the committed records (tables.py --write puts them there, --check
says which page differs). Read from the committed records: no run, seconds."""

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import grid
import numpy as np
import pytest
import quoted
import tables
from conftest import HANG_TIMEOUT, ROOT, finished_run_folder


def check(*args: str) -> subprocess.CompletedProcess:
    cmd = [sys.executable, str(ROOT / "benchmarks" / "tables.py"), *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=HANG_TIMEOUT)


def test_the_pages_show_the_tables_and_quoted_figures_the_committed_records_give():
    proc = check("--check")
    assert proc.returncode == 0, f"{proc.stderr}\nrun: python benchmarks/tables.py --write"
    pages = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    marked = sum(page.read_text().count("<!-- tables.py: ") for page in pages)
    assert marked >= 10  # the results tables, Table 1 at two budgets, the details, the flags: all written, none copied
    quoted = sum(len(phrases) for phrases in tables.QUOTED_IN.values())
    assert quoted >= 10


@pytest.fixture()
def copy(tmp_path):
    """The pages and the records, in a scratch folder: what a changed record does to them."""
    shutil.copy(ROOT / "README.md", tmp_path)
    shutil.copytree(ROOT / "docs", tmp_path / "docs")
    shutil.copytree(ROOT / "benchmarks" / "records", tmp_path / "records")
    return tmp_path


def change(record, key: str, by: float) -> None:
    data = json.loads(record.read_text())
    data[key] += by
    record.write_text(json.dumps(data))


def test_a_changed_record_fails_the_check_on_each_page_that_quotes_it_and_write_mends_them(copy):
    args = ["--records", str(copy / "records"), "--root", str(copy)]
    # a table: HalfCheetah's last 100 episodes in the results tables of the README and docs/results.md
    change(copy / "records" / "HalfCheetah-v4__mujoco-default__1.json", "last_100", 300.0)
    proc = check("--check", *args)
    stale = {line.split(": ")[-1] for line in proc.stderr.splitlines()}
    assert proc.returncode == 1 and {"README.md", "docs/results.md", "docs/studies.md"} <= stale, proc.stderr
    assert "docs/tuning.md" not in stale and "docs/gridworld.md" not in stale  # no figure of that run there
    assert check("--write", *args).returncode == 0
    row = next(line for line in (copy / "README.md").read_text().splitlines() if line.startswith("| HalfCheetah-v4 |"))
    assert row.startswith("| HalfCheetah-v4 | 3 | 5688 +- ")  # 5587.5 + 300 / 3
    assert check("--check", *args).returncode == 0
    # a figure in prose: the tuned Swimmer runs' mean, quoted by the README and docs/tuning.md, in no table there
    change(copy / "records" / "Swimmer-v4__tuned-study__1.json", "last_100", 400.0)
    proc = check("--check", *args)
    assert proc.returncode == 1 and "README.md" in proc.stderr and "docs/tuning.md" in proc.stderr, proc.stderr
    assert check("--write", *args).returncode == 0
    assert "400 +- 222 against 104 +- 29" in " ".join((copy / "README.md").read_text().split())


def test_a_table_or_phrase_the_records_cannot_give_is_one_line_and_exit_2(copy):
    args = ["--records", str(copy / "records"), "--root", str(copy)]
    studies = copy / "docs" / "studies.md"
    studies.write_text(studies.read_text() + "\n<!-- tables.py: table9 -->\n<!-- /tables.py -->\n")
    proc = check("--check", *args)
    assert proc.returncode == 2 and proc.stderr.strip().splitlines() == [proc.stderr.strip()]
    assert "docs/studies.md: no table named table9" in proc.stderr
    shutil.copy(ROOT / "docs" / "studies.md", studies)
    page, phrase = next((p, ph[0]) for p, ph in tables.QUOTED_IN.items() if ph)
    text = (copy / page).read_text()
    found = tables.phrase_pattern(phrase).search(text)
    (copy / page).write_text(text[: found.start()] + "reworded" + text[found.end() :])
    proc = check("--check", *args)
    assert proc.returncode == 2 and f"{page}: the phrase" in proc.stderr and "is gone" in proc.stderr


def test_refresh_writes_tables_between_markers_and_figures_into_phrases_across_line_breaks(monkeypatch):
    monkeypatch.setattr(tables, "QUOTED_IN", {"p.md": ["the IQM of the {n} runs is {iqm} ({ci};"]})
    table = "Top\n<!-- tables.py: t -->\n| old |\n<!-- /tables.py -->\n"
    text = table + "the IQM of the\n21 runs is 1.16 ([1.13,\n1.22]; more\n"
    new = tables.refresh("p.md", text, {"t": ["| new |", "| row |", ""]}, {"n": "9", "iqm": "0.50", "ci": "[0.1, 0.9]"})
    # the figures replaced where they stand, the page's line breaks kept (one inside the interval)
    assert new.startswith("Top\n<!-- tables.py: t -->\n| new |\n| row |\n<!-- /tables.py -->\n")
    assert new.endswith("\nthe IQM of the\n9 runs is 0.50 ([0.1,\n0.9]; more\n")
    assert (
        tables.refresh("p.md", new, {"t": ["| new |", "| row |"]}, {"n": "9", "iqm": "0.50", "ci": "[0.1, 0.9]"}) == new
    )
    with pytest.raises(ValueError, match="no figure named iqm"):
        tables.refresh("p.md", text, {"t": []}, {"n": "9", "ci": "x"})


def test_the_numpy_iqm_and_probability_of_improvement_are_rlibles():
    from rliable import metrics

    rng = np.random.default_rng(0)
    for shape_x, shape_y in (((3, 3), (3, 3)), ((5, 1), (2, 1)), ((4, 2), (3, 2)), ((10, 7), (10, 7))):
        x, y = rng.integers(0, 4, shape_x).astype(float), rng.integers(0, 4, shape_y).astype(float)  # ties: half
        assert tables.iqm(x) == pytest.approx(metrics.aggregate_iqm(x), abs=1e-12)
        assert tables.probability_of_improvement(x, y) == pytest.approx(metrics.probability_of_improvement(x, y))
        assert tables.probability_of_improvement(x, x) == 0.5


def test_a_phrase_twice_on_a_page_or_one_that_starts_or_ends_in_a_figure_is_refused(monkeypatch):
    figures = {"n": 9}
    monkeypatch.setattr(tables, "QUOTED_IN", {"p.md": ["runs: {n} of them"]})
    with pytest.raises(ValueError, match="is on the page 2 times"):
        tables.refresh("p.md", "runs: 3 of them, and again runs: 3 of them", {}, figures)
    for phrase in ("{n} runs of them", "runs of them: {n}"):
        monkeypatch.setattr(tables, "QUOTED_IN", {"p.md": [phrase]})
        with pytest.raises(ValueError, match="starts or ends in a figure"):
            tables.refresh("p.md", "3 runs of them: 3", {}, figures)


def test_a_runs_minutes_and_sps_are_its_whole_training_s_and_the_quoted_helpers_keep_their_format():
    resumed = {"seed": 1, "last_10": 1.0, "last_100": 2.0, "eval": 3.0, "wall_time_s": 60.0, "train_time_s": 600.0}
    resumed |= {"steps": 6000, "sps": 50.0}  # its summary's SPS: the last process's, since its resume
    figures = tables.run_figures("g/v/e", [resumed, resumed | {"seed": 2, "train_time_s": None}], "e")
    assert figures["g/v/e/1/minutes"] == 10.0 and figures["g/v/e/2/minutes"] == 1.0  # no train_time_s: wall time
    assert figures["g/v/e/1/sps"] == 10.0 and figures["g/v/e/2/sps"] == 50.0  # steps / every process's time
    assert figures["g/v/e/max/minutes"] == 10.0 and figures["g/v/e/mean/last_100"] == 2.0
    assert quoted.pm("x", spec=".1f") == "{x/mean/last_100:.1f} +- {x/std/last_100:.1f}"
    assert quoted.runs("x", "eval", ".2f", last=" and ") == "{x/1/eval:.2f}, {x/2/eval:.2f} and {x/3/eval:.2f}"


def test_the_pages_are_checked_against_the_records_never_a_run_folder_of_this_machine(copy, tmp_path):

    # a finished run folder here whose figures differ from its committed record
    finished_run_folder(tmp_path / "here" / "runs", "Swimmer-v4", "mujoco-default", 1, [900.0] * 120)
    args = ["--dir", str(tmp_path / "here"), "--records", str(copy / "records"), "--root", str(copy)]
    assert check("--check", *args).returncode == 0
    printed = check(*args[:2])
    assert printed.returncode == 0 and "| Swimmer-v4 |" in printed.stdout, printed.stderr
    assert "| Swimmer-v4 | 3 | 104 +- 33 |" not in printed.stdout  # printing reads the folder here
    assert "mujoco/default/Swimmer/1/last_100 = 129.6" in check("--names", *args).stdout
    assert check("--write", *args).returncode == 0 and check("--check", *args[2:]).returncode == 0


def test_check_and_write_keep_every_page_with_every_block_in_step_with_synthetic_records(tmp_path, monkeypatch, capsys):
    """On small synthetic records and pages, not the committed ones: --check exits 1 naming each page that differs (the
    README and every page of docs/), each of a page's blocks on its own; --write mends them all, and then --check
    exits 0, reading the records, never a run folder of this machine."""
    records, root = tmp_path / "records", tmp_path / "root"
    records.mkdir()
    (root / "docs").mkdir(parents=True)
    (records / "random.json").write_text(json.dumps({"HalfCheetah-v4": -100.0}))
    for seed in (1, 2, 3):
        run = grid.Run("mujoco", "default", "HalfCheetah-v4", seed, None, ())
        record = {"grid": "mujoco", "variant": "default", "env_id": run.env_id, "seed": seed, "steps": 1000}
        record |= {"last_10": 0.0, "last_100": 1000.0 + seed, "eval": None, "curve": None}
        Path(grid.record_path(run, str(records))).write_text(json.dumps(record))
    two_blocks = "<!-- tables.py: mujoco -->\n| old |\n<!-- /tables.py -->\nBetween the tables: HalfCheetah 5 over its"
    two_blocks += " seeds.\n<!-- tables.py: atari-10m-summary -->\nold\n<!-- /tables.py -->\nThe end.\n"
    (root / "README.md").write_text(two_blocks)
    (root / "docs" / "results.md").write_text("Results.\n<!-- tables.py: mujoco -->\n<!-- /tables.py -->\n")
    (root / "docs" / "other.md").write_text("No table here.\n")
    monkeypatch.setattr(
        tables, "QUOTED_IN", {"README.md": ["HalfCheetah {mujoco/default/HalfCheetah/mean/last_100:.0f} over"]}
    )
    monkeypatch.setattr(tables, "BOOTSTRAP_REPS", 100)
    here = tmp_path / "here"  # a finished run folder of this machine, its figures not the record's
    finished_run_folder(here / "runs", "HalfCheetah-v4", "mujoco-default", 1, [9000.0] * 120)

    def tables_main(*flags: str) -> tuple[int, str]:
        paths = ["--records", str(records), "--root", str(root), "--dir", str(here)]
        monkeypatch.setattr(sys, "argv", ["tables.py", *flags, *paths])
        with pytest.raises(SystemExit) as exit_:
            tables.main()
        return exit_.value.code, capsys.readouterr().err

    code, err = tables_main("--check")
    assert code == 1 and err.splitlines() == [
        f"differs from the records: {p}" for p in ("README.md", "docs/results.md")
    ]
    assert (root / "README.md").read_text() == two_blocks  # --check writes nothing
    assert tables_main("--write")[0] == 0
    readme = (root / "README.md").read_text()
    row = f"| HalfCheetah-v4 | 3 | 1002 +- 1 | - | {tables.CLEANRL_MUJOCO['HalfCheetah-v4']} |"
    assert row in readme and row in (root / "docs" / "results.md").read_text()
    assert "\n<!-- /tables.py -->\nBetween the tables: HalfCheetah 1002 over its seeds.\n" in readme  # both blocks kept
    summary = "<!-- tables.py: atari-10m-summary -->\nNo run has reached 10M steps yet.\n<!-- /tables.py -->\n"
    assert f"{summary}The end.\n" in readme  # the second block rewritten on its own, the text after it kept
    assert (root / "docs" / "other.md").read_text() == "No table here.\n"
    assert tables_main("--check") == (0, "")


# How the project was made is not what a reader can use: phrases that describe its makers' working arrangements (a
# "working session", "every session", the "sessions a run spanned") rather than the runs (resumed after any stop,
# trained by one process or several). Whole phrases, so that honest uses (a POSIX session) pass.
MAKERS_ARRANGEMENTS = re.compile(
    r"working (session|day)s?|(every|each|next|this|a) session\b|sessions? (a|the) run|first thing in", re.I
)


def test_the_pages_and_the_tools_help_speak_of_the_project_not_of_how_it_was_made():
    texts = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")), *sorted((ROOT / "benchmarks").glob("*.py"))]
    texts += sorted(ROOT.glob("ppo_*.py"))
    found = [f"{path.name}: {m.group(0)!r}" for path in texts for m in MAKERS_ARRANGEMENTS.finditer(path.read_text())]
    assert not found, found


def github_anchor(heading: str) -> str:
    """The id GitHub gives a Markdown heading: lower case, punctuation dropped, spaces as hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def test_every_link_on_the_pages_reaches_a_file_and_each_anchor_a_heading_there():
    pages = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    unfenced = {page: re.sub(r"```.*?```", "", page.read_text(), flags=re.S) for page in pages}
    headings = {
        page: {github_anchor(h) for h in re.findall(r"^#+ (.+)$", text, flags=re.M)} for page, text in unfenced.items()
    }
    links = [(page, target) for page, text in unfenced.items() for target in re.findall(r"\]\(([^)\s]+)\)", text)]
    local = [(page, target) for page, target in links if not re.match(r"[a-z]+:", target)]
    assert len(local) >= 50  # the README's and docs' links to each other, their figures and the scripts
    broken = []
    for page, target in local:
        path, _, anchor = target.partition("#")
        dest = (page.parent / path).resolve() if path else page
        if not dest.exists() or (anchor and anchor not in headings.get(dest, set())):
            broken.append(f"{page.name}: {target}")
    assert not broken, broken
    assert (
        github_anchor("At the paper's scale: eleven settings, seven tasks")
        == "at-the-papers-scale-eleven-settings-seven-tasks"
    )


# Collects the suite in a child pytest and prints, per test, the reasons of its skipif marks (whatever their conditions
# here): the README's skip breakdown is checked on any machine, with or without a GPU or a Slurm cluster.
COLLECT_SKIP_REASONS = """
import json, sys, pytest
class Reasons:
    def pytest_collection_finish(self, session):
        found = [[m.kwargs.get("reason", "") for m in item.iter_markers("skipif")] for item in session.items]
        print("SKIP-REASONS " + json.dumps(found))
sys.exit(pytest.main(["--collect-only", "-q", "-n0", "-p", "no:cacheprovider"], plugins=[Reasons()]))
"""

# The README's words for each skip (a pattern), and a piece of the reason its tests' marks give.
README_SKIPS = {
    "need a GPU": "CUDA GPU",
    "of them two": "two CUDA GPUs",  # "2 need a GPU, one of them two"
    "a CPU with bf16": "AVX512-BF16",
    "libEGL": "libEGL",
    "a Slurm cluster": "Slurm cluster",
    "runs? only without wandb": "wandb is installed",
}


def test_the_readme_s_set_up_is_what_ci_runs_its_torch_pin_and_its_test_count_the_suite_s():
    """.ci/run runs exactly the README's three set-up and test commands (a fresh clone passes with nothing else), the
    CPU-only install names the pinned torch, and the README's count of tests, and of the tests each missing piece
    skips, is what pytest collects."""
    readme = (ROOT / "README.md").read_text()
    block = readme.split("## Set-up and tests")[1].split("```bash\n")[1].split("```")[0]
    uncommented = [re.sub(r"\s+#.*$", "", line) for line in block.splitlines()]
    ci = [re.sub(r"\s+#.*$", "", line) for line in (ROOT / ".ci" / "run").read_text().splitlines()]
    assert len(uncommented) == 3 and ci[-3:] == uncommented, (ci, uncommented)
    (pin,) = re.findall(r"^torch==(\S+)$", (ROOT / "requirements.txt").read_text(), flags=re.M)
    assert f"pip install torch=={pin} --index-url" in " ".join(readme.split())
    command = [sys.executable, "-c", COLLECT_SKIP_REASONS]
    proc = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=HANG_TIMEOUT)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    (collected,) = re.findall(r"^(\d+) tests? collected", proc.stdout, flags=re.M)
    (said,) = re.findall(r"^pytest +# (\d+) tests", block, flags=re.M)
    assert int(said) == int(collected), f"the README says {said} tests, pytest collects {collected}"
    (reasons,) = re.findall(r"^SKIP-REASONS (.*)$", proc.stdout, flags=re.M)
    reasons = json.loads(reasons)
    assert len(reasons) == int(collected)
    (line,) = re.findall(r"^pytest +# \d+ tests \((.*?)\)", block, flags=re.M)
    for words, piece in README_SKIPS.items():
        (count,) = re.findall(rf"(\w+) {words}", line) or [None]
        assert count is not None, f"the README's test line no longer names {words!r}: {line}"
        number = int(count) if count.isdigit() else {"one": 1, "two": 2}[count]
        marked = sum(any(piece in reason for reason in item) for item in reasons)
        assert number == marked, f"the README says {count} {words}; {marked} tests carry a skip mark naming {piece!r}"


def test_the_repository_is_as_ruff_formats_and_lints_it():
    """One formatter and linter for the whole repository (the README: `ruff check .`, `ruff format --check .`)."""
    for command in (["check", "."], ["format", "--check", "."]):
        proc = subprocess.run(
            [sys.executable, "-m", "ruff", *command], cwd=ROOT, capture_output=True, text=True, timeout=HANG_TIMEOUT
        )
        assert proc.returncode == 0, f"ruff {' '.join(command)}:\n{proc.stdout[-3000:]}{proc.stderr[-2000:]}"
