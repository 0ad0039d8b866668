"""`verl-ebpo preflight` on wrong input: one line naming the key,
column, option or file, never Python's own message; and what a first run must be told (the EBPO checkpoint
callback, a local model path that does not exist, the rollout engine, a reward without a scorer for the data
source, every FAIL in the closing line)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
import preflight_standins as standins  # noqa: E402
from test_preflight import _one_line_refusal, _rows, _run, not_detected, readme_run  # noqa: E402,F401

FREE = ["--free-disk-gb", "1000"]


def _replace(args, key, value):
    """args with `key=...` replaced by `key=value` (appended when absent; value None drops it)."""
    out = [a for a in args if not a.startswith(key + "=")]
    return out if value is None else out + [f"{key}={value}"]


def test_an_unknown_torch_dtype_is_a_warning_not_a_crash(readme_run, capsys, tmp_path):
    # main: exit 2 with "'NoneType' object has no attribute 'get'" (the checkpoint check read the missing config)
    _, args = readme_run
    model = standins.model_dir(tmp_path, "qwen3_8b")
    (model / "config.json").write_text((model / "config.json").read_text().replace('"bfloat16"', '"int8"'))
    rc, out, err = _run(capsys, [*FREE, *_replace(args, "actor_rollout_ref.model.path", model)])
    assert rc == 0, err
    rows = _rows(out)
    assert re.search(r"model\s+warn\s+.*unknown dtype 'int8'.*not estimated", rows["model"])
    assert "warn" in rows["checkpoints"] and "size not estimated" in rows["checkpoints"]
    assert "warn" in rows["memory"] and "not estimated" in rows["memory"]
    assert "ok: every check passed" not in out  # never a plain ok over what was not estimated


@pytest.mark.parametrize("key, value, shown", [
    ("trainer.save_freq", "null", "trainer.save_freq=None: must be an integer"),
    ("trainer.max_actor_ckpt_to_keep", "two", "trainer.max_actor_ckpt_to_keep='two': must be an integer or null"),
    ("trainer.total_training_steps", "ten", "trainer.total_training_steps='ten': must be an integer >= 1 or null"),
    ("trainer.nnodes", "four", "trainer.nnodes='four': must be an integer >= 1"),
    ("trainer.n_gpus_per_node", "0", "trainer.n_gpus_per_node=0: must be an integer >= 1"),
    ("data.train_batch_size", "1.5", "data.train_batch_size=1.5: must be an integer >= 1"),
    ("actor_rollout_ref.rollout.gpu_memory_utilization", "high",
     "actor_rollout_ref.rollout.gpu_memory_utilization='high': must be a number in (0, 1]"),
    ("actor_rollout_ref.rollout.gpu_memory_utilization", "1.5", "must be a number in (0, 1]"),
    ("actor_rollout_ref.actor.ppo_max_token_len_per_gpu", "true", "must be an integer >= 1 or null"),
    ("data.max_response_length", "long", "data.max_response_length='long': must be an integer >= 1"),
])
def test_a_number_of_the_wrong_type_names_its_key(readme_run, capsys, key, value, shown):
    _, args = readme_run
    rc, _, err = _run(capsys, [*FREE, *_replace(args, key, value)])
    _one_line_refusal(rc, err, shown)
    assert "Traceback" not in err and "int()" not in err and "not supported" not in err


@pytest.mark.parametrize("prompt, shown", [("plain", "holds str"), (7, "holds int")])
def test_a_prompt_column_of_the_wrong_type_names_column_and_file(readme_run, capsys, prompt, shown):
    # main: without a tokenizer it passed silently (verl fails later)
    shared, args = readme_run
    path = shared / "data" / "verl_ebpo" / "dapo_math_17k.parquet"
    import pyarrow as pa
    import pyarrow.parquet as pq

    rows = standins.rows(600)
    for i, row in enumerate(rows):
        row["prompt"] = f"What is {i}?" if prompt == "plain" else i
    pq.write_table(pa.Table.from_pylist(rows), path)
    rc, _, err = _run(capsys, [*FREE, *args])
    _one_line_refusal(rc, err, "data.train_files", path.name, "column 'prompt'", shown, "not chat messages")


@pytest.mark.parametrize("override, shown", [
    ("+algorithm.ebpo.prior_scop=running", "prior_scop"),
    ("+algorithm.ebpo.prior_decay=2", "prior_decay"),
])
def test_ebpo_options_are_checked_by_the_plugins_own_spec(readme_run, capsys, override, shown):
    from verl_ebpo.advantage.options import EBPOOptions

    with pytest.raises(ValueError) as spec:  # the estimator's own refusal, word for word in the preflight's line
        import yaml

        EBPOOptions.from_algorithm_config({"ebpo": {override.split(".")[-1].split("=")[0]: yaml.safe_load(override.split("=")[1])}})
    _, args = readme_run
    rc, _, err = _run(capsys, [*FREE, *args, override])
    _one_line_refusal(rc, err, "ebpo options:", shown, " ".join(str(spec.value).split()))


@pytest.mark.parametrize("source, cause", [
    ("import os\nraise RuntimeError('no GPU here')\n", "RuntimeError: no GPU here"),
    ("def compute_score(data_source, solution_str, ground_truth, extra_info=None):\n    return (\n", "SyntaxError"),
])
def test_a_reward_file_that_does_not_load_shows_cause_and_line(readme_run, capsys, tmp_path, source, cause):
    _, args = readme_run
    boom = tmp_path / "boom.py"
    boom.write_text(source)
    rc, _, err = _run(capsys, [*FREE, *_replace(args, "reward.custom_reward_function.path", boom)])
    _one_line_refusal(rc, err, "does not load", f": {cause}", str(boom), "line 2")


@pytest.mark.parametrize("value", ["-0.5", "-1e-9", "-1", "2e9", "nan"])
def test_free_disk_gb_range_is_the_documented_one(value):
    out = subprocess.run([sys.executable, "-m", "verl_ebpo.tools.preflight", f"--free-disk-gb={value}"],
                         capture_output=True, text=True, timeout=600)
    assert out.returncode == 2 and "--free-disk-gb must be in [0, 1e9]" in out.stderr, out.stderr
    docs = (Path(__file__).resolve().parents[1] / "docs" / "preflight.md").read_text()
    assert "| `--free-disk-gb` | [0, 1e9]" in docs


def test_zero_free_disk_is_accepted_and_refuses_the_plan(readme_run, capsys):
    _, args = readme_run
    rc, _, err = _run(capsys, ["--free-disk-gb", "0", *args])
    _one_line_refusal(rc, err, "checkpoints:", "free 0.0 GB", "does not fit")


def test_ebpo_without_the_checkpoint_callback_is_a_warning_naming_the_key(readme_run, capsys):
    _, args = readme_run
    rc, out, err = _run(capsys, [*FREE, *_replace(args, "trainer.checkpoint_callback_class", None)])
    assert rc == 0, err
    assert re.search(r"ebpo checkpoint\s+warn\s+.*trainer.checkpoint_callback_class=verl_ebpo.EBPOCheckpointCallback",
                     _rows(out)["ebpo checkpoint"])
    assert "1 warning" not in out.splitlines()[-1] or "ebpo checkpoint" in out.splitlines()[-1]


def test_a_local_model_path_that_does_not_exist_is_a_fail(readme_run, capsys, tmp_path):
    _, args = readme_run
    rc, _, err = _run(capsys, [*FREE, *_replace(args, "actor_rollout_ref.model.path", tmp_path / "nowhere" / "Qwen3-8B")])
    _one_line_refusal(rc, err, "model:", "nowhere/Qwen3-8B does not exist")


def test_the_rollout_engine_is_always_named(readme_run, capsys):
    _, args = readme_run
    rc, out, err = _run(capsys, [*FREE, *_replace(args, "actor_rollout_ref.rollout.name", None)])
    _one_line_refusal(rc, err, "backend:", "actor_rollout_ref.rollout.name")
    assert "None" not in err


def test_a_reward_without_a_scorer_for_the_data_source_names_the_fix(readme_run, capsys):
    _, args = readme_run
    args = _replace(_replace(args, "reward.custom_reward_function.path", None), "reward.custom_reward_function.name",
                    None)
    shared = readme_run[0]
    import pyarrow as pa
    import pyarrow.parquet as pq

    rows = standins.rows(600)
    for row in rows:
        row["data_source"] = "my_math"
    pq.write_table(pa.Table.from_pylist(rows), shared / "data" / "verl_ebpo" / "dapo_math_17k.parquet")
    rc, _, err = _run(capsys, [*FREE, *args])
    _one_line_refusal(rc, err, "reward:", "'my_math'", "reward.custom_reward_function.path=pkg://verl_ebpo.rewards",
                      "reward.custom_reward_function.name=compute_score")


def test_the_closing_line_lists_every_fail(readme_run, capsys, tmp_path):
    shared, args = readme_run
    (shared / "data" / "verl_ebpo" / "math500.parquet").unlink()
    args = _replace(args, "actor_rollout_ref.model.path", tmp_path / "missing-model")
    rc, _, err = _run(capsys, ["--free-disk-gb", "0", *args])
    _one_line_refusal(rc, err, "FAIL: ", "data: val:", "math500.parquet", "model:", "missing-model does not exist")
    assert re.match(r"verl-ebpo preflight: (\d+) FAIL: ", err) and " | " in err


# ---- issue 48 / 50: a file the run reads and cannot, the plan over train_max_samples, the fixes named ---------------


@pytest.mark.parametrize("text, shown", [("{not json", "not readable JSON"), ("[1, 2]", "not a JSON object"),
                                         (None, "a folder without config.json")])
def test_a_local_config_json_the_run_cannot_read_is_a_fail(readme_run, capsys, tmp_path, text, shown):
    _, args = readme_run
    model = tmp_path / "my-model"
    model.mkdir()
    if text is not None:
        (model / "config.json").write_text(text)
    rc, _, err = _run(capsys, [*FREE, *_replace(args, "actor_rollout_ref.model.path", model)])
    _one_line_refusal(rc, err, "model:", shown, "valid config.json")


def test_the_plan_honours_train_max_samples(readme_run, capsys):
    """2,048 rows in topic order, batch 512, data.train_max_samples=600: verl keeps the first 600 rows (data.shuffle
    is off) and the ordered dataset pads them to whole batches; the steps and rows served are the package's own
    build_plan over those 600 rows."""
    import pyarrow.parquet as pq

    from verl_ebpo.samplers.dataset import build_plan, options_from_data_config
    from verl_ebpo.tools.preflight.checks import compose

    shared, args = readme_run
    path = standins.write(shared / "data" / "verl_ebpo" / "dapo_math_17k.parquet", 2048)
    opts = options_from_data_config(compose([a for a in args if "=" in a and not a.startswith("-")]).data, "topic")
    served = len(build_plan(pq.read_table(path).slice(0, 600), opts, loader_batch=512))
    assert served == 1024
    rc, out, err = _run(capsys, [*FREE, *args, "data.train_max_samples=600"])
    assert rc == 0, err
    row = _rows(out)["data: train"]
    assert "600 of 2,048 rows (data.train_max_samples), 1,024 served in topic order: 2 steps an epoch of 512" in row
    assert "2,048 rows served" not in out and "4 steps" not in row


@pytest.mark.parametrize("drop", ["extra_info", "topic"])
def test_missing_topic_labels_name_the_labelling_commands(readme_run, capsys, drop):
    shared, args = readme_run
    path = shared / "data" / "verl_ebpo" / "dapo_math_17k.parquet"
    if drop == "extra_info":
        standins.write(path, 1024, drop="extra_info")
    else:  # the column is there, some rows have no topic
        import pyarrow as pa
        import pyarrow.parquet as pq

        rows = standins.rows(1024)
        for row in rows[:10]:
            row["extra_info"]["topic"] = None
        pq.write_table(pa.Table.from_pylist(rows), path)
    rc, _, err = _run(capsys, [*FREE, *args])
    _one_line_refusal(rc, err, "data: train", "verl-ebpo label-topics", "recipes/data/label_data.sh topics")


def test_exit_codes_follow_the_cli_convention(readme_run, capsys, no_ray_answer):
    """0: no FAIL (warnings named in the closing line); 2: a FAIL, or a config Hydra or verl refuses, one line."""
    _, args = readme_run
    rc, out, err = _run(capsys, [*FREE, *_replace(args, "trainer.checkpoint_callback_class", None)])
    assert rc == 0 and err == "" and out.splitlines()[-1].startswith(
        "verl-ebpo preflight: no FAIL; 2 warning(s); read: cluster, ebpo checkpoint")
    rc, _, err = _run(capsys, [*FREE, *args, "trainer.no_such_key=1"])
    _one_line_refusal(rc, err, "trainer.no_such_key")
    rc, _, err = _run(capsys, [*FREE, *args, "actor_rollout_ref.actor.ppo_mini_batch_size=1024"])  # verl's refusal
    _one_line_refusal(rc, err)
    rc, _, err = _run(capsys, [*FREE, "--ray-address", "http://127.0.0.1:1", *args])
    _one_line_refusal(rc, err, "cluster:", "no Ray cluster answers at http://127.0.0.1:1", "ray start --head",
                      "LAUNCH=local")


@pytest.fixture()
def no_ray_answer(monkeypatch):
    """The real cluster detection with no GPU here and a Ray address that never answers."""
    from verl_ebpo.tools.preflight import checks, cluster

    monkeypatch.setattr(cluster, "_nvidia_smi", lambda: None)
    monkeypatch.setattr(cluster, "_ray_nodes", lambda address, timeout: None)
    monkeypatch.setattr(checks, "detect_cluster", cluster.detect)
