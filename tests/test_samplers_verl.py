"""Topic / difficulty orders through verl 0.9.1's own data path.

Real pieces: the Hydra-composed `ppo_trainer` config with the documented overrides (docs/ordering.md), verl's
`create_rl_dataset` / `create_rl_sampler`, `RLHFDataset` (as the base of our dataset classes), and the V1
trainer's own `_init_dataloader` / `_next_train_batch` (a StatefulDataLoader fed by create_rl_sampler),
with `data.pt` written and read exactly as `_save_checkpoint` / `_load_checkpoint` do.
"""

from __future__ import annotations

import os
import string

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch

from verl_ebpo.samplers.ordering import difficulty_order, topic_order

TOPICS = ["alg"] * 10 + ["geo"] * 8 + ["prob"] * 6  # unbalanced clusters: 10 / 8 / 6 rows
BATCH = 4


def overrides(order, seed=None, **options):
    """The keys docs/ordering.md gives for an order, as Hydra overrides (and verl's data.seed)."""
    return ["data.shuffle=False", "data.custom_cls.path=pkg://verl_ebpo.samplers.dataset",
            f"data.custom_cls.name={order.title()}OrderedDataset", *(f"++data.ordering.{k}={v}" for k, v in options.items()),
            *([] if seed is None else [f"data.seed={seed}"])]


def _rows(n=24, topic_of=None, difficulty_of=None, prompt_of=None):
    rows = []
    for i in range(n):
        extra = {"index": i, "split": "train"}
        t = topic_of(i) if topic_of else TOPICS[(i * 7) % 24]  # interleaved in the file
        if t is not None:
            extra["topic"] = t
        extra["difficulty"] = difficulty_of(i) if difficulty_of else float((i * 5) % 7) / 6.0
        rows.append(
            {
                "data_source": "toy",
                "prompt": [{"role": "user", "content": prompt_of(i) if prompt_of else f"question {i}"}],
                "ability": "math",
                "reward_model": {"style": "rule", "ground_truth": str(i)},
                "extra_info": extra,
            }
        )
    return rows


@pytest.fixture(scope="module")
def tokenizer():
    """A character-level tokenizer with a chat template, built offline."""
    from tokenizers import Regex, Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {"<pad>": 0, "<eos>": 1, "<unk>": 2}
    for c in string.printable:
        vocab.setdefault(c, len(vocab))
    tk = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tk.pre_tokenizer = pre_tokenizers.Split(Regex(r"[\s\S]"), behavior="isolated")
    tok = PreTrainedTokenizerFast(
        tokenizer_object=tk, pad_token="<pad>", eos_token="<eos>", unk_token="<unk>", padding_side="left"
    )
    tok.chat_template = (
        "{% for m in messages %}<{{ m['role'] }}>{{ m['content'] }}{% endfor %}"
        "{% if add_generation_prompt %}<a>{% endif %}"
    )
    return tok


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    d = tmp_path_factory.mktemp("ordering_data")
    train, val = str(d / "train.parquet"), str(d / "val.parquet")
    pq.write_table(pa.Table.from_pylist(_rows()), train)
    val_rows = _rows(5, topic_of=lambda i: None)  # no topic labels: must stay untouched
    for r in val_rows:
        r["extra_info"]["index"] += 100
    pq.write_table(pa.Table.from_pylist(val_rows), val)
    return train, val


@pytest.fixture(scope="module")
def compose_cfg():
    """verl's ppo_trainer.yaml composed by Hydra with the given overrides (as `main_ppo` does)."""
    from hydra import compose, initialize_config_dir

    import verl

    cfgdir = os.path.join(os.path.dirname(verl.__file__), "trainer", "config")

    def make(extra: list[str], train: str, val: str, workers: int = 0):
        with initialize_config_dir(config_dir=cfgdir, version_base=None):
            return compose(
                config_name="ppo_trainer",
                overrides=[
                    f"data.train_files={train}",
                    f"data.val_files={val}",
                    f"data.train_batch_size={BATCH}",
                    f"data.dataloader_num_workers={workers}",
                    "data.filter_overlong_prompts=False",
                    *extra,  # last, so a test can override the lines above
                ],
            )

    return make


def _trainer(cfg, tokenizer):
    """verl's V1 PPOTrainer with only its data path initialised (its real `_init_dataloader`)."""
    from verl.trainer.ppo.v1.trainer_base import PPOTrainer

    cls = type("DataOnlyTrainer", (PPOTrainer,), {m: (lambda self, *a, **k: None) for m in PPOTrainer.__abstractmethods__})
    tr = object.__new__(cls)
    tr.config, tr.tokenizer, tr.processor = cfg, tokenizer, None
    tr.trainer_mode = cfg.trainer.v1.trainer_mode
    tr.parameter_sync_step = 1
    tr.global_steps = 1
    tr._init_dataloader()
    return tr


def _next_indices(tr) -> list[int]:
    batch = tr._next_train_batch()  # the trainer's own fetch (restarts the loader at an epoch's end)
    return [int(x) for x in batch["index"]]


def _file_column(path, key):
    return [r["extra_info"].get(key) for r in pq.read_table(path).to_pylist()]


# ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("workers", [0, 2])
def test_topic_order_stock_data_path_and_resume(compose_cfg, files, tokenizer, workers, tmp_path):
    train, val = files
    ovr = overrides("topic", seed=3)
    cfg = compose_cfg(ovr, train, val, workers)
    tr = _trainer(cfg, tokenizer)

    # the stock sampler is verl's SequentialSampler over our reordered rows
    from torch.utils.data import SequentialSampler

    assert isinstance(tr.train_dataloader.sampler, SequentialSampler)
    # the validation set (no topic labels) is left as verl reads it
    assert tr.val_dataset.ordering_plan is None
    assert [r["index"] for r in tr.val_dataset] == [100, 101, 102, 103, 104]

    # cluster sizes 10/8/6 -> 24 visits, 6 steps
    labels = _file_column(train, "topic")
    expected = topic_order(labels, seed=3).indices.tolist()
    assert len(tr.train_dataset) == 24 and tr.steps_per_epoch == 6
    assert [(s.label, s.stop - s.start) for s in tr.train_dataset.ordering_plan.segments] == [
        ("alg", 10), ("geo", 8), ("prob", 6)]  # in order of first appearance

    seen = [_next_indices(tr) for _ in range(3)]
    torch.save(tr.train_dataloader.state_dict(), tmp_path / "data.pt")  # as _save_checkpoint
    seen += [_next_indices(tr) for _ in range(3 + 6)]  # rest of epoch 1, all of epoch 2

    flat = [i for b in seen for i in b]
    assert flat[:24] == expected and flat[24:] == expected  # same order every epoch
    assert [labels[i] for i in flat[:24]] == ["alg"] * 10 + ["geo"] * 8 + ["prob"] * 6  # clusters one after another
    assert sorted(flat[:24]) == list(range(24))  # every prompt visited once

    # resume: a fresh trainer (fresh dataset, same config) loads data.pt as _load_checkpoint does
    tr2 = _trainer(compose_cfg(ovr, train, val, workers), tokenizer)
    tr2.train_dataloader.load_state_dict(torch.load(tmp_path / "data.pt", weights_only=False))
    resumed = [_next_indices(tr2) for _ in range(3 + 6)]
    assert resumed == seen[3:]  # continues at step 4: nothing repeated, nothing skipped


@pytest.mark.parametrize("workers", [0, 2])
def test_difficulty_order_stock_data_path_and_resume(compose_cfg, files, tokenizer, workers, tmp_path):
    train, val = files
    ovr = [*overrides("difficulty", seed=5), "trainer.total_epochs=1"]
    cfg = compose_cfg(ovr, train, val, workers)
    tr = _trainer(cfg, tokenizer)
    assert tr.total_training_steps == 6  # one epoch of 24 prompts in batches of 4

    pass_rate = _file_column(train, "difficulty")
    got = [_next_indices(tr) for _ in range(2)]
    torch.save(tr.train_dataloader.state_dict(), tmp_path / "data.pt")
    got += [_next_indices(tr) for _ in range(4)]
    flat = [i for b in got for i in b]
    # easy -> hard: pass rate never increases along the stream; every prompt once
    rates = [pass_rate[i] for i in flat]
    assert all(a >= b for a, b in zip(rates, rates[1:]))
    assert sorted(flat) == list(range(24))
    assert flat == difficulty_order(pass_rate, seed=5).indices.tolist()
    assert rates[0] == 1.0 and rates[-1] == 0.0

    tr2 = _trainer(compose_cfg(ovr, train, val, workers), tokenizer)
    tr2.train_dataloader.load_state_dict(torch.load(tmp_path / "data.pt", weights_only=False))
    assert [_next_indices(tr2) for _ in range(4)] == got[2:]


def test_create_rl_dataset_and_sampler_directly(compose_cfg, files, tokenizer):
    """The two verl functions the trainer calls, with the documented overrides."""
    from verl.trainer.ppo.utils import create_rl_dataset, create_rl_sampler

    from verl_ebpo.samplers.dataset import DifficultyOrderedDataset

    train, val = files
    cfg = compose_cfg(overrides("difficulty", seed=1), train, val)
    ds = create_rl_dataset(cfg.data.train_files, cfg.data, tokenizer, None, is_train=True)
    assert isinstance(ds, DifficultyOrderedDataset)
    order = [int(x) for x in create_rl_sampler(cfg.data, ds)]
    assert order == list(range(24))  # sequential over the reordered rows
    rates = [ds[i]["extra_info"]["difficulty"] for i in order]
    assert rates == sorted(rates, reverse=True)  # easy -> hard: pass rate descending
    pass_rate = _file_column(train, "difficulty")
    assert [ds[i]["index"] for i in order] == difficulty_order(pass_rate, seed=1).indices.tolist()


def test_shuffle_true_is_refused(compose_cfg, files, tokenizer):
    from verl.trainer.ppo.utils import create_rl_dataset

    train, val = files
    cfg = compose_cfg([*overrides("topic"), "data.shuffle=True"], train, val)
    with pytest.raises(ValueError, match="data.shuffle=False"):
        create_rl_dataset(cfg.data.train_files, cfg.data, tokenizer, None)


@pytest.mark.parametrize("workers", [0, 2])
def test_resume_over_a_different_order_is_refused(compose_cfg, files, tokenizer, tmp_path, workers):
    train, val = files
    tr = _trainer(compose_cfg(overrides("topic", seed=3), train, val, workers), tokenizer)
    _next_indices(tr)
    torch.save(tr.train_dataloader.state_dict(), tmp_path / "data.pt")
    tr2 = _trainer(compose_cfg(overrides("topic", seed=4), train, val, workers), tokenizer)
    tr2.train_dataloader.load_state_dict(torch.load(tmp_path / "data.pt", weights_only=False))
    with pytest.raises(ValueError, match="different prompt order") as excinfo:  # raised, not hung (workers too)
        _next_indices(tr2)
    _stop_workers_of_failed_iterator(excinfo)


def _stop_workers_of_failed_iterator(excinfo):
    """torchdata's multi-worker iterator failed inside its constructor: its workers live on until garbage
    collection, whose shutdown then waits out timeouts (~10 s, in some later test). Stop them now."""
    import traceback

    for frame, _ in traceback.walk_tb(excinfo.tb):
        for w in getattr(frame.f_locals.get("self"), "_workers", None) or []:
            w.terminate()
            w.join()


def test_unlabelled_rows_and_missing_field(compose_cfg, tmp_path, tokenizer):
    from verl.trainer.ppo.utils import create_rl_dataset

    from verl_ebpo.samplers.fields import FieldNotFoundError
    from verl_ebpo.samplers.ordering import UnlabelledRowsError

    path = str(tmp_path / "t.parquet")
    pq.write_table(pa.Table.from_pylist(_rows(12, topic_of=lambda i: None if i in (2, 7, 9) else "ab"[i % 2])), path)
    cfg = compose_cfg(overrides("topic"), path, path)
    with pytest.raises(UnlabelledRowsError, match=r"3 of 12 rows .*\[2, 7, 9\]"):
        create_rl_dataset(cfg.data.train_files, cfg.data, tokenizer, None)

    cfg = compose_cfg(overrides("topic", unlabelled="drop"), path, path)
    ds = create_rl_dataset(cfg.data.train_files, cfg.data, tokenizer, None)
    idx = [ds[i]["index"] for i in range(len(ds))]
    assert not {2, 7, 9} & set(idx) and len(idx) == 12  # 9 rows, completed to the loader's batch of 4
    assert [ds[i]["extra_info"]["topic"] for i in range(12)] == ["a"] * 5 + ["b"] * 7

    cfg = compose_cfg(overrides("topic", field="extra_info.domain"), path, path)
    with pytest.raises(FieldNotFoundError, match=r"extra_info\.domain.*extra_info\.topic"):
        create_rl_dataset(cfg.data.train_files, cfg.data, tokenizer, None)


def test_order_is_applied_after_verl_filters_long_prompts(compose_cfg, tmp_path, tokenizer):
    from verl.trainer.ppo.utils import create_rl_dataset

    path = str(tmp_path / "long.parquet")
    rows = _rows(9, topic_of=lambda i: "xyz"[i % 3], prompt_of=lambda i: "q" * (200 if i == 4 else 3))
    pq.write_table(pa.Table.from_pylist(rows), path)
    cfg = compose_cfg(
        [*overrides("topic"), "data.filter_overlong_prompts=True",
         "data.max_prompt_length=40", "data.filter_overlong_prompts_workers=1"],
        path,
        path,
    )
    ds = create_rl_dataset(cfg.data.train_files, cfg.data, tokenizer, None)
    assert len(ds) == 8  # row 4 (a 200-character prompt) filtered by verl before ordering
    topics = [ds[i]["extra_info"]["topic"] for i in range(8)]
    assert topics == ["x", "x", "x", "y", "y", "z", "z", "z"]
    assert 4 not in [ds[i]["index"] for i in range(8)]


# ------------------------------------------------------------------------------------------------
# the last incomplete batch: verl's train loader has drop_last=True


def _write(path, rows):
    pq.write_table(pa.Table.from_pylist(rows), str(path))
    return str(path)


def _served_epoch(tr) -> list[int]:
    return [i for _ in range(tr.steps_per_epoch) for i in _next_indices(tr)]


@pytest.mark.parametrize("order", ["topic", "difficulty"])
def test_every_row_is_served_in_an_epoch_by_verls_loader(compose_cfg, files, tokenizer, tmp_path, order, capsys):
    # 26 rows in batches of 4: verl's loader (drop_last=True) serves 24 visits of a 26-row order per epoch
    train = _write(tmp_path / "t.parquet", _rows(26, topic_of=lambda i: "xyz"[i % 3]))
    tr = _trainer(compose_cfg(overrides(order, seed=2), train, files[1]), tokenizer)
    assert "2 repeat visits complete the last batch" in capsys.readouterr().out
    assert len(tr.train_dataset) == 28 and tr.steps_per_epoch == 7
    epoch = _served_epoch(tr)
    assert sorted(set(epoch)) == list(range(26)) and len(epoch) == 28  # every row, 2 of them twice
    pass_rate = _file_column(train, "difficulty")
    if order == "difficulty":
        plain = difficulty_order(pass_rate, seed=2).indices.tolist()
        assert epoch[:26] == plain  # the order itself is unchanged...
        last = epoch[24:]  # ...and the last batch is the 4 hardest prompts: the 2 the plain loader drops + 2
        assert sorted(pass_rate[i] for i in last) == sorted(pass_rate[i] for i in plain[22:])
    else:
        labels = _file_column(train, "topic")
        assert {labels[i] for i in epoch[24:]} == {labels[epoch[25]]}  # the repeats are from the last cluster
    assert _served_epoch(tr) == epoch  # the next epoch: the same order, again complete


def test_the_last_batch_is_completed_to_the_loaders_batch_and_validation_is_whole(compose_cfg, tokenizer, tmp_path):
    train = _write(tmp_path / "t.parquet", _rows(26, topic_of=lambda i: "xy"[i % 2]))
    val = _write(tmp_path / "v.parquet", _rows(5, topic_of=lambda i: "xy"[i % 2]))
    ovr = [*overrides("topic"), "data.gen_batch_size=8"]
    tr = _trainer(compose_cfg(ovr, train, val), tokenizer)
    assert [s.stop - s.start for s in tr.train_dataset.ordering_plan.segments] == [13, 19]  # the last one completed
    assert len(tr.train_dataset) == 32  # completed to the loader's batch (gen_batch_size=8), not train_batch_size
    assert tr.val_dataset.ordering_plan is None and len(tr.val_dataset) == 5  # validation: verl's own, whole
    assert sorted({i for b in tr.train_dataloader for i in (int(x) for x in b["index"])}) == list(range(26))


def test_validation_is_never_reordered_even_from_the_train_files(compose_cfg, tokenizer, tmp_path):
    """data.val_files = data.train_files (10 rows, batches of 4): the train set is ordered and completed to 12, the
    validation set is verl's own (10 rows in file order), told apart by `create_rl_dataset`'s `is_train`."""
    import inspect

    from verl.trainer.ppo.utils import create_rl_dataset

    assert "is_train" in inspect.signature(create_rl_dataset).parameters  # the canary of what the datasets read
    train = _write(tmp_path / "t.parquet", _rows(10, topic_of=lambda i: "xy"[i % 2]))
    for order in ("topic", "difficulty"):
        tr = _trainer(compose_cfg(overrides(order), train, train), tokenizer)
        assert len(tr.train_dataset) == 12 and tr.train_dataset.ordering_plan is not None
        assert tr.val_dataset.ordering_plan is None and len(tr.val_dataset) == 10
        assert [int(tr.val_dataset[i]["index"]) for i in range(10)] == list(range(10))
        assert len(create_rl_dataset(train, tr.config.data, tokenizer, None, is_train=False)) == 10


# ------------------------------------------------------------------------------------------------
# data.pt: the rows' content


@pytest.mark.parametrize("edit", ["prompt", "ground_truth", "topic_names"])
def test_resume_over_edited_rows_is_refused(compose_cfg, files, tokenizer, tmp_path, edit):
    rows = _rows()
    train = _write(tmp_path / "train.parquet", rows)
    ovr = overrides("topic", seed=3)
    tr = _trainer(compose_cfg(ovr, train, files[1]), tokenizer)
    _next_indices(tr)
    torch.save(tr.train_dataloader.state_dict(), tmp_path / "data.pt")

    _write(train, rows)  # the same content rewritten: resumes
    same = _trainer(compose_cfg(ovr, train, files[1]), tokenizer)
    same.train_dataloader.load_state_dict(torch.load(tmp_path / "data.pt", weights_only=False))
    _next_indices(same)

    if edit == "prompt":
        rows[5]["prompt"][0]["content"] += "?"
    elif edit == "ground_truth":
        rows[5]["reward_model"]["ground_truth"] = "five"
    else:  # a cluster renamed: the same order, different ordering field
        for r in rows:
            r["extra_info"]["topic"] = r["extra_info"]["topic"].replace("prob", "probability")
    _write(train, rows)
    tr2 = _trainer(compose_cfg(ovr, train, files[1]), tokenizer)
    assert tr2.train_dataset.ordering_plan.fingerprint() == tr.train_dataset.ordering_plan.fingerprint()
    tr2.train_dataloader.load_state_dict(torch.load(tmp_path / "data.pt", weights_only=False))
    with pytest.raises(ValueError, match=r"the train rows changed since the checkpoint .*prompt, "
                                         r"reward_model.ground_truth and extra_info.topic"):
        _next_indices(tr2)


# ------------------------------------------------------------------------------------------------
# the one private verl touch


def test_verl_read_hook_canary():
    """verl_ebpo.samplers.dataset reorders inside RLHFDataset.<VERL_READ_HOOK>(), a private verl method."""
    import inspect

    from verl.utils.dataset.rl_dataset import RLHFDataset

    from verl_ebpo.samplers.dataset import VERL_READ_HOOK, OrderedRLHFDataset

    where = "update VERL_READ_HOOK and the override in verl_ebpo/samplers/dataset.py"
    assert callable(getattr(RLHFDataset, VERL_READ_HOOK, None)), f"verl renamed RLHFDataset.{VERL_READ_HOOK}: {where}"
    assert f"self.{VERL_READ_HOOK}()" in inspect.getsource(RLHFDataset.__init__), (
        f"RLHFDataset.__init__ no longer calls self.{VERL_READ_HOOK}(): {where}"
    )
    assert VERL_READ_HOOK in OrderedRLHFDataset.__dict__, f"OrderedRLHFDataset must override {VERL_READ_HOOK}"


def test_bench_ordering_runs(capsys):
    import runpy
    import sys

    argv, sys.argv = sys.argv, ["benchmarks/bench_ordering.py", "--rows", "300", "--batch", "7", "--repeats", "1"]
    try:
        with pytest.raises(SystemExit) as exit_info:
            runpy.run_path("benchmarks/bench_ordering.py", run_name="__main__")
    finally:
        sys.argv = argv
    assert exit_info.value.code == 0
    out = capsys.readouterr().out
    assert "pure orderings over 300 rows" in out and "TopicOrderedDataset:" in out and "reordered" in out


# -- an empty train set, struct-valued topics: one line naming file/field/row ----------------------


def test_an_empty_train_set_after_verls_filter_is_refused_naming_the_file(compose_cfg, tmp_path, tokenizer):
    from verl.trainer.ppo.utils import create_rl_dataset

    path = str(tmp_path / "all_long.parquet")
    pq.write_table(pa.Table.from_pylist(_rows(6, prompt_of=lambda i: "q" * 200)), path)
    cfg = compose_cfg([*overrides("topic"), "data.filter_overlong_prompts=True", "data.max_prompt_length=40",
                       "data.filter_overlong_prompts_workers=1"], path, path)
    with pytest.raises(ValueError, match=f"no row of {path} is left after verl's filters"):
        create_rl_dataset(cfg.data.train_files, cfg.data, tokenizer, None)


def test_a_struct_valued_topic_names_field_and_row(compose_cfg, tmp_path, tokenizer):
    from verl.trainer.ppo.utils import create_rl_dataset

    path = str(tmp_path / "struct.parquet")
    pq.write_table(pa.Table.from_pylist(_rows(4, topic_of=lambda i: {"name": "alg", "id": i})), path)
    cfg = compose_cfg(overrides("topic"), path, path)
    with pytest.raises(ValueError, match=r"^row 0: 'extra_info.topic' holds dict .*not a topic label"):
        create_rl_dataset(cfg.data.train_files, cfg.data, tokenizer, None)
