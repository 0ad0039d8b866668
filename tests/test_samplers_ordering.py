"""The pure orderings: hand-computed cases and hypothesis properties."""

from __future__ import annotations

import dataclasses
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from verl_ebpo.samplers.ordering import (
    DifficultyOptions,
    TopicOptions,
    UnlabelledRowsError,
    difficulty_order,
    plan_epoch,
    topic_order,
)


def _runs(seq):
    """Labels of the maximal runs of equal values."""
    out = []
    for x in seq:
        if not out or out[-1] != x:
            out.append(x)
    return out


# ------------------------------------------------------------------------------------------------
# topic: known answers


LABELS = ["b", "a", "c", "a", "b", "a", "c"]  # a: rows 1,3,5  b: 0,4  c: 2,6


def test_topic_clusters_in_first_seen_order_each_a_shuffle_of_its_rows():
    plan = topic_order(LABELS, seed=0)
    idx = plan.indices.tolist()
    assert [LABELS[i] for i in idx] == ["b", "b", "a", "a", "a", "c", "c"]
    assert sorted(idx[:2]) == [0, 4] and sorted(idx[2:5]) == [1, 3, 5] and sorted(idx[5:]) == [2, 6]
    assert [(s.label, s.start, s.stop) for s in plan.segments] == [("b", 0, 2), ("a", 2, 5), ("c", 5, 7)]
    assert plan.dropped == () and plan.completed == 0 and plan.num_rows == 7


def test_unlabelled_rows():
    labels = ["x", None, "y", float("nan"), "", "x"]
    with pytest.raises(UnlabelledRowsError, match=r"3 of 6 rows have no value in 'extra_info.topic' .*\[1, 3, 4\].*verl-ebpo label-topics"):
        topic_order(labels, field="extra_info.topic")
    dropped = topic_order(labels, unlabelled="drop")
    assert dropped.dropped == (1, 3, 4) and sorted(dropped.indices.tolist()) == [0, 2, 5]


def test_bad_options():
    with pytest.raises(ValueError, match="seed"):
        topic_order(LABELS, seed=-1)


def test_numeric_labels_cluster_in_order_of_first_appearance():
    plan = topic_order([3, 1, 3, 2, 1])
    assert _runs([[3, 1, 3, 2, 1][i] for i in plan.indices]) == [3, 1, 2]


# ------------------------------------------------------------------------------------------------
# difficulty: known answers


def test_difficulty_easy_to_hard_with_seeded_ties():
    rates = [0.5, 1.0, 0.0, 0.5, 0.25, 0.5]
    plan = difficulty_order(rates, seed=0)
    idx = plan.indices.tolist()
    assert idx[0] == 1 and sorted(idx[1:4]) == [0, 3, 5] and idx[4:] == [4, 2]
    # the tie order is a function of the seed, and some seed changes it
    assert difficulty_order(rates, seed=0).indices.tolist() == idx
    assert any(difficulty_order(rates, seed=s).indices[1:4].tolist() != idx[1:4] for s in range(1, 20))
    level = [3, 1, 2]  # a level (5 = hard) as docs/ordering.md turns it into a pass-rate-like value: 1 - level / 5
    assert difficulty_order([1 - x / 5 for x in level]).indices.tolist() == [1, 2, 0]  # level 1 (easy) first


def test_difficulty_bad_values():
    with pytest.raises(UnlabelledRowsError, match=r"2 of 4 rows .*\[1, 3\].*label-difficulty"):
        difficulty_order([0.1, None, 0.2, float("nan")])
    with pytest.raises(ValueError, match=r"non-numeric .*\(2, 'hard'\)"):
        difficulty_order([0.1, 0.2, "hard"])
    with pytest.raises(ValueError, match="non-numeric or infinite"):
        difficulty_order([0.1, float("inf")])
    assert difficulty_order([0.1, None, 0.9], unlabelled="drop").indices.tolist() == [2, 0]


def test_fingerprint_tracks_the_order():
    a, b = topic_order(LABELS, seed=0), topic_order(LABELS, seed=0)
    assert a.fingerprint() == b.fingerprint()
    assert any(topic_order(LABELS, seed=s).fingerprint() != a.fingerprint() for s in range(1, 10))


# ------------------------------------------------------------------------------------------------
# properties

labels_st = st.lists(st.sampled_from(["a", "b", "c", "d", None]), min_size=0, max_size=40)


@settings(max_examples=60, deadline=None)
@given(labels=labels_st, seed=st.integers(0, 2**31))
def test_topic_properties(labels, seed):
    plan = topic_order(labels, seed=seed, unlabelled="drop")
    idx = plan.indices.tolist()
    seq = [labels[i] for i in idx]
    # clusters are contiguous: each label forms one run
    runs = _runs(seq)
    assert len(runs) == len(set(runs))
    # segments describe the runs exactly
    assert [s.label for s in plan.segments] == runs
    assert runs == list(dict.fromkeys(x for x in labels if x is not None))  # in order of first appearance
    assert plan.segments[-1].stop == len(idx) if idx else plan.segments == ()
    # visits: every labelled row once; dropped (unlabelled) rows never
    counts = Counter(idx)
    assert not set(plan.dropped) & set(counts) and max(counts.values(), default=1) == 1
    assert set(counts) | set(plan.dropped) == set(range(len(labels)))
    # deterministic
    assert plan.indices.tolist() == topic_order(labels, seed=seed, unlabelled="drop").indices.tolist()


@settings(max_examples=60, deadline=None)
@given(values=st.lists(st.sampled_from([0.0, 0.25, 0.5, 1.0]), max_size=40), seed=st.integers(0, 10**6))
def test_difficulty_properties(values, seed):
    idx = difficulty_order(values, seed=seed).indices.tolist()
    assert sorted(idx) == list(range(len(values)))
    v = [values[i] for i in idx]
    assert v == sorted(values, reverse=True)  # easy (a high pass rate) -> hard
    # new epoch: same values sequence, ties possibly permuted
    v1 = [values[i] for i in difficulty_order(values, seed=seed, epoch=1).indices]
    assert v1 == v
    assert np.array_equal(difficulty_order(values, seed=seed).indices, np.array(idx, dtype=np.int64))


# ------------------------------------------------------------------------------------------------
# the options: one spec per ordering


def test_options_validate_themselves_with_the_key_in_the_message():
    bad = [
        (dict(seed=-1), r"data\.ordering\.seed must be a non-negative integer, got -1"),
        (dict(seed=True), r"data\.ordering\.seed must be a non-negative integer"),
        (dict(seed=1.5), r"data\.ordering\.seed"),
        (dict(field="extra_info..topic"), r"data\.ordering\.field .*dotted names"),
        (dict(unlabelled="keep"), r"data\.ordering\.unlabelled must be one of \['error', 'drop'\]"),
    ]
    for kwargs, message in bad:
        with pytest.raises(ValueError, match=message):
            TopicOptions(**kwargs)
    with pytest.raises(ValueError, match=r"unknown data\.ordering option\(s\) \['align'\]"):
        difficulty_order([0.1], align="pad")


@pytest.mark.parametrize("cls, key, value", [
    (TopicOptions, "unlabelled", "first"), (TopicOptions, "unlabelled", "last"),
    (DifficultyOptions, "unlabelled", "last"),
])
def test_dropped_option_values_are_refused_naming_the_key_and_the_allowed_values(cls, key, value):
    """Values nobody documented a use for are gone: refused in one line, never silently accepted."""
    with pytest.raises(ValueError, match=rf"^data\.ordering\.{key} must be one of \[") as info:
        cls.from_mapping({key: value})
    assert "\n" not in str(info.value)


@pytest.mark.parametrize("cls, key, value", [
    (TopicOptions, "apply_to", "all"), (DifficultyOptions, "direction", "hard_to_easy"),
    (TopicOptions, "difficulty_field", "extra_info.difficulty"), (TopicOptions, "order", "difficulty"),
    (TopicOptions, "passes", 2), (TopicOptions, "remainder", "drop"), (TopicOptions, "cluster_order", "name"),
    (TopicOptions, "align", "pad"), (TopicOptions, "batch_size", 8), (DifficultyOptions, "higher_is_easier", False),
])
def test_dropped_options_are_unknown_keys_listing_the_known_ones(cls, key, value):
    with pytest.raises(ValueError, match=rf"^unknown data\.ordering option\(s\) \['{key}'\]; known options: \["):
        cls.from_mapping({key: value})


def test_every_entry_point_takes_the_one_spec():
    opts = TopicOptions(seed=4, unlabelled="drop")
    by_spec = topic_order(LABELS, opts).indices.tolist()
    assert by_spec == topic_order(LABELS, **dataclasses.asdict(opts)).indices.tolist()
    assert by_spec == topic_order(LABELS, TopicOptions(), seed=4, unlabelled="drop").indices.tolist()
    assert by_spec == plan_epoch(LABELS, opts).indices.tolist()
    with pytest.raises(ValueError, match=r"unknown data\.ordering option\(s\) \['not_an_option'\]"):
        difficulty_order([0.1], not_an_option=1)


def test_docs_option_tables_name_every_option():
    doc = (Path(__file__).resolve().parents[1] / "docs" / "ordering.md").read_text()
    for cls in (TopicOptions, DifficultyOptions):
        assert all(f"| `{f.name}` |" in doc for f in dataclasses.fields(cls)), cls.__name__


# ------------------------------------------------------------------------------------------------
# one epoch: the last incomplete batch (verl's train loader has drop_last=True)

RATES = [0.9, 0.5, 0.1, 0.7, 0.3, 0.0]  # easy -> hard: rows 0, 3, 1, 4, 2, 5


def test_remainder_pad_completes_the_last_batch_from_the_same_band():
    plan = plan_epoch(RATES, DifficultyOptions(), loader_batch=4)
    # 6 visits = one batch of 4 + 2: the last batch is the 2 hardest rows plus the 2 served just before them
    assert plan.indices.tolist() == [0, 3, 1, 4, 2, 5, 1, 4]
    assert plan.completed == 2 and plan.dropped == ()
    assert [(s.label, s.start, s.stop) for s in plan.segments] == [("scored", 0, 8)]
    assert "2 repeat visits complete the last batch" in plan.summary()
    # a loader that serves its last batch (no loader_batch), or a batch that divides the rows: nothing added
    assert len(plan_epoch(RATES, DifficultyOptions())) == 6
    assert len(plan_epoch(RATES, DifficultyOptions(), loader_batch=3)) == 6


def test_remainder_pad_stays_in_the_last_cluster_and_cycles_a_small_one():
    # clusters b(2) a(3) c(2), batch 4: 7 = 4 + 3; the last batch takes one more row of cluster c
    plan = plan_epoch(LABELS, TopicOptions(), loader_batch=4)
    idx = plan.indices.tolist()
    assert len(idx) == 8 and plan.completed == 1
    assert [LABELS[i] for i in idx] == ["b", "b", "a", "a", "a", "c", "c", "c"]
    assert idx[7] == idx[6]  # all of c is in the incomplete batch: the repeat cycles from its latest visit
    assert [(s.label, s.stop - s.start) for s in plan.segments] == [("b", 2), ("a", 3), ("c", 3)]
    # a whole epoch shorter than a batch: its rows cycle
    tiny = plan_epoch(["x", "y"], TopicOptions(), loader_batch=5)
    assert Counter(tiny.indices.tolist()) == {0: 1, 1: 4} and tiny.completed == 3


labels_or_none = st.lists(st.sampled_from(["a", "b", "c", None]), min_size=1, max_size=30)


@settings(max_examples=80, deadline=None)
@given(labels=labels_or_none, seed=st.integers(0, 1000), batch=st.integers(1, 7))
def test_plan_epoch_serves_every_batch_full_and_never_drops_silently(labels, seed, batch):
    opts = TopicOptions(seed=seed, unlabelled="drop")
    one_pass = topic_order(labels, opts)
    plan = plan_epoch(labels, opts, loader_batch=batch)
    idx = plan.indices.tolist()
    assert len(idx) % batch == 0  # verl's drop_last loader serves every visit
    if not idx:  # every row unlabelled and dropped
        assert len(one_pass) == 0 and plan.dropped == tuple(range(len(labels)))
        return
    served = set(idx)
    assert set(plan.dropped) == set(range(len(labels))) - served  # every row never served is listed
    assert served == set(one_pass.indices.tolist()) and idx[: len(one_pass)] == one_pass.indices.tolist()
    assert plan.completed == len(idx) - len(one_pass) < batch
    last = plan.segments[-1]
    assert {labels[i] for i in idx[last.start :]} == {last.label}  # repeats come from the last cluster
    assert last.stop == len(idx)


# -- one kind of label ----------------------------------------------------


@pytest.mark.parametrize("labels, words", [
    ([1, "1", "a", "a", "1", 1], ["mixes label kinds", "integer (first at row 0)", "text (first at row 1)"]),
    ([1, 1.0, 2, 2.0], ["mixes label kinds", "integer (first at row 0)", "float (first at row 1)"]),
    (["a", True, "b"], ["row 1", "holds bool True", "not a topic label"]),
    ([np.int64(1), np.bool_(True)], ["row 1", "holds bool"]),
    (["a", {"x": 1}], ["row 1", "holds dict", "'extra_info.topic'"]),
    (["a", ["x", "y"]], ["row 1", "holds list"]),
    (["a", np.array(["x"])], ["row 1", "holds ndarray"]),
])
def test_mixed_or_unhashable_labels_are_refused_naming_field_and_row(labels, words):
    with pytest.raises(ValueError) as e:
        topic_order(labels)
    assert all(w in str(e.value) for w in words), str(e.value)


def test_one_kind_of_label_serves_every_row():
    """numpy and Python scalars of one kind are one label; every row is served once."""
    labels = [2, np.int64(1), 1, 2, np.int32(1)]
    plan = topic_order(labels)
    assert sorted(plan.indices.tolist()) == list(range(5)) and plan.dropped == ()
    assert [labels[i] for i in plan.indices] == [2, 2, 1, 1, 1]
    floats = topic_order([0.5, float("nan"), 0.25, 0.5], unlabelled="drop")
    assert sorted([*floats.indices.tolist(), *floats.dropped]) == [0, 1, 2, 3] and floats.dropped == (1,)
