"""`verl-ebpo simulate`: verl's own advantages, DAPO's counting, the model's math, determinism, the batched lr rows,
the CLI."""

import argparse
import dataclasses
import json
import os

import numpy as np
import pytest
import torch

from verl_ebpo.tools import cli, simulate
from verl_ebpo.advantage.prior import get_prior, reset_prior
from verl_ebpo.tools.simulate import engine, lr, task as simtask
from verl_ebpo.tools.simulate.estimators import AdvantageCaller, parse_estimator
from verl_ebpo.tools.simulate.options import SimOptions

TINY = dict(G=(2, 4), seeds=3, prompts=24, steps=4, answers_per_step=16, features=4, lr_grid=(0.1,))
BETA = (0.5, 1.5)  # p0 ~ Beta(A, B) of the tests' tasks


def verl_fn(name):
    import verl  # noqa: F401

    from verl.trainer.ppo.core_algos import get_adv_estimator_fn

    return get_adv_estimator_fn(name)


def batch(n_seeds=3, groups=5, G=4, p=0.4, seed=0):
    """(n_groups, G) 0/1 scores, the seed slot of each group (sorted), with some all-0 and all-1 groups."""
    rng = np.random.default_rng(seed)
    scores = (rng.random((n_seeds * groups, G)) < p).astype(np.float64)
    scores[0] = 0.0
    scores[groups] = 1.0
    return torch.from_numpy(scores), torch.arange(n_seeds).repeat_interleave(groups)


def direct(name, scores, G, **kwargs):
    """verl's function on the rows of `scores`, called as verl's trainer calls it (string uids)."""
    rewards = scores.reshape(-1, 1).clone()
    uid = np.array([f"u{i}" for i in range(scores.shape[0]) for _ in range(G)], dtype=object)
    adv, _ = verl_fn(name)(token_level_rewards=rewards, response_mask=torch.ones_like(rewards), index=uid, **kwargs)
    return adv[:, 0]


@pytest.mark.parametrize(
    "label, reference, kwargs",
    [
        ("grpo", "grpo", {"norm_adv_by_std_in_grpo": True}),
        ("drgrpo", "grpo", {"norm_adv_by_std_in_grpo": False}),
        ("dapo", "grpo", {"norm_adv_by_std_in_grpo": True}),
        ("rloo", "rloo", {}),
    ],
)
def test_batch_local_advantages_equal_verls_reference_function_seed_by_seed(label, reference, kwargs):
    scores, group_seed = batch()
    got = AdvantageCaller(parse_estimator(label), 3)(scores, group_seed, 4)
    want = torch.cat([direct(reference, scores[group_seed == s], 4, **kwargs) for s in range(3)])
    torch.testing.assert_close(got, want.to(torch.float64), rtol=0, atol=1e-6)


def test_rfpp_baseline_is_verls_function_per_seed():
    """`rfpp_baseline` (all seeds in one vectorised pass) equals verl's registered function called on each seed's
    rows."""
    scores, group_seed = batch()
    got = AdvantageCaller(parse_estimator("rfpp_baseline"), 3)(scores, group_seed, 4)
    want = torch.cat([direct("reinforce_plus_plus_baseline", scores[group_seed == s], 4) for s in range(3)])
    torch.testing.assert_close(got, want.to(torch.float64), rtol=0, atol=1e-12)
    # batch-wide whitening: one call over all seeds would differ
    assert not torch.allclose(got, direct("reinforce_plus_plus_baseline", scores, 4).to(torch.float64))


@pytest.mark.parametrize("label", ["ebpo", "ebpo_batch", "ebpo:prior_decay=0.5,normalize=none"])
def test_ebpo_advantages_equal_verls_registered_ebpo_with_one_prior_per_seed(label):
    spec = parse_estimator(label)
    steps = [batch(seed=k) for k in range(3)]
    caller = AdvantageCaller(spec, 3)
    got = [caller(scores, gs, 4) for scores, gs in steps]
    for s in range(3):  # each seed alone, from a fresh process-wide prior, over the same steps
        reset_prior()
        for k, (scores, gs) in enumerate(steps):
            want = direct("ebpo", scores[gs == s], 4, config=spec.algorithm_config())
            torch.testing.assert_close(got[k][gs.repeat_interleave(4) == s], want, rtol=0, atol=1e-12)
    reset_prior()


def test_dapo_select_keeps_the_first_b_informative_groups_and_counts_batches():
    # seed 0: batches of B=2 groups, G=2: [00, 01] [11, 00] [10, 01] -> informative at 1, 4, 5
    # seed 1: may generate one batch only: [01, 11] -> one informative group, short
    y = torch.tensor(
        [
            [[0, 0], [0, 1], [1, 1], [0, 0], [1, 0], [0, 1]],
            [[0, 1], [1, 1], [9, 9], [9, 9], [9, 9], [9, 9]],
        ],
        dtype=torch.float64,
    )
    y[1, 2:] = torch.tensor([0.0, 1.0])  # informative-looking, but never drawn
    rounds = np.array([3, 1])
    drawn = torch.arange(6)[None, :] < torch.from_numpy(rounds * 2)[:, None]
    keep, used, full = engine.dapo_select(y, drawn, rounds, 2)
    assert keep.tolist() == [[False, True, False, False, True, False], [True, False, False, False, False, False]]
    assert used.tolist() == [3, 1] and full.tolist() == [True, False]
    # generation batches of 3 groups: the first batch holds 1 informative group, the second completes B = 2
    keep, used, full = engine.dapo_select(y[:1], drawn[:1], np.array([2]), 2, gen=3)
    assert used.tolist() == [2] and keep[0].nonzero().flatten().tolist() == [1, 4]
    keep, used, full = engine.dapo_select(y[:1], drawn[:1], np.array([3]), 1)
    assert used.tolist() == [2] and keep[0].nonzero().flatten().tolist() == [1]  # B=1: group 1 is batch 2


def build_task(o, seeds=None):
    return simtask.make_task(o.seed_list if seeds is None else seeds, o.prompts, BETA, o.features, o.erosion)


def run(task, label, G, o):
    """`label` at group size G, every seed of `o` at its first grid lr."""
    return engine.run_one(task, parse_estimator(label), G, o, o.seed_list, [o.lr_grid[0]] * o.seeds)


def impossible_task(options):
    t = build_task(options)
    return dataclasses.replace(t, z0=torch.full_like(t.z0, -50.0))


def test_dapo_counts_every_answer_generated_within_the_budget():
    o = SimOptions(**{**TINY, "steps": 5, "max_gen_batches": 2})
    # no prompt can ever succeed: DAPO finds no group to train on; it generates 2, 2, then 1 batch (the budget)
    dapo = run(impossible_task(o), "dapo", 4, o)
    assert dapo.generated.tolist() == [o.budget] * 3
    assert dapo.trained.tolist() == [0] * 3 and dapo.updates.tolist() == [0] * 3
    assert dapo.short_batches.tolist() == [3] * 3
    # on a normal task: the budget is spent exactly, and trained answers are whole batches (or short ones)
    o = SimOptions(**{**TINY, "steps": 6, "prompts": 64})
    task = build_task(o)
    dapo = run(task, "dapo", 4, o)
    grpo = run(task, "grpo", 4, o)
    assert dapo.generated.tolist() == grpo.generated.tolist() == [o.budget] * 3
    assert np.all(dapo.trained <= dapo.generated)
    assert np.all(dapo.updates <= grpo.updates) and np.all(grpo.updates == o.steps)
    assert np.all(dapo.trained[dapo.short_batches == 0] == dapo.updates[dapo.short_batches == 0] * o.answers_per_step)


def test_grpo_on_an_all_fail_task_does_not_move():
    o = SimOptions(**TINY)
    t = impossible_task(o)
    grpo = run(t, "grpo", 2, o)
    np.testing.assert_array_equal(grpo.final, simtask.expected_success(t, torch.zeros(3, t.n_params, dtype=torch.float64)).numpy())


@pytest.mark.parametrize("erosion", [0.0, 0.1, 2.0])
def test_param_grad_is_the_chain_rule_of_the_logits(erosion):
    o = SimOptions(**{**TINY, "erosion": erosion})
    t = build_task(o)
    theta = torch.randn(3, t.n_params, dtype=torch.float64, requires_grad=True)
    g_z = torch.randn(3, o.prompts, dtype=torch.float64)
    (simtask.logits(t, theta) * g_z).sum().backward()
    torch.testing.assert_close(simtask.param_grad(t, g_z, theta.detach()), theta.grad)
    if erosion:  # the erosion term is really there (the check above is not vacuous), and vanishes at theta = 0
        assert not torch.allclose(simtask.param_grad(t, g_z), theta.grad)
        zero = torch.zeros_like(theta.detach())
        torch.testing.assert_close(simtask.param_grad(t, g_z, zero), simtask.param_grad(t, g_z))


def test_erosion_known_answer_and_what_a_random_walk_does():
    """Every logit loses kappa x mean_j theta_j^2; a large random walk of the parameters lowers a
    hard task's success with erosion and raises it toward 1/2 without (the coin flip erosion removes)."""
    o = SimOptions(**{**TINY, "erosion": 0.5})
    t = build_task(o)
    theta = torch.zeros(3, t.n_params, dtype=torch.float64)
    theta[:, 0] = 2.0  # w_glob only: mean square 4 / n_params
    plain = dataclasses.replace(t, erosion=0.0)
    torch.testing.assert_close(simtask.logits(t, theta), simtask.logits(plain, theta) - 0.5 * 4.0 / t.n_params)
    hard = dataclasses.replace(t, z0=torch.full_like(t.z0, -3.0))
    gen = torch.Generator().manual_seed(0)
    walks = [torch.randn(3, t.n_params, dtype=torch.float64, generator=gen) * 5 for _ in range(200)]
    mean = lambda task: torch.stack([simtask.expected_success(task, w) for w in walks]).mean(0)  # noqa: E731
    start = simtask.expected_success(hard, torch.zeros_like(walks[0]))  # sigmoid(-3) = 0.047
    assert torch.all(mean(dataclasses.replace(hard, erosion=0.0)) > 2 * start)
    assert torch.all(mean(hard) < start / 2)


def test_adam_matches_torch_adam_and_masked_seeds_do_not_move():
    torch.manual_seed(0)
    theta0 = torch.randn(2, 5, dtype=torch.float64)
    grads = [torch.randn(2, 5, dtype=torch.float64) for _ in range(4)]
    ours = simtask.Optimizer(0.1, theta0.shape)
    theta = theta0.clone()
    for g in grads:
        theta = ours.step(theta, g, torch.tensor([True, False]))
    ref = theta0[0].clone().requires_grad_(True)
    torch_adam = torch.optim.Adam([ref], lr=0.1, maximize=True)
    for g in grads:
        ref.grad = g[0].clone()
        torch_adam.step()
    torch.testing.assert_close(theta[0], ref.detach())
    torch.testing.assert_close(theta[1], theta0[1], rtol=0, atol=0)


def test_stream_epochs_are_permutations():
    o = SimOptions(**{**TINY, "prompts": 12})
    rnd = simtask.stream(build_task(o), 36, o.seed_list)
    for s in range(3):
        for e in range(3):
            assert sorted(rnd[s, 12 * e : 12 * (e + 1)].tolist()) == list(range(12))
    assert rnd[0, :12].tolist() != rnd[0, 12:24].tolist()  # a fresh permutation every epoch


def test_runs_are_deterministic_and_a_seed_does_not_depend_on_the_others():
    o = SimOptions(**TINY)
    one = SimOptions(**{**TINY, "seed": 2, "seeds": 1})
    for label in ("dapo", "ebpo"):
        a, b = (run(build_task(o), label, 2, o) for _ in range(2))
        alone = run(build_task(one), label, 2, one)
        np.testing.assert_array_equal(a.curve, b.curve)
        np.testing.assert_array_equal(a.curve[2], alone.curve[0])
        np.testing.assert_array_equal(a.generated[2], alone.generated[0])


def test_simulation_leaves_the_process_wide_prior_alone():
    reset_prior()
    get_prior().load_state_dict({**get_prior().state_dict(), "reward": {"weight": 3.0, "mean": 0.5, "m2": 0.75},
                                  "group_mean": {"weight": 1.0, "mean": 0.5, "m2": 0.0}, "updates": 1})
    before = get_prior().state_dict()
    o = SimOptions(**TINY)
    run(build_task(o), "ebpo", 2, o)
    assert get_prior().state_dict() == before
    reset_prior()


def test_learning_happens(monkeypatch):
    monkeypatch.setattr(engine, "SCORE_NOISE", 0.0)
    o = SimOptions(**{**TINY, "steps": 30, "prompts": 64})
    grpo = run(build_task(o), "grpo", 4, o)
    assert np.all(grpo.final > grpo.curve[:, 0] + 0.05)


def test_a_cell_row_is_its_own_run_and_the_best_lr_is_chosen_on_tuning_seeds_only():
    """run_cell's batched rows (every lr x tuning + reporting seeds) equal separate runs of each seed at each lr;
    best_index reads the tuning rows only."""
    o = SimOptions.from_mapping({**{k: str(v) for k, v in TINY.items() if k not in ("G", "lr_grid")}, "seeds": "2",
                                 "tune_seeds": "1", "lr_grid": "0.3 3", "G": "2"})
    rows = [s for _ in o.lr_grid for s in (*o.tune_seed_list, *o.seed_list)]
    cell = lr.run_cell(build_task(o, rows), "ebpo", 2, o)
    assert cell["auc"].shape == cell["final"].shape == (2, 3)
    for i, x in enumerate(o.lr_grid):
        for j, seed in enumerate((*o.tune_seed_list, *o.seed_list)):
            alone = engine.run_one(build_task(o, [seed]), parse_estimator("ebpo"), 2, o, seeds=[seed], lrs=[x])
            assert cell["final"][i, j] == pytest.approx(alone.final[0], abs=1e-12)
            assert cell["auc"][i, j] == pytest.approx(lr.auc(alone.curve)[0], abs=1e-12)
    assert lr.best_index(cell["auc"][:, :1]) == int(np.argmax(cell["auc"][:, 0]))


def test_auc_known_answers():
    curve = np.array([[0.2, 0.4, 0.7, 0.8], [0.5, 0.5, 0.5, 0.5]])
    assert lr.auc(curve).tolist() == pytest.approx([1.6 / 3, 0.5])


def test_cli_smoke(tmp_path, capsys):
    out = tmp_path / "sim"
    rc = cli.main(["simulate", "--out", str(out), "--G", "2", "4", "--seeds", "2", "--tune-seeds", "1", "--steps", "3",
                   "--prompts", "16", "--answers-per-step", "8", "--estimators", "grpo", "dapo", "ebpo",
                   "--lr-grid", "0.3", "3", "--grad-draws", "2", "--grad-warmup", "1"])
    assert rc == 0
    assert sorted(os.listdir(out)) == sorted(lr.FILES)
    summary = json.loads((out / "summary.json").read_text())
    assert summary["seeds"] == 2 and set(summary["envelope"]["hard"]) == {"2", "4"}
    assert set(summary["gradient"]) == {"hard", "very_hard"} and set(summary["gradient"]["hard"]["4"]) == {
        "grpo", "dapo", "ebpo"}
    # the command it records makes the same options again (and names only what differs from the study's defaults)
    argv = summary["command"].split()
    assert argv[:2] == ["verl-ebpo", "simulate"] and "--lr-grid 0.3 3" in summary["command"] and "--G 2 4" in summary[
        "command"]
    parser = argparse.ArgumentParser()
    simulate.add_arguments(parser)
    args = parser.parse_args(argv[2:])
    given = {k: " ".join(v) if isinstance(v, list) else v for k, v in vars(args).items()
             if v is not None and k not in ("out", "no_figure", "quiet")}
    assert lr.command_of(SimOptions.from_mapping(given)) == summary["command"]
    assert lr.command_of(SimOptions()) == "verl-ebpo simulate"
    captured = capsys.readouterr()
    assert "## Best lr" in captured.out and "simulate:" in captured.err  # the tables; the progress bar on stderr


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--G", "3"], "not a multiple of G=[3]"),
        (["--estimators", "gpro"], "unknown estimator 'gpro'"),
        (["--estimators", "ebpo:prior_scope=forever"], "prior_scope"),
        (["--estimators", "grpo:prior_decay=0.5"], "unknown option"),
        (["--seeds", "0"], "simulate.seeds"),
        (["--estimators", "grpo", "rloo"], "must include ebpo"),
    ],
)
def test_cli_bad_input_is_one_line_on_stderr(tmp_path, capsys, argv, message):
    rc = cli.main(["simulate", "--out", str(tmp_path / "x"), "--answers-per-step", "8", *argv])
    err = capsys.readouterr().err
    assert rc == 2 and message in err and err.count("\n") == 1 and "Traceback" not in err
    assert not (tmp_path / "x").exists()


def test_cli_refuses_an_output_that_is_a_file(tmp_path, capsys):
    target = tmp_path / "file"
    target.write_text("keep me")
    assert cli.main(["simulate", "--out", str(target), "--steps", "1"]) == 2
    assert "not a folder" in capsys.readouterr().err and target.read_text() == "keep me"


@pytest.mark.parametrize("make", ["folder", "fifo", "under_a_file"])
def test_cli_refuses_a_bad_output_before_any_work(tmp_path, capsys, monkeypatch, make):
    def no_work(*args, **kwargs):
        raise AssertionError("the sweep ran before the output files were checked")

    monkeypatch.setattr(lr, "run_study", no_work)
    out = tmp_path / "sim"
    out.mkdir()
    if make == "folder":
        (out / "summary.json").mkdir()
        expected = "summary.json: it is a directory, not a regular file"
    elif make == "fifo":
        os.mkfifo(out / "results.md")
        expected = "results.md: it is a FIFO"
    else:
        (tmp_path / "file").write_text("keep me")
        out = tmp_path / "file" / "sim"
        expected = "Not a directory"
    rc = cli.main(["simulate", "--out", str(out), "--steps", "1", "--quiet"])
    err = capsys.readouterr().err
    assert rc == 2 and expected in err and err.count("\n") == 1 and "Traceback" not in err, err


def test_weight_decay_pulls_the_parameters_toward_the_initial_policy():
    """Every active step multiplies theta by (1 - w) before the update; inactive rows do not move; the option's
    range is [0, 0.5] (`SimOptions` holds the rule)."""
    theta = torch.tensor([[1.0, -2.0], [3.0, 4.0]], dtype=torch.float64)
    opt = simtask.Optimizer(0.1, theta.shape, weight_decay=0.2)
    grad = torch.tensor([[1.0, 1.0], [1.0, 1.0]], dtype=torch.float64)
    new = opt.step(theta, grad, torch.tensor([True, False]))
    # Adam's first step moves each parameter by lr x g / (|g| + eps) = 0.1, after the decay
    assert torch.allclose(new[0], theta[0] * 0.8 + 0.1) and torch.equal(new[1], theta[1])
    with pytest.raises(ValueError, match="weight_decay"):
        SimOptions(weight_decay=0.6)
    assert SimOptions().weight_decay == 0.0


def test_weight_decay_changes_learning_not_the_initial_gradient():
    base = dict(G=(2,), seeds=2, prompts=16, steps=4, answers_per_step=8, features=4, erosion=0.0, lr_grid=(3.0,))
    off, on = (run(build_task(o), "grpo", 2, o) for o in (SimOptions(**base), SimOptions(**base, weight_decay=0.3)))
    assert np.array_equal(off.curve[:, :2], on.curve[:, :2])  # the first step starts from theta = 0 either way
    assert not np.allclose(off.curve[:, -1], on.curve[:, -1])
