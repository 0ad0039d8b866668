"""TopicSampler / DifficultySampler with torchdata's StatefulDataLoader: epochs and exact resume."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torchdata.stateful_dataloader import StatefulDataLoader

from verl_ebpo.samplers import DifficultySampler, TopicSampler, topic_order

LABELS = ["a", "b", "c", "a", "b", "a", "c", "a", "b", "a", "c", "b", "a"]  # a=6 b=4 c=3
N = len(LABELS)


class Rows(torch.utils.data.Dataset):
    def __len__(self):
        return N

    def __getitem__(self, i):
        return i


def _loader(sampler, workers=0, batch=2):
    return StatefulDataLoader(Rows(), batch_size=batch, sampler=sampler, num_workers=workers, drop_last=True,
                              collate_fn=list)


def _take(loader, steps):
    """`steps` batches, restarting the loader at the end of an epoch like verl's trainer does."""
    out, it = [], getattr(loader, "_test_it", None)
    for _ in range(steps):
        if it is None:
            it = iter(loader)
        try:
            out.append(next(it))
        except StopIteration:
            it = iter(loader)
            out.append(next(it))
    loader._test_it = it
    return out


def test_topic_sampler_epochs_reshuffle_inside_clusters_only():
    s = TopicSampler(LABELS, seed=3)
    e0, e1 = list(s), list(s)
    assert s.epoch == 2
    assert e0 == topic_order(LABELS, seed=3, epoch=0).indices.tolist()
    assert e1 == topic_order(LABELS, seed=3, epoch=1).indices.tolist()
    assert e0 != e1 and [LABELS[i] for i in e0] == [LABELS[i] for i in e1]
    fixed = TopicSampler(LABELS, seed=3, reshuffle_each_epoch=False)
    assert list(fixed) == list(fixed) == e0
    s.set_epoch(0)
    assert list(s) == e0
    assert len(s) == N


def test_difficulty_sampler_fixed_across_epochs_by_default():
    rates = [0.5, 0.5, 0.5, 1.0, 0.0, 0.5]
    s = DifficultySampler(rates, seed=2)
    first = list(s)
    assert list(s) == first and rates[first[0]] == 1.0 and rates[first[-1]] == 0.0
    r = DifficultySampler(rates, seed=2, reshuffle_each_epoch=True)
    epochs = [list(r) for _ in range(6)]
    assert len({tuple(e) for e in epochs}) > 1  # ties re-broken


@pytest.mark.parametrize("workers", [0, 2])
def test_resume_mid_epoch_and_across_epochs(workers):
    batch = 2  # 13 rows -> 6 batches per epoch (drop_last), 1 row left over each epoch
    ref_loader = _loader(TopicSampler(LABELS, seed=1), workers, batch)
    reference = _take(ref_loader, 15)  # 2.5 epochs
    for cut in ([4, 9] if workers else [0, 1, 5, 6, 7, 12]):
        loader = _loader(TopicSampler(LABELS, seed=1), workers, batch)
        head = _take(loader, cut)
        state = loader.state_dict()
        fresh = _loader(TopicSampler(LABELS, seed=1), workers, batch)
        fresh.load_state_dict(state)
        tail = _take(fresh, 15 - cut)
        assert head + tail == reference, f"cut at {cut}"
    flat0 = [i for b in reference[:6] for i in b]
    assert flat0 == topic_order(LABELS, seed=1, epoch=0).indices.tolist()[:12]
    flat1 = [i for b in reference[6:12] for i in b]
    assert flat1 == topic_order(LABELS, seed=1, epoch=1).indices.tolist()[:12]


@settings(max_examples=25, deadline=None)
@given(cut=st.integers(0, 20), seed=st.integers(0, 1000), batch=st.integers(1, 4))
def test_resume_anywhere_property(cut, seed, batch):
    reference = _take(_loader(TopicSampler(LABELS, seed=seed), 0, batch), 21)
    loader = _loader(TopicSampler(LABELS, seed=seed), 0, batch)
    head = _take(loader, cut)
    fresh = _loader(TopicSampler(LABELS, seed=seed), 0, batch)
    fresh.load_state_dict(loader.state_dict())
    assert head + _take(fresh, 21 - cut) == reference


def test_state_dict_round_trip_and_refusals():
    s = TopicSampler(LABELS, seed=0)
    it = iter(s)
    got = [next(it) for _ in range(5)]
    sd = s.state_dict()
    assert sd["epoch"] == 0 and sd["yielded"] == 5 and sd["schema"] == "verl_ebpo.ordered_sampler"
    t = TopicSampler(LABELS, seed=0)
    t.load_state_dict(sd)
    assert got + list(t) == topic_order(LABELS, seed=0).indices.tolist()
    other = TopicSampler(LABELS, seed=1)
    with pytest.raises(ValueError, match="different prompt order"):
        other.load_state_dict(sd)
    with pytest.raises(ValueError, match="newer"):
        t.load_state_dict({**sd, "version": 99})
    with pytest.raises(ValueError, match="outside"):
        TopicSampler(LABELS, seed=0).load_state_dict({**sd, "yielded": 99})


def test_from_dataset_reads_nested_fields():
    rows = [{"extra_info": {"topic": lab, "difficulty": i / N}} for i, lab in enumerate(LABELS)]
    s = TopicSampler.from_dataset(rows, align="pad", batch_size=3)
    assert len(s) == 6 + 6 + 3
    d = DifficultySampler.from_dataset(rows)
    assert list(d) == list(range(N - 1, -1, -1))


@pytest.mark.parametrize("cls,arg", [(TopicSampler, LABELS), (DifficultySampler, [i / N for i in range(N)])])
def test_set_epoch_after_load_state_dict_keeps_the_restored_position(cls, arg):
    """Hand-written loops call set_epoch(e) at the top of every epoch, also right after restoring."""
    s = cls(arg, seed=1)
    it = iter(s)
    served = [next(it) for _ in range(5)]
    state = s.state_dict()
    resumed = cls(arg, seed=1)
    resumed.load_state_dict(state)
    resumed.set_epoch(state["epoch"])
    rest = list(resumed)
    assert served + rest == list(cls(arg, seed=1))  # nothing repeated, nothing skipped
    resumed.set_epoch(resumed.epoch)  # no restored position pending: an ordinary restart of that epoch
    assert len(list(resumed)) == N


@pytest.mark.parametrize("cls,arg", [(TopicSampler, LABELS), (DifficultySampler, [i / N for i in range(N)])])
def test_drop_last_loader_serves_every_row_each_epoch_and_resumes(cls, arg):
    """13 rows, batches of 3, a drop_last loader: the sampler completes the last batch (remainder=pad)."""
    sampler = lambda: cls(arg, seed=1, loader_batch_size=3, reshuffle_each_epoch=True)  # noqa: E731
    reference = _take(_loader(sampler(), 0, 3), 10)  # 5 batches per epoch
    for epoch in (reference[:5], reference[5:]):
        flat = [i for b in epoch for i in b]
        assert len(flat) == 15 and set(flat) == set(range(N))
    assert len(cls(arg, seed=1)) == N  # no loader_batch_size: nothing added
    loader = _loader(sampler(), 0, 3)
    head = _take(loader, 4)
    fresh = _loader(sampler(), 0, 3)
    fresh.load_state_dict(loader.state_dict())
    assert head + _take(fresh, 6) == reference
    with pytest.raises(ValueError, match=r"batch size must be an integer in \[1, 1048576\]"):
        cls(arg, loader_batch_size=0)
