"""recipes/data: preparation from local fixture files (no network) into verl's RL parquet format, loading by
verl's own dataset factory through the recipes' composed config, and the topic / difficulty labelling
that the ordered runs read."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "recipes" / "data"
sys.path.insert(0, str(DATA))
import prepare_data  # noqa: E402

from test_recipes_scripts import compose, dry_run, recipe_env  # noqa: E402

OFFLINE = {"HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}

# DAPO-Math-17k-like rows: 9 distinct problems; repeats (one with other whitespace, one with another answer)
DAPO_PROBLEMS = [
    ("What is $1+1$?", "2"),
    ("Compute the area of a circle of radius 2, in the form $k\\pi$. Give $k$.", "4"),
    ("How many primes are less than 20?", "8"),
    ("Find the derivative of x^3 at x = 2.", "12"),
    ("A fair die is rolled twice. In how many outcomes is the sum 7?", "6"),
    ("What is the determinant of the 2x2 identity matrix?", "1"),
    ("A train travels 60 km in 1.5 hours. What is its speed in km/h?", "40"),
    ("How many edges does a cube have?", "12"),
    ("Solve for x: 3x + 5 = 20.", "5"),
]


def _dapo_row(problem, answer, uid):
    return {
        "data_source": "math_dapo",
        "prompt": [{"content": prepare_data.PROMPT_TEMPLATE.format(problem=problem), "role": "user"}],
        "ability": "MATH",
        "reward_model": {"ground_truth": answer, "style": "rule-lighteval/MATH_v2"},
        "extra_info": {"index": uid},
    }


def write_fixtures(d: Path) -> dict:
    import datasets

    d.mkdir(parents=True, exist_ok=True)
    rows = [_dapo_row(p, a, f"uuid-{i}") for i, (p, a) in enumerate(DAPO_PROBLEMS)]
    rows.insert(3, _dapo_row("What is  $1+1$? ", "2", "uuid-dup-space"))
    rows.append(_dapo_row("How many edges does a cube have?", "13", "uuid-dup-conflict"))
    rows.append(_dapo_row("What is $1+1$?", "2", "uuid-dup-exact"))
    pd.DataFrame(rows).to_parquet(d / "dapo.parquet")
    with open(d / "math500.jsonl", "w") as f:
        for i in range(3):
            f.write(json.dumps({"problem": f"Compute ${i} \\times 3$.", "solution": "long text", "answer": str(3 * i),
                                "subject": "Algebra", "level": 1, "unique_id": f"test/algebra/{i}.json"}) + "\n")
    datasets.Dataset.from_dict({"id": [60, 61], "problem": ["AIME one", "AIME two"], "answer": ["204", "025"],
                                "solution": ["s", "s"]}).save_to_disk(str(d / "aime24_disk"))
    pd.DataFrame({"problem": ["p1", "p2"], "answer": [70, 468], "id": ["0", "1"]}).to_parquet(d / "aime25.parquet")
    pd.DataFrame({"id": [0, 1], "question": ["amc a", "amc b"], "answer": [27.0, 0.5]}).to_csv(d / "amc23.csv", index=False)
    pd.DataFrame({"id": [1606, 1607], "question": ["olym $x$", "olym y"],
                  "final_answer": [["$\\frac{1}{2}$"], ["3", "4"]]}).to_parquet(d / "olympiad.parquet")
    return {
        "dapo_math": d / "dapo.parquet", "math500": d / "math500.jsonl", "aime24": d / "aime24_disk",
        "aime25": d / "aime25.parquet", "amc23": d / "amc23.csv", "olympiadbench": d / "olympiad.parquet",
    }


def run_prepare(out_dir: Path, sources: dict, *extra: str, tmp: Path):
    args = [sys.executable, str(DATA / "prepare_data.py"), "--out-dir", str(out_dir)]
    for name, path in sources.items():
        args += ["--source", f"{name}={path}"]
    env = {**os.environ, **OFFLINE, "HF_DATASETS_CACHE": str(tmp / "hf_cache"), "HF_HOME": str(tmp / "hf_home")}
    return subprocess.run(args + list(extra), env=env, capture_output=True, text=True, timeout=300)


@pytest.fixture(scope="module")
def prepared(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("prep")
    sources = write_fixtures(tmp / "raw")
    out = run_prepare(tmp / "out", sources, tmp=tmp)
    assert out.returncode == 0, out.stderr
    return tmp / "out"


def read(path: Path) -> pd.DataFrame:
    return pd.read_parquet(path)


def test_training_file_is_deduplicated_verl_rows_with_the_dapo_prompt(prepared):
    df = read(prepared / "dapo_math_17k.parquet")
    assert len(df) == len(DAPO_PROBLEMS)
    problems = [row["problem"] for row in df["extra_info"]]
    assert problems == [p for p, _ in DAPO_PROBLEMS]  # first occurrence kept, file order kept
    assert [rm["ground_truth"] for rm in df["reward_model"]] == [a for _, a in DAPO_PROBLEMS]
    assert set(df["data_source"]) == {"math_dapo"}
    first = df.iloc[0]
    (message,) = list(first["prompt"])
    assert message["role"] == "user"
    assert message["content"] == (
        "Solve the following math problem step by step. The last line of your response should be of the form "
        "Answer: $Answer (without quotes) where $Answer is the answer to the problem.\n\nWhat is $1+1$?\n\n"
        'Remember to put your answer on its own line after "Answer:".'
    )
    assert [info["index"] for info in df["extra_info"]] == list(range(len(df)))
    assert first["extra_info"]["source_id"] == "uuid-0" and first["extra_info"]["split"] == "train"

    manifest = json.loads((prepared / "manifest.json").read_text())
    entry = manifest["files"]["dapo_math_17k.parquet"]
    assert (entry["rows_in"], entry["rows"], entry["duplicates"], entry["answer_conflicts"]) == (12, 9, 3, 1)
    assert entry["hf_id"] == "BytedTsinghua-SIA/DAPO-Math-17k"
    for name, info in manifest["files"].items():
        assert hashlib.sha256((prepared / name).read_bytes()).hexdigest() == info["sha256"], name


def test_benchmarks_answers_and_sources(prepared):
    expected = {
        "math500": ["0", "3", "6"],
        "aime24": ["204", "025"],
        "aime25": ["70", "468"],
        "amc23": ["27", "0.5"],
        "olympiadbench": ["\\frac{1}{2}", "3, 4"],  # all parts of a multi-part answer are required
    }
    manifest = json.loads((prepared / "manifest.json").read_text())
    for name, answers in expected.items():
        df = read(prepared / f"{name}.parquet")
        assert [rm["ground_truth"] for rm in df["reward_model"]] == answers, name
        assert set(df["data_source"]) == {name}
        assert all(info["split"] == "test" for info in df["extra_info"])
        content = list(df.iloc[0]["prompt"])[0]["content"]
        assert content.endswith('Remember to put your answer on its own line after "Answer:".')
        assert manifest["files"][f"{name}.parquet"]["hf_id"] == prepare_data.SOURCES[name].hf_id
    assert list(read(prepared / "aime24.parquet")["extra_info"])[1]["source_id"] == "61"


def test_recipe_config_loads_the_files_with_verls_dataset_factory(prepared):
    from omegaconf import OmegaConf
    from verl.trainer.ppo.utils import create_rl_dataset

    from verl_ebpo.tools.tiny.assets import build_tokenizer

    benchmarks = ",".join(f"{prepared}/{b}.parquet" for b in ("math500", "aime24", "aime25", "amc23", "olympiadbench"))
    cfg = OmegaConf.create(compose(dry_run("qwen3_8b", "grpo", {"DATA_DIR": str(prepared), "VAL_FILES": f"[{benchmarks}]"})))
    tok = build_tokenizer()
    train = create_rl_dataset(cfg.data.train_files, cfg.data, tok, None, is_train=True)
    assert len(train) == len(DAPO_PROBLEMS)
    item = train[1]
    assert item["raw_prompt"][0]["content"] == prepare_data.PROMPT_TEMPLATE.format(problem=DAPO_PROBLEMS[1][0])
    assert item["reward_model"]["ground_truth"] == "4"
    val = create_rl_dataset(cfg.data.val_files, cfg.data, tok, None, is_train=False)
    assert len(val) == 3 + 2 + 2 + 2 + 2


def test_holdout_is_disjoint_and_complete(tmp_path):
    sources = write_fixtures(tmp_path / "raw")
    out = run_prepare(tmp_path / "out", {"dapo_math": sources["dapo_math"]}, "--only", "dapo_math",
                      "--holdout", "3", tmp=tmp_path)
    assert out.returncode == 0, out.stderr
    train = read(tmp_path / "out" / "dapo_math_17k.parquet")
    hold = read(tmp_path / "out" / "dapo_math_holdout.parquet")
    tp = {i["problem"] for i in train["extra_info"]}
    hp = {i["problem"] for i in hold["extra_info"]}
    assert len(hold) == 3 and len(train) == len(DAPO_PROBLEMS) - 3
    assert not tp & hp and tp | hp == {p for p, _ in DAPO_PROBLEMS}
    assert [i["split"] for i in hold["extra_info"]] == ["val"] * 3
    assert [i["index"] for i in hold["extra_info"]] == [0, 1, 2]


@pytest.mark.parametrize(
    "args, message",
    [
        (["--only", "math500", "--source", "nope=/x"], "unknown name"),
        (["--only", "math500", "--source", "math500=/does/not/exist"], "no such file"),
        (["--only", "gsm8k"], "unknown name(s) ['gsm8k']"),
        (["--only", "math500", "--holdout", "2"], "--holdout needs dapo_math"),
    ],
)
def test_bad_arguments_fail_clearly(tmp_path, args, message):
    out = run_prepare(tmp_path / "out", {}, *args, tmp=tmp_path)
    assert out.returncode == 2
    assert message in out.stderr


def test_offline_without_a_local_copy_names_the_source_option(tmp_path):
    """No network (HF_*_OFFLINE) and nothing cached: one line, exit 2, naming `--source NAME=PATH`."""
    out = run_prepare(tmp_path / "out", {}, "--only", "math500", tmp=tmp_path)
    assert out.returncode == 2 and out.stderr.count("\n") == 1, out.stderr
    assert "math500 (Hub: " in out.stderr and "--source math500=PATH" in out.stderr
    assert not list((tmp_path / "out").glob("*.parquet"))


def test_row_without_answer_names_the_row(tmp_path):
    pd.DataFrame({"problem": ["a", "b"], "answer": ["1", None]}).to_parquet(tmp_path / "bad.parquet")
    out = run_prepare(tmp_path / "out", {"math500": tmp_path / "bad.parquet"}, "--only", "math500", tmp=tmp_path)
    assert out.returncode == 2
    assert "math500: row 1: row has no answer" in out.stderr


_text = st.text(st.characters(blacklist_categories=("Cs",)), min_size=1, max_size=200).filter(
    lambda s: s.strip() and "Remember to put" not in s and "Solve the following" not in s
)


@settings(max_examples=100, deadline=None)
@given(_text)
def test_template_round_trip(problem):
    wrapped = prepare_data.PROMPT_TEMPLATE.format(problem=problem)
    assert prepare_data.strip_template(wrapped) == problem.strip()
    assert prepare_data.strip_template(problem) == problem.strip()


def test_answer_text():
    assert prepare_data.answer_text(70.0) == "70"
    assert prepare_data.answer_text(2.5) == "2.5"
    assert prepare_data.answer_text(" $\\sqrt{2}$ ") == "\\sqrt{2}"
    assert prepare_data.answer_text(["1", 2]) == "1, 2"
    for bad in ("", "  ", [], True, float("nan"), None):
        with pytest.raises(prepare_data.DataError):
            prepare_data.answer_text(bad)


# ------------------------------------------------------------------------------------------------
# labelling (the ordered runs' inputs)


@pytest.fixture(scope="module")
def labelled(tmp_path_factory):
    """A prepared training file labelled with topics (CPU embeddings + k-means) and with the difficulty of a
    tiny random model (recipes/eval/generate.py --engine hf on CPU, then verl-ebpo label-difficulty)."""
    tmp = tmp_path_factory.mktemp("label")
    sources = write_fixtures(tmp / "raw")
    out = run_prepare(tmp / "data", {"dapo_math": sources["dapo_math"]}, "--only", "dapo_math", tmp=tmp)
    assert out.returncode == 0, out.stderr
    from verl_ebpo.tools.tiny.assets import build_model

    model = build_model(tmp / "tiny")
    env = recipe_env({
        **OFFLINE, "HOME": str(tmp), "DATA_DIR": str(tmp / "data"), "PYTHON": sys.executable, "ENGINE": "hf",
        "DIFFICULTY_MODEL": str(model), "DIFFICULTY_SAMPLES": "2", "DIFFICULTY_MAX_TOKENS": "3", "GPUS": "1", "TP": "1",
    })
    for args in (["topics"], ["difficulty", "qwen3_8b"]):
        res = subprocess.run(["bash", str(DATA / "label_data.sh"), *args], env=env, capture_output=True, text=True,
                             timeout=600)
        assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-3000:]
    return tmp / "data"


@pytest.mark.slow  # label_data.sh end to end (~50 s); the labelling itself: tests/test_labeling*.py
def test_labels_are_written_in_place_without_changing_rows(labelled):
    df = read(labelled / "dapo_math_17k.parquet")
    assert [i["problem"] for i in df["extra_info"]] == [p for p, _ in DAPO_PROBLEMS]
    topics = [i["topic"] for i in df["extra_info"]]
    assert all(t is not None for t in topics) and len(set(topics)) == len(DAPO_PROBLEMS)  # k = 9 clusters, 9 rows
    rates = [i["difficulty_qwen3_8b"] for i in df["extra_info"]]
    assert all(0.0 <= r <= 1.0 for r in rates)
    rollouts = [json.loads(line) for line in (labelled / "difficulty_rollouts_qwen3_8b.jsonl").read_text().splitlines()]
    assert len(rollouts) == 2 * len(DAPO_PROBLEMS)
    assert sorted({r["index"] for r in rollouts}) == list(range(len(DAPO_PROBLEMS)))
    assert json.loads((labelled / "topics.json").read_text())


@pytest.mark.slow  # reads the label_data.sh fixture above
@pytest.mark.parametrize("algo", ["ebpo_topic", "ebpo_diff"])
def test_ordered_runs_read_the_labelled_file(labelled, algo):
    from omegaconf import OmegaConf
    from verl.trainer.ppo.utils import create_rl_dataset

    from verl_ebpo.tools.tiny.assets import build_tokenizer

    cfg = OmegaConf.create(compose(dry_run("qwen3_8b", algo, {"DATA_DIR": str(labelled)})))
    ds = create_rl_dataset(cfg.data.train_files, cfg.data, build_tokenizer(), None, is_train=True)
    assert type(ds).__name__ == {"ebpo_topic": "TopicOrderedDataset", "ebpo_diff": "DifficultyOrderedDataset"}[algo]
    seen = [ds[i]["extra_info"] for i in range(len(ds))]
    # every row is served; verl's drop_last loader would drop an incomplete batch, so the ordered dataset
    # completes it with repeat visits (9 rows, batch 512: one full batch)
    assert len(ds) == cfg.data.train_batch_size
    assert sorted({i["problem"] for i in seen}) == sorted(p for p, _ in DAPO_PROBLEMS)
    assert sorted(i["problem"] for i in seen[: len(DAPO_PROBLEMS)]) == sorted(p for p, _ in DAPO_PROBLEMS)
    if algo == "ebpo_diff":
        rates = [i["difficulty_qwen3_8b"] for i in seen[: len(DAPO_PROBLEMS)]]
        assert rates == sorted(rates, reverse=True)  # easy (high pass rate) first


def test_unknown_template_wording_is_an_error_not_a_nested_prompt():
    row = {"prompt": [{"role": "user", "content": "Solve this. The last line should be Answer: $Answer.\n\n1+1?\n\n"
                                                  "Remember to put your answer on its own line after 'Answer:'"}],
           "reward_model": {"ground_truth": "2"}}
    with pytest.raises(prepare_data.DataError, match="does not recognise"):
        prepare_data.problem_of(row)
