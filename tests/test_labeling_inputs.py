"""`verl-ebpo label-topics` / `label-difficulty` on inputs, outputs and options they cannot use: no lost input
(OUTPUT == INPUT, also via links), no replaced FIFO/folder, umask honoured, scorer exceptions fail the run unless
tolerated explicitly, `--from-field` without scikit-learn, and --k/--workers/... checked before the slow step.
Every CLI refusal: exit code 2, exactly one line on stderr, no traceback."""

from __future__ import annotations

import hashlib
import json
import os
import re
import stat
import sys
import threading

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from verl_ebpo.tools.cli import main as cli_main
from verl_ebpo.tools import labeling as lab
from verl_ebpo.samplers.fields import read_field

TYPES = ["Geometry", None, "Geometry", "Probability"]


def _write(path, types=TYPES):
    rows = [
        {
            "data_source": "toy",
            "prompt": [{"role": "user", "content": f"Find the area of triangle number {i}."}],
            "type": t,
            "reward_model": {"style": "rule", "ground_truth": str(i)},
            "extra_info": {"index": i},
        }
        for i, t in enumerate(types)
    ]
    pq.write_table(pa.Table.from_pylist(rows), path)
    return path


def _rollouts(path, lines):
    path.write_text("".join(json.dumps(x) + "\n" for x in lines))
    return path


def _digest(path):
    return hashlib.sha256(open(path, "rb").read()).hexdigest()


def _cli(capsys, *argv):
    rc = cli_main([*map(str, argv)])
    out = capsys.readouterr()
    return rc, out.out, out.err


def _refused(result, command, *words):
    rc, out, err = result
    assert rc == 2, (rc, out, err)
    assert "Traceback" not in err and err.count("\n") == 1, err
    assert err.startswith(f"verl-ebpo {command}: error: "), err
    for w in words:
        assert w in err, (w, err)


@pytest.fixture
def src(tmp_path):
    return _write(tmp_path / "in.parquet")


@pytest.fixture
def rollouts(tmp_path):
    return _rollouts(tmp_path / "r.jsonl", [{"index": i, "response": str(i)} for i in range(4)])


def good_scorer(data_source, solution_str, ground_truth, extra_info=None):
    return float(solution_str == ground_truth)


def broken_scorer(data_source, solution_str, ground_truth, extra_info=None):
    if solution_str in ("1", "3"):
        raise RuntimeError("verifier crashed\nwith a second line")
    return float(solution_str == ground_truth)


@pytest.fixture
def scorers(monkeypatch):
    mod = type(sys)("hardening_scorers")
    mod.good, mod.broken = good_scorer, broken_scorer
    monkeypatch.setitem(sys.modules, "hardening_scorers", mod)
    return "hardening_scorers"


# -- outputs that would destroy an input or a special file --------------------------------------------------------


def _same_file_outputs(tmp_path, src):
    link = tmp_path / "link.parquet"
    link.symlink_to(src)
    hard = tmp_path / "hard.parquet"
    os.link(src, hard)
    return {"same path": src, "relative path": os.path.relpath(src), "symlink": link, "hard link": hard}


def test_label_topics_refuses_to_write_over_its_input(tmp_path, src, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    before = _digest(src)
    for name, out in _same_file_outputs(tmp_path, src).items():
        res = _cli(capsys, "label-topics", src, out, "--from-field", "type", "--missing", "drop")
        _refused(res, "label-topics", "refusing to write", "it is the input file")
        assert _digest(src) == before, name  # with --missing drop the rows would have been gone
    assert pq.read_table(src).num_rows == 4


def test_the_refusal_names_the_explicit_way_to_label_in_place(tmp_path, src, rollouts, capsys, scorers):
    _refused(_cli(capsys, "label-topics", src, src, "--from-field", "type", "--missing", "fill", "--fill-value", "x"),
             "label-topics", "pass --in-place")
    _refused(_cli(capsys, "label-difficulty", src, rollouts, rollouts, "--scorer", f"{scorers}:good", "--in-place"),
             "label-difficulty", "--in-place writes the labels into the input file: OUTPUT must be")
    res = _cli(capsys, "label-difficulty", src, rollouts, rollouts, "--scorer", f"{scorers}:good")
    _refused(res, "label-difficulty", "it is the input file")
    assert "--in-place" not in res[2]  # the rollouts can never be the output


def test_in_place_labels_the_input_atomically_and_never_drops_rows(tmp_path, src, rollouts, capsys, scorers):
    res = _cli(capsys, "label-topics", src, src, "--from-field", "type", "--missing", "drop", "--in-place")
    _refused(res, "label-topics", "--in-place with --missing drop would remove rows from the only copy")
    assert pq.read_table(src).num_rows == 4
    other = tmp_path / "other.parquet"
    _write(other)
    _refused(_cli(capsys, "label-topics", src, other, "--from-field", "type", "--in-place"), "label-topics",
             f"OUTPUT must be {src}")
    mode = 0o640
    os.chmod(src, mode)
    rc, _, err = _cli(capsys, "label-topics", src, src, "--from-field", "type", "--missing", "fill", "--fill-value",
                      "other", "--in-place")
    assert rc == 0, err
    assert read_field(pq.read_table(src), "extra_info.topic") == ["Geometry", "other", "Geometry", "Probability"]
    rc, _, err = _cli(capsys, "label-difficulty", src, rollouts, src, "--scorer", f"{scorers}:good", "--in-place",
                      "--no-progress")
    assert rc == 0, err
    table = pq.read_table(src)
    assert read_field(table, "extra_info.difficulty") == [1.0] * 4 and table.num_rows == 4
    assert stat.S_IMODE(os.stat(src).st_mode) == mode
    assert sorted(os.listdir(tmp_path)) == ["in.parquet", "other.parquet", "r.jsonl"]  # no temporary left
    # a failure half-way leaves the input as it was
    before = _digest(src)
    _refused(_cli(capsys, "label-difficulty", src, rollouts, src, "--scorer", f"{scorers}:broken", "--in-place",
                  "--overwrite", "--no-progress"), "label-difficulty", "made the scorer raise")
    assert _digest(src) == before


def test_label_difficulty_refuses_to_write_over_either_input(tmp_path, src, rollouts, capsys, scorers):
    before = (_digest(src), _digest(rollouts))
    for out in (src, rollouts, *_same_file_outputs(tmp_path, src).values()):
        res = _cli(capsys, "label-difficulty", src, rollouts, out, "--scorer", f"{scorers}:good", "--no-progress")
        _refused(res, "label-difficulty", "it is the input file")
    assert (_digest(src), _digest(rollouts)) == before


def test_summary_json_may_not_be_the_input_or_the_output(tmp_path, src, capsys):
    out = tmp_path / "out.parquet"
    _refused(_cli(capsys, "label-topics", src, out, "--from-field", "type", "--missing", "drop",
                  "--summary-json", src), "label-topics", "it is the input file")
    _refused(_cli(capsys, "label-topics", src, out, "--from-field", "type", "--missing", "drop",
                  "--summary-json", out), "label-topics", "two outputs name one file")
    assert not out.exists()


@pytest.mark.parametrize("kind", ["fifo", "directory"])
def test_non_regular_outputs_are_refused_and_left_alone(tmp_path, src, rollouts, capsys, scorers, kind):
    out = tmp_path / "out.parquet"
    os.mkfifo(out) if kind == "fifo" else out.mkdir()
    word = "a FIFO" if kind == "fifo" else "a directory"
    _refused(_cli(capsys, "label-topics", src, out, "--from-field", "type", "--missing", "drop"),
             "label-topics", f"it is {word}, not a regular file")
    _refused(_cli(capsys, "label-difficulty", src, rollouts, out, "--scorer", f"{scorers}:good", "--no-progress"),
             "label-difficulty", f"it is {word}")
    assert out.is_fifo() if kind == "fifo" else out.is_dir()


@pytest.mark.parametrize("umask", [0o022, 0o027, 0o077])
def test_outputs_honour_the_umask_and_keep_an_existing_files_mode(tmp_path, src, capsys, umask):
    out, summary = tmp_path / "out.parquet", tmp_path / "summary.json"
    old = os.umask(umask)
    try:
        assert _cli(capsys, "label-topics", src, out, "--from-field", "type", "--missing", "drop",
                    "--summary-json", summary)[0] == 0
    finally:
        os.umask(old)
    for p in (out, summary):
        assert stat.S_IMODE(os.stat(p).st_mode) == 0o666 & ~umask, p
    os.chmod(out, 0o604)
    assert _cli(capsys, "label-topics", src, out, "--from-field", "type", "--missing", "drop")[0] == 0
    assert stat.S_IMODE(os.stat(out).st_mode) == 0o604


# -- inputs that are not regular files never block ----------------------------------------------------------------


def _within(fn, timeout=60):
    box = {}
    t = threading.Thread(target=lambda: box.setdefault("v", fn()), daemon=True)
    t.start()
    t.join(timeout)
    assert not t.is_alive(), "blocked"
    return box["v"]


def test_a_fifo_input_parquet_is_refused_without_blocking(tmp_path, capsys):
    fifo = tmp_path / "in.parquet"
    os.mkfifo(fifo)
    res = _within(lambda: _cli(capsys, "label-topics", fifo, tmp_path / "o.parquet", "--from-field", "type"))
    _refused(res, "label-topics", "is a FIFO, not a regular parquet file")


def test_a_fifo_rollouts_file_streams_and_an_orphan_one_does_not_block(tmp_path, src, capsys, scorers):
    fifo = tmp_path / "r.fifo"
    os.mkfifo(fifo)
    out = tmp_path / "o.parquet"
    res = _within(lambda: _cli(capsys, "label-difficulty", src, fifo, out, "--scorer", f"{scorers}:good",
                               "--no-progress"))  # nobody writes: end of file at once -> no rollouts
    _refused(res, "label-difficulty", "4 of 4 rows have no rollouts")

    # `<(generate ...)`: a pipe whose writer is attached: every line is read
    r, w = os.pipe()

    def writer():
        with os.fdopen(w, "w") as f:
            for i in range(4):
                f.write(json.dumps({"index": i, "response": str(i)}) + "\n")

    t = threading.Thread(target=writer, daemon=True)
    t.start()
    try:
        rows = _within(lambda: lab.read_rollouts(f"/dev/fd/{r}", 4))
    finally:
        t.join(10)
        os.close(r)
    assert rows == {i: [str(i)] for i in range(4)}


@pytest.mark.parametrize("content, words", [(b"not parquet", "cannot read"), (b"", "cannot read")])
def test_garbage_input_parquet_is_one_line(tmp_path, capsys, content, words):
    bad = tmp_path / "bad.parquet"
    bad.write_bytes(content)
    _refused(_cli(capsys, "label-topics", bad, tmp_path / "o.parquet", "--from-field", "type"), "label-topics", words)


def test_non_utf8_rollouts_are_one_line(tmp_path, src, capsys, scorers):
    bad = tmp_path / "r.jsonl"
    bad.write_bytes(b'{"index": 0, "response": "\xff"}\n')
    _refused(_cli(capsys, "label-difficulty", src, bad, tmp_path / "o.parquet", "--scorer", f"{scorers}:good",
                  "--no-progress"), "label-difficulty", "utf-8")


# -- scorer exceptions ---------------------------------------------------------------------------------------------


def test_scorer_exceptions_fail_the_run_with_count_and_first_example(tmp_path, src, rollouts, capsys, scorers):
    out = tmp_path / "out.parquet"
    res = _cli(capsys, "label-difficulty", src, rollouts, out, "--scorer", f"{scorers}:broken", "--no-progress")
    _refused(res, "label-difficulty", "2 of 4 answers made the scorer raise",
             "first: row 1: RuntimeError: verifier crashed with a second line", "--max-scorer-errors")
    assert not out.exists()
    _refused(_cli(capsys, "label-difficulty", src, rollouts, out, "--scorer", f"{scorers}:broken", "--no-progress",
                  "--max-scorer-errors", "1"), "label-difficulty", "2 of 4 answers")
    with pytest.raises(lab.LabelingError, match="2 of 4 answers made the scorer raise"):
        lab.label_difficulty(pq.read_table(src), str(rollouts), scorer=broken_scorer, progress=False)


def test_scorer_exceptions_within_the_explicit_tolerance_count_as_wrong(tmp_path, src, rollouts, capsys, scorers):
    out = tmp_path / "out.parquet"
    rc, stdout, err = _cli(capsys, "label-difficulty", src, rollouts, out, "--scorer", f"{scorers}:broken",
                           "--no-progress", "--max-scorer-errors", "2", "--workers", "2")
    assert rc == 0, err
    assert "2 answers made the scorer raise (counted as wrong, within --max-scorer-errors 2)" in stdout
    assert read_field(pq.read_table(out), "extra_info.difficulty") == [1.0, 0.0, 1.0, 0.0]


# -- optional scikit-learn, early validation ------------------------------------------------------------------------


@pytest.fixture
def no_sklearn(monkeypatch):
    for name in ("sklearn", "sklearn.cluster", "sklearn.feature_extraction", "sklearn.feature_extraction.text"):
        monkeypatch.setitem(sys.modules, name, None)  # import raises ImportError


@pytest.fixture
def embed_calls(monkeypatch):
    calls = []
    from verl_ebpo.tools.labeling import topics

    monkeypatch.setattr(topics, "embed_texts", lambda texts, **kw: calls.append(len(texts)) or [[1.0, 0.0]] * len(texts))
    return calls


def test_from_field_works_without_scikit_learn(tmp_path, src, capsys, no_sklearn):
    out = tmp_path / "out.parquet"
    rc, stdout, err = _cli(capsys, "label-topics", src, out, "--from-field", "type", "--missing", "fill",
                           "--fill-value", "other")
    assert rc == 0, err
    assert read_field(pq.read_table(out), "extra_info.topic") == ["Geometry", "other", "Geometry", "Probability"]
    assert "top words in the summary: they need scikit-learn (pip install 'verl-ebpo[topics]')" in stdout
    assert "Geometry" in stdout


def test_kmeans_without_scikit_learn_names_the_extra_before_embedding(tmp_path, src, capsys, no_sklearn,
                                                                       embed_calls):
    _refused(_cli(capsys, "label-topics", src, tmp_path / "o.parquet", "--k", "2"), "label-topics",
             "k-means clustering needs scikit-learn: pip install 'verl-ebpo[topics]'")
    assert embed_calls == []


@pytest.mark.parametrize(
    "argv, words",
    [
        (["--k", "0"], "--k must be >= 1, got 0"),
        (["--k", "-3"], "--k must be >= 1"),
        (["--k", "5"], "cannot make 5 clusters from 4 rows; lower --k"),
        (["--batch-size", "0"], "--batch-size must be >= 1"),
        (["--top-words", "-1"], "--top-words must be >= 0"),
    ],
)
def test_topic_options_are_checked_before_embedding(tmp_path, src, capsys, embed_calls, argv, words):
    _refused(_cli(capsys, "label-topics", src, tmp_path / "o.parquet", *argv), "label-topics", words)
    assert embed_calls == []
    library_words = words.replace("--k", "k").replace("--batch-size", "batch_size").replace("--top-words", "top_words")
    with pytest.raises(lab.LabelingError, match=library_words.split(",")[0].replace("(", r"\(")):  # names arguments
        lab.label_topics(pq.read_table(src), k=int(argv[1]) if argv[0] == "--k" else 2,
                         batch_size=int(argv[1]) if argv[0] == "--batch-size" else 64,
                         top_words=int(argv[1]) if argv[0] == "--top-words" else 6)
    assert embed_calls == []


@pytest.mark.parametrize(
    "argv, words",
    [(["--workers", "0"], "--workers must be >= 1, got 0"), (["--max-scorer-errors", "-1"], "--max-scorer-errors must be >= 0")],
)
def test_difficulty_options_are_checked_before_scoring(tmp_path, src, rollouts, capsys, argv, words):
    calls = []
    mod = type(sys)("counting_scorer")
    mod.score = lambda **kw: calls.append(1) or 1.0
    sys.modules["counting_scorer"] = mod
    try:
        _refused(_cli(capsys, "label-difficulty", src, rollouts, tmp_path / "o.parquet", "--scorer",
                      "counting_scorer:score", "--no-progress", *argv), "label-difficulty", words)
    finally:
        del sys.modules["counting_scorer"]
    assert calls == []


def test_a_folder_of_parquet_files_is_still_an_input(tmp_path, capsys):
    folder = tmp_path / "parts"
    folder.mkdir()
    _write(folder / "part-0.parquet")
    rc, _, err = _cli(capsys, "label-topics", folder, tmp_path / "o.parquet", "--from-field", "type", "--missing",
                      "fill", "--fill-value", "x")
    assert rc == 0, err
    assert pq.read_table(tmp_path / "o.parquet").num_rows == 4
    before = _digest(folder / "part-0.parquet")
    for out in (folder / "part-0.parquet", folder / "new.parquet"):
        _refused(_cli(capsys, "label-topics", folder, out, "--from-field", "type", "--missing", "drop"),
                 "label-topics", "inside the input folder")
    assert _digest(folder / "part-0.parquet") == before and not (folder / "new.parquet").exists()


# -- --index-field values that cannot be matched (lists, dicts) -----------------------------------------------------


def _write_nested(path):
    rows = [
        {
            "data_source": "toy",
            "prompt": [{"role": "user", "content": f"Question {i}?"}],
            "reward_model": {"style": "rule", "ground_truth": str(i)},
            "extra_info": {"index": i, "tags": [f"t{i}", "x"], "meta": {"id": i}},
        }
        for i in range(3)
    ]
    pq.write_table(pa.Table.from_pylist(rows), path)
    return path


@pytest.mark.parametrize("field, kind", [("extra_info.tags", "list"), ("extra_info.meta", "dict")])
def test_an_index_field_of_lists_or_dicts_is_one_line_naming_the_field_and_row(tmp_path, capsys, scorers, field,
                                                                               kind):
    src = _write_nested(tmp_path / "in.parquet")
    roll = _rollouts(tmp_path / "r.jsonl", [{"index": i, "response": str(i)} for i in range(3)])
    out = tmp_path / "o.parquet"
    res = _cli(capsys, "label-difficulty", src, roll, out, "--scorer", f"{scorers}:good", "--index-field", field,
               "--no-progress")
    _refused(res, "label-difficulty", f"--index-field {field!r}: row 0 holds a {kind}", "integers or strings")
    assert not out.exists()
    with pytest.raises(lab.LabelingError, match=f"row 0 holds a {kind}"):
        lab.label_difficulty(pq.read_table(src), str(roll), scorer=good_scorer, index_field=field, progress=False)


@pytest.mark.parametrize("key", [[1], {"i": 1}])
def test_a_rollout_index_that_is_a_list_or_object_is_one_line_naming_the_line_and_field(tmp_path, capsys, scorers,
                                                                                         key):
    src = _write_nested(tmp_path / "in.parquet")
    roll = _rollouts(tmp_path / "r.jsonl", [{"index": 0, "response": "0"}, {"index": key, "response": "1"}])
    res = _cli(capsys, "label-difficulty", src, roll, tmp_path / "o.parquet", "--scorer", f"{scorers}:good",
               "--index-field", "extra_info.index", "--no-progress")
    _refused(res, "label-difficulty", f"{roll}:2: index is a {type(key).__name__}", "--index-field 'extra_info.index'")


# -- the output checks run once, before any reading or scoring ----------------------------------------------------------


def test_outputs_are_checked_once_before_any_work(tmp_path, src, rollouts, capsys, scorers, monkeypatch):
    events = []
    from verl_ebpo.tools.labeling import cli

    real_check, real_read = cli.check_outputs, cli.read_table
    monkeypatch.setattr(cli, "check_outputs", lambda *a, **k: events.append(("check", list(a[0]))) or real_check(*a, **k))
    monkeypatch.setattr(cli, "read_table", lambda *a: events.append(("read",)) or real_read(*a))
    out, summary = str(tmp_path / "o.parquet"), str(tmp_path / "s.json")
    rc, _, err = _cli(capsys, "label-topics", src, out, "--from-field", "type", "--missing", "drop",
                      "--summary-json", summary)
    assert rc == 0, err
    assert events == [("check", [out, summary]), ("read",)]
    events.clear()
    rc, _, err = _cli(capsys, "label-difficulty", src, rollouts, out, "--scorer", f"{scorers}:good", "--overwrite",
                      "--no-progress")
    assert rc == 0, err
    assert events == [("check", [out]), ("read",)]


def test_the_in_place_hint_is_given_only_for_output_over_input(tmp_path, src, capsys):
    """With one check for all outputs, the "pass --in-place" way out still belongs to OUTPUT == INPUT only: it does
    not allow a summary over the input."""
    res = _cli(capsys, "label-topics", src, tmp_path / "o.parquet", "--from-field", "type", "--missing", "drop",
               "--summary-json", src)
    _refused(res, "label-topics", "it is the input file")
    assert "--in-place" not in res[2]
    # with --in-place OUTPUT is INPUT: a summary over the input (also by a hard link) is two outputs in one file
    os.link(src, tmp_path / "hard.json")
    for summary in (src, tmp_path / "hard.json"):
        res = _cli(capsys, "label-topics", src, src, "--from-field", "type", "--missing", "fill", "--fill-value", "x",
                   "--in-place", "--summary-json", summary)
        _refused(res, "label-topics", "two outputs name one file")
    assert pq.read_table(src).num_rows == 4 and not _field_exists(src)


def _field_exists(path):
    from verl_ebpo.tools.labeling.io import _field_exists as exists

    return exists(pq.read_table(path), "extra_info.topic")


# -- the one scorer loader -------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "spec, words",
    [
        ("no_such_module_xyz:score", "importing 'no_such_module_xyz' failed (ModuleNotFoundError"),
        ("json:no_such_function", "module 'json' has no attribute 'no_such_function'"),
        ("json", "--scorer must look like module:function"),
        (":score", "--scorer must look like module:function"),
        ("json:", "--scorer must look like module:function"),
        ("json:__name__", "is not callable (it is a str)"),
        ("broken_at_import_mod:score", "importing 'broken_at_import_mod' failed (RuntimeError: no verifier here)"),
        ("syntax_error_mod:score", "importing 'syntax_error_mod' failed (SyntaxError"),
    ],
)
def test_a_bad_scorer_is_one_line(tmp_path, src, rollouts, capsys, monkeypatch, spec, words):
    (tmp_path / "broken_at_import_mod.py").write_text("raise RuntimeError('no verifier\\nhere')\n")
    (tmp_path / "syntax_error_mod.py").write_text("def score(:\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    for name in ("broken_at_import_mod", "syntax_error_mod"):
        monkeypatch.delitem(sys.modules, name, raising=False)
    from verl_ebpo.tools.scorer import ScorerError, load_scorer  # the one loader, with the reward

    with pytest.raises(ScorerError, match=re.escape(words)):
        load_scorer(spec)
    _refused(_cli(capsys, "label-difficulty", src, rollouts, tmp_path / "o.parquet", "--scorer", spec,
                  "--no-progress"), "label-difficulty", words)


# -- an index that is not an integer row number or text is refused, with and without --index-field -----------------


@pytest.mark.parametrize("key", [True, 2.0, False, 1.5])
@pytest.mark.parametrize("index_field", [None, "extra_info.index"])
def test_a_bool_or_float_index_is_refused_with_and_without_index_field(tmp_path, capsys, scorers, key, index_field):
    """A bool or float index matches no row, although 1 == True and 2 == 2.0 as dict keys (`true` is not row 1,
    `2.0` not row 2)."""
    src = _write_nested(tmp_path / "in.parquet")
    roll = _rollouts(tmp_path / "r.jsonl", [{"index": 0, "response": "0"}, {"index": key, "response": "1"}])
    out = tmp_path / "o.parquet"
    extra = ["--index-field", index_field] if index_field else []
    res = _cli(capsys, "label-difficulty", src, roll, out, "--scorer", f"{scorers}:good", *extra, "--no-progress",
               "--missing", "keep")
    words = (f"{roll}:2: index is a {type(key).__name__}",) if index_field else (f"{roll}:2: index {key!r} is not a row",)
    _refused(res, "label-difficulty", *words)
    assert not out.exists()
