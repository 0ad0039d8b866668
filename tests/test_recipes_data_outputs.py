"""recipes/data/prepare_data.py's outputs under failure and bad input: all outputs and the manifest are one unit
(a failure anywhere leaves the previous complete set; a run killed during its renames is completed by the next
run), outputs are never written over a source or a non-regular file, and garbage/empty inputs are one-line errors.
Every refusal: exit code 2, exactly one line on stderr, no traceback."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from test_recipes_data import DATA, OFFLINE, run_prepare

GOOD = {"problem": ["What is 1+1?", "What is 2+2?"], "answer": ["2", "4"]}
OTHER = {"problem": ["What is 3+3?", "What is 4+4?", "What is 5+5?"], "answer": ["6", "8", "10"]}


def _files(out: Path) -> dict[str, str]:
    """Every entry of the folder (hidden ones too) -> sha256 of a file, or the kind of anything else."""
    res = {}
    for p in sorted(out.iterdir()):
        res[p.name] = hashlib.sha256(p.read_bytes()).hexdigest() if p.is_file() else "dir"
    return res


def _refused(res, *words):
    assert res.returncode == 2, (res.stdout, res.stderr)
    lines = [line for line in res.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("prepare_data: error: "), res.stderr
    assert "Traceback" not in res.stderr
    for w in words:
        assert w in res.stderr, (w, res.stderr)


def _consistent(out: Path):
    manifest = json.loads((out / "manifest.json").read_text())
    for name, entry in manifest["files"].items():
        assert hashlib.sha256((out / name).read_bytes()).hexdigest() == entry["sha256"], name
    return manifest


@pytest.fixture(scope="module")
def previous_set(tmp_path_factory):
    """A complete previous set, written once by the script: math500 and aime25 from GOOD."""
    tmp = tmp_path_factory.mktemp("previous")
    pd.DataFrame(GOOD).to_parquet(tmp / "good.parquet")
    res = run_prepare(tmp / "out", {"math500": tmp / "good.parquet", "aime25": tmp / "good.parquet"},
                      "--only", "math500,aime25", tmp=tmp)
    assert res.returncode == 0, res.stderr
    _consistent(tmp / "out")
    return tmp / "out"


@pytest.fixture
def prepared(tmp_path, previous_set):
    """A copy of the previous set for one test (files keep their modes), and the sources good/other.parquet."""
    pd.DataFrame(GOOD).to_parquet(tmp_path / "good.parquet")
    pd.DataFrame(OTHER).to_parquet(tmp_path / "other.parquet")
    shutil.copytree(previous_set, tmp_path / "out")
    return tmp_path / "out"


def test_a_later_source_failing_leaves_the_previous_set(tmp_path, prepared):
    """math500 converts (new rows), aime25 fails: neither file nor the manifest may change."""
    before = _files(prepared)
    pd.DataFrame({"problem": ["ok", None], "answer": ["1", "2"]}).to_parquet(tmp_path / "bad.parquet")
    res = run_prepare(prepared, {"math500": tmp_path / "other.parquet", "aime25": tmp_path / "bad.parquet"},
                      "--only", "math500,aime25", tmp=tmp_path)
    _refused(res, "aime25: row 1: row has no problem text")
    assert _files(prepared) == before  # no staging folder left either


@pytest.mark.parametrize(
    "make, words",
    [
        (lambda d: pd.DataFrame({"problem": [], "answer": []}).to_parquet(d / "s.parquet"), "has no rows"),
        (lambda d: (d / "s.jsonl").write_text(""), "is empty"),
        (lambda d: (d / "s.parquet").write_bytes(b"\x00garbage" * 10), "is not a parquet file"),
        (lambda d: (d / "s.jsonl").write_text("{not json\n"), "cannot read it (ArrowInvalid: JSON parse error"),
        (lambda d: (d / "s.csv").write_text("a,b\n1,2\n"), "row 0: row has no problem text"),
        (lambda d: (d / "s").mkdir(), "found none"),
        (lambda d: (d / "s.jsonl").write_text('{"problem": "only a header row"}\n'), "row 0: row has no answer"),
    ],
    ids=["zero-rows", "empty-file", "garbage-parquet", "garbage-jsonl", "no-problem-column", "empty-folder",
         "no-answer"],
)
def test_garbage_or_empty_sources_are_one_line_errors_and_change_nothing(tmp_path, prepared, make, words):
    src = tmp_path / "src"
    src.mkdir()
    make(src)
    (path,) = list(src.iterdir())
    before = _files(prepared)
    res = run_prepare(prepared, {"math500": path}, "--only", "math500", tmp=tmp_path)
    _refused(res, "math500", words)
    assert _files(prepared) == before


def _run_patched_main(code: str, tmp_path, prepared) -> subprocess.CompletedProcess:
    """prepare_data's own main, patched by `code`, in a child process, re-preparing math500 and aime25."""
    env = {**os.environ, **OFFLINE, "HF_DATASETS_CACHE": str(tmp_path / "hf")}
    return subprocess.run(
        [sys.executable, "-c", code, str(DATA), "--out-dir", str(prepared), "--only", "math500,aime25",
         "--source", f"math500={tmp_path / 'other.parquet'}", "--source", f"aime25={tmp_path / 'other.parquet'}"],
        env=env, capture_output=True, text=True, timeout=300,
    )


def test_a_write_failure_midway_leaves_the_previous_set(tmp_path, prepared):
    """The disk fails while the second file is staged (the script's own main, in a child process)."""
    before = _files(prepared)
    code = (
        "import sys; sys.path.insert(0, sys.argv[1]); import prepare_data\n"
        "import pandas as pd; real = pd.DataFrame.to_parquet; calls = []\n"
        "def failing(self, path, **kw):\n"
        "    calls.append(path)\n"
        "    if len(calls) == 2: raise OSError(28, 'No space left on device')\n"
        "    return real(self, path, **kw)\n"
        "pd.DataFrame.to_parquet = failing\n"
        "sys.exit(prepare_data.main(sys.argv[2:]))\n"
    )
    res = _run_patched_main(code, tmp_path, prepared)
    _refused(res, "No space left on device")
    assert _files(prepared) == before


@pytest.mark.parametrize("kind", ["fifo", "directory", "source"])
def test_outputs_never_replace_a_special_file_or_a_source(tmp_path, prepared, kind):
    target = prepared / "math500.parquet"
    source = tmp_path / "good.parquet"
    if kind == "source":
        source = target  # re-preparing from the previous output in place would lose it on failure
    else:
        target.unlink()
        os.mkfifo(target) if kind == "fifo" else target.mkdir()
    before = _files(prepared)
    res = run_prepare(prepared, {"math500": source}, "--only", "math500", tmp=tmp_path)
    _refused(res, "refusing to write", str(target), {"fifo": "a FIFO", "directory": "a directory",
                                                      "source": "it is the input file"}[kind])
    assert _files(prepared) == before


@pytest.mark.parametrize(
    "setup, args, words",
    [
        (lambda out: (out / "manifest.json").write_text("{broken"), [], "manifest.json is not valid JSON"),
        (lambda out: (out / "manifest.json").write_text('{"files": [1]}'), [], "is not a prepare_data manifest"),
        (lambda out: (os.unlink(out / "manifest.json"), os.mkfifo(out / "manifest.json")), [], "not a regular file"),
        (None, ["--holdout", "-1", "--only", "dapo_math"], "--holdout must be >= 0"),
        (None, ["--only", " , "], "--only names no source"),
    ],
    ids=["manifest-garbage", "manifest-shape", "manifest-fifo", "negative-holdout", "empty-only"],
)
def test_bad_state_or_arguments_are_one_line_and_change_nothing(tmp_path, prepared, setup, args, words):
    if setup:
        setup(prepared)
    before = _files(prepared)
    res = run_prepare(prepared, {"math500": tmp_path / "other.parquet"}, *(args or ["--only", "math500"]),
                      tmp=tmp_path)
    _refused(res, words)
    assert _files(prepared) == before


def test_out_dir_that_is_a_file_is_one_line(tmp_path):
    (tmp_path / "afile").write_text("x")
    pd.DataFrame(GOOD).to_parquet(tmp_path / "good.parquet")
    res = run_prepare(tmp_path / "afile", {"math500": tmp_path / "good.parquet"}, "--only", "math500", tmp=tmp_path)
    _refused(res, "exists and is not a folder")
    assert (tmp_path / "afile").read_text() == "x"


def test_files_honour_the_umask(tmp_path):
    pd.DataFrame(GOOD).to_parquet(tmp_path / "good.parquet")
    args = [sys.executable, str(DATA / "prepare_data.py"), "--out-dir", str(tmp_path / "out"), "--only", "math500",
            "--source", f"math500={tmp_path / 'good.parquet'}"]
    env = {**os.environ, **OFFLINE, "HF_DATASETS_CACHE": str(tmp_path / "hf")}
    res = subprocess.run(["bash", "-c", 'umask 027 && exec "$@"', "_", *args], env=env, capture_output=True, text=True,
                         timeout=300)
    assert res.returncode == 0, res.stderr
    for name in ("math500.parquet", "manifest.json"):
        assert os.stat(tmp_path / "out" / name).st_mode & 0o777 == 0o640, name


@pytest.mark.parametrize("where", ["inside", "the folder itself", "inside, through a link", "source is a link"])
def test_out_dir_inside_a_source_folder_is_refused_before_anything_is_written(tmp_path, where):
    """The rule "an output is never inside an input folder" (verl_ebpo.tools.files.check_output_path): the parquet
    files and manifest would land among the source's files, and a rerun would read them as the source."""
    src = tmp_path / "raw"
    src.mkdir()
    pd.DataFrame(GOOD).to_parquet(src / "part-0.parquet")
    (tmp_path / "raw_link").symlink_to(src)
    source, out = {
        "inside": (src, src / "prepared"),
        "the folder itself": (src, src),
        "inside, through a link": (src, tmp_path / "raw_link" / "prepared"),
        "source is a link": (tmp_path / "raw_link", src / "prepared"),
    }[where]
    before = _files(src)
    res = run_prepare(out, {"math500": source}, "--only", "math500", tmp=tmp_path)
    _refused(res, f"--out-dir {out}", "inside the input folder", str(source))
    assert _files(src) == before  # nothing written: no output, no staging folder, no --out-dir created
