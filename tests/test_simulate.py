"""`verl-ebpo simulate`: verl's own advantages, DAPO's counting, the gradient, determinism, the summary, the CLI."""

import dataclasses
import json
import os

import numpy as np
import pytest
import torch

from verl_ebpo.tools import cli
from verl_ebpo.advantage.prior import get_prior, reset_prior
from verl_ebpo.tools.simulate import engine, report, task as simtask
from verl_ebpo.tools.simulate.estimators import AdvantageCaller, parse_estimator, zero_advantage
from verl_ebpo.tools.simulate.options import SimOptions

TINY = dict(G=(2, 4), seeds=3, prompts=24, heldout=8, steps=4, answers_per_step=16, features=4, regime="custom")


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


@pytest.mark.parametrize("label", ["rfpp_baseline", "rfpp_baseline_loop"])
def test_rfpp_baseline_is_verls_function_per_seed(label):
    """`rfpp_baseline` (all seeds in one vectorised pass) and `rfpp_baseline_loop` (verl's function per seed)
    equal verl's registered function called on each seed's rows."""
    scores, group_seed = batch()
    got = AdvantageCaller(parse_estimator(label), 3)(scores, group_seed, 4)
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


def test_zero_advantage_share_known_answers():
    all_fail = torch.zeros(6, 4, dtype=torch.float64)
    seeds = torch.zeros(6, dtype=torch.long)
    grpo = AdvantageCaller(parse_estimator("grpo"), 1)(all_fail, seeds, 4)
    assert zero_advantage(grpo).double().mean() == 1.0
    # EBPO after a step that saw successes (mu_glob > 0): half all-fail, half mixed groups -> no zero advantage
    mixed = torch.tensor([[0, 0, 0, 0]] * 3 + [[1, 0, 1, 0]] * 3, dtype=torch.float64)
    for label in ("ebpo", "ebpo:normalize=none"):
        caller = AdvantageCaller(parse_estimator(label), 1)
        caller(mixed, seeds, 4)
        assert caller.priors[0].mu_glob > 0
        assert zero_advantage(caller(mixed, seeds, 4)).double().mean() == 0.0
        # a batch of all-fail groups only: raw advantages -S*mu_glob are all equal, so batch normalisation
        # centres them to 0; without normalisation each answer keeps -S*mu_glob < 0
        adv = caller(all_fail, seeds, 4)
        if label == "ebpo":
            assert zero_advantage(adv).all()
        else:
            assert (adv < -1e-3).all()
    assert zero_advantage(AdvantageCaller(parse_estimator("grpo"), 1)(mixed, seeds, 4)).double().mean() == 0.5


def test_zero_advantage_is_the_estimators_own_tolerance():
    from verl_ebpo.advantage import core as estimator
    from verl_ebpo.tools.simulate import estimators as sim

    assert sim.ZERO_ADVANTAGE_TOL is estimator.ZERO_ADVANTAGE_TOL and not hasattr(sim, "ZERO_ADV_TOL")
    tol = estimator.ZERO_ADVANTAGE_TOL
    adv = torch.tensor([0.0, 0.5 * tol, -0.99 * tol, tol, -2 * tol, 1.0], dtype=torch.float64)
    assert zero_advantage(adv).tolist() == [True, True, True, False, False, False]


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
    keep, used, full, degenerate, surplus = engine.dapo_select(y, drawn, rounds, 2)
    assert keep.tolist() == [[False, True, False, False, True, False], [True, False, False, False, False, False]]
    assert used.tolist() == [3, 1] and full.tolist() == [True, False]
    # seed 0: groups 0, 2, 3 all-equal; group 5 informative but the batch was already full; seed 1: group 1
    assert degenerate.tolist() == [3, 1] and surplus.tolist() == [1, 0]
    # generation batches of 3 groups: the first batch holds 1 informative group, the second completes B = 2
    keep, used, full, degenerate, surplus = engine.dapo_select(y[:1], drawn[:1], np.array([2]), 2, gen=3)
    assert used.tolist() == [2] and degenerate.tolist() == [3] and surplus.tolist() == [1]
    keep, used, full, *_ = engine.dapo_select(y[:1], drawn[:1], np.array([3]), 1)
    assert used.tolist() == [2] and keep[0].nonzero().flatten().tolist() == [1]  # B=1: group 1 is batch 2


def impossible_task(options):
    t = engine.build_task(options)
    return dataclasses.replace(t, z0=torch.full_like(t.z0, -50.0), z0_heldout=torch.full_like(t.z0_heldout, -50.0))


def test_dapo_counts_every_answer_generated_within_the_budget():
    o = SimOptions(**{**TINY, "steps": 5, "max_gen_batches": 2})
    # no prompt can ever succeed: DAPO finds no group to train on; it generates 2, 2, then 1 batch (the budget)
    run = engine.run_one(impossible_task(o), parse_estimator("dapo"), 4, o)
    assert run.generated.tolist() == [o.budget] * 3
    assert run.trained.tolist() == [0] * 3 and run.updates.tolist() == [0] * 3
    assert run.short_batches.tolist() == [3] * 3
    assert np.all(run.discarded_frac == 1.0) and np.all(run.no_signal_frac == 1.0)
    # on a normal task: the budget is spent exactly, and trained answers are whole batches (or short ones)
    o = SimOptions(**{**TINY, "steps": 6, "prompts": 64})
    task = engine.build_task(o)
    dapo = engine.run_one(task, parse_estimator("dapo"), 4, o)
    grpo = engine.run_one(task, parse_estimator("grpo"), 4, o)
    assert dapo.generated.tolist() == grpo.generated.tolist() == [o.budget] * 3
    assert np.all(dapo.trained <= dapo.generated) and np.all(dapo.zero_adv == 0)
    assert np.all(dapo.updates <= grpo.updates) and np.all(grpo.updates == o.steps)
    assert np.all(dapo.trained[dapo.short_batches == 0] == dapo.updates[dapo.short_batches == 0] * o.answers_per_step)


def test_grpo_on_an_all_fail_task_has_only_zero_advantages_and_does_not_move():
    o = SimOptions(**TINY)
    t = impossible_task(o)
    run = engine.run_one(t, parse_estimator("grpo"), 2, o)
    assert np.all(run.zero_adv_frac == 1.0)
    np.testing.assert_array_equal(run.final, simtask.expected_success(t, torch.zeros(3, t.n_params, dtype=torch.float64)).numpy())


@pytest.mark.parametrize("erosion", [0.0, 0.1, 2.0])
def test_param_grad_is_the_chain_rule_of_the_logits(erosion):
    o = SimOptions(**{**TINY, "topics": 3, "erosion": erosion})
    t = engine.build_task(o)
    theta = torch.randn(3, t.n_params, dtype=torch.float64, requires_grad=True)
    g_z = torch.randn(3, o.prompts, dtype=torch.float64)
    (simtask.logits(t, theta) * g_z).sum().backward()
    torch.testing.assert_close(simtask.param_grad(t, g_z, theta.detach()), theta.grad)
    if erosion:  # the erosion term is really there (the check above is not vacuous), and vanishes at theta = 0
        assert not torch.allclose(simtask.param_grad(t, g_z), theta.grad)
        zero = torch.zeros_like(theta.detach())
        torch.testing.assert_close(simtask.param_grad(t, g_z, zero), simtask.param_grad(t, g_z))


def test_erosion_known_answer_and_what_a_random_walk_does():
    """Every logit (held-out too) loses kappa x mean_j theta_j^2; a large random walk of the parameters lowers a
    hard task's success with erosion and raises it toward 1/2 without (the coin flip erosion removes)."""
    o = SimOptions(**{**TINY, "erosion": 0.5})
    t = engine.build_task(o)
    theta = torch.zeros(3, t.n_params, dtype=torch.float64)
    theta[:, 0] = 2.0  # w_glob only: mean square 4 / n_params
    plain = dataclasses.replace(t, erosion=0.0)
    for heldout in (False, True):
        torch.testing.assert_close(simtask.logits(t, theta, heldout),
                                   simtask.logits(plain, theta, heldout) - 0.5 * 4.0 / t.n_params)
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


def test_streams_random_epochs_are_permutations_and_topic_order_is_blocks():
    o = SimOptions(**{**TINY, "topics": 3, "prompts": 12})
    t = engine.build_task(o)
    rnd = simtask.stream(t, "random", 36, o.seed_list)
    for s in range(3):
        for e in range(3):
            assert sorted(rnd[s, 12 * e : 12 * (e + 1)].tolist()) == list(range(12))
    top = simtask.stream(t, "topic", 24, o.seed_list)
    for s in range(3):
        topics = t.topic[s][top[s, :12]].tolist()
        assert topics == sorted(topics, key=lambda k: t.topic_order[s].tolist().index(k))
        assert top[s, :12].tolist() == top[s, 12:].tolist()  # the same order every epoch


def test_runs_are_deterministic_and_a_seed_does_not_depend_on_the_others():
    o = SimOptions(**{**TINY, "estimators": ("dapo", "ebpo")})
    a, b = engine.run_sweep(o), engine.run_sweep(o)
    one = engine.run_sweep(SimOptions(**{**TINY, "estimators": ("dapo", "ebpo"), "seed": 2, "seeds": 1}))
    for key, run in a.runs.items():
        np.testing.assert_array_equal(run.curve, b.runs[key].curve)
        np.testing.assert_array_equal(run.curve[2], one.runs[key].curve[0])
        np.testing.assert_array_equal(run.generated[2], one.runs[key].generated[0])


def test_simulation_leaves_the_process_wide_prior_alone():
    reset_prior()
    get_prior().load_state_dict({**get_prior().state_dict(), "reward": {"weight": 3.0, "mean": 0.5, "m2": 0.75},
                                  "group_mean": {"weight": 1.0, "mean": 0.5, "m2": 0.0}, "updates": 1})
    before = get_prior().state_dict()
    engine.run_sweep(SimOptions(**{**TINY, "estimators": ("ebpo",), "G": (2,)}))
    assert get_prior().state_dict() == before
    reset_prior()


def test_learning_happens_and_transfers_to_held_out_prompts():
    o = SimOptions(**{**TINY, "steps": 30, "prompts": 64, "estimators": ("grpo",), "G": (4,), "score_noise": 0.0})
    run = engine.run_sweep(o).runs[("grpo", 4)]
    t = engine.build_task(o)
    start = simtask.expected_success(t, torch.zeros(3, t.n_params, dtype=torch.float64), heldout=True).numpy()
    assert np.all(run.final > run.curve[:, 0] + 0.05)
    assert np.all(run.heldout > start + 0.05)  # never trained on: moved by the shared parameters only


def test_curves_csv_band_is_mean_ci_per_point_over_seeds():
    from verl_ebpo.tools.stats import mean_ci

    sweep = engine.run_sweep(SimOptions(**{**TINY, "estimators": ("grpo",), "G": (2,)}))
    curve = sweep.runs[("grpo", 2)].curve  # (seeds, points)
    rows = report.curves_csv(sweep).splitlines()[1:]
    assert len(rows) == curve.shape[1]
    for k, row in enumerate(rows):
        ci = mean_ci(curve[:, k])
        label, G, answers, mean, lo, hi = row.split(",")
        assert (label, int(G), int(answers)) == ("grpo", 2, k * TINY["answers_per_step"])
        assert [float(mean), float(lo), float(hi)] == pytest.approx([ci.mean, ci.lo, ci.hi], abs=1e-6)


def test_cli_smoke(tmp_path, capsys):
    out = tmp_path / "sim"
    rc = cli.main(["simulate", "--out", str(out), "--G", "2", "4", "--seeds", "2", "--steps", "3", "--prompts", "16",
                   "--answers-per-step", "8", "--estimators", "grpo", "dapo", "ebpo", "--quiet"])
    assert rc == 0
    assert sorted(os.listdir(out)) == sorted(report.FILES)
    summary = json.loads((out / "summary.json").read_text())
    assert summary["seeds"] == 2 and set(summary["results"]["dapo"]) == {"2", "4"}
    assert "ebpo" in capsys.readouterr().out


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--G", "3"], "not a multiple of G=[3]"),
        (["--estimators", "gpro"], "unknown estimator 'gpro'"),
        (["--estimators", "ebpo:prior_scope=forever"], "prior_scope"),
        (["--estimators", "grpo:prior_decay=0.5"], "unknown option"),
        (["--seeds", "0"], "simulate.seeds"),
        (["--beta", "0", "1"], "simulate.beta"),
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

    monkeypatch.setattr(engine, "run_sweep", no_work)
    out = tmp_path / "sim"
    out.mkdir()
    if make == "folder":
        (out / "summary.json").mkdir()
        expected = "summary.json: it is a directory, not a regular file"
    elif make == "fifo":
        os.mkfifo(out / "curves.csv")
        expected = "curves.csv: it is a FIFO"
    else:
        (tmp_path / "file").write_text("keep me")
        out = tmp_path / "file" / "sim"
        expected = "is not a folder"
    rc = cli.main(["simulate", "--out", str(out), "--steps", "1", "--quiet"])
    err = capsys.readouterr().err
    assert rc == 2 and expected in err and err.count("\n") == 1 and "Traceback" not in err, err


def test_docs_options_table_is_the_spec():
    text = open(os.path.join(os.path.dirname(__file__), "..", "docs", "simulator.md"), encoding="utf-8").read()
    assert SimOptions.markdown_table(key_header="option") in text


FAMILY = dict(TINY, regime="all", seeds=2, tune_seeds=1, lr_grid=(0.1, 1.0), estimators=("grpo", "dapo", "ebpo"))


def test_family_summary_has_every_regime_cell_with_its_lr_and_the_shared_results(tmp_path):
    from verl_ebpo.tools.simulate import regimes

    family = regimes.run_family(SimOptions(**FAMILY))
    summary = report.write_family_outputs(family, str(tmp_path), figure=False)
    on_disk = json.loads((tmp_path / "summary.json").read_text())
    assert on_disk == json.loads(json.dumps(summary))
    from verl_ebpo.tools.simulate.options import ALL_REGIMES

    assert list(on_disk["regimes"]) == list(ALL_REGIMES) == ["shared", "per_prompt", "hard"]  # noisy ones only
    for name, per_est in on_disk["regimes"].items():
        assert set(per_est) == {"grpo", "dapo", "ebpo"}
        for label, per_g in per_est.items():
            assert set(per_g) == {"2", "4"}
            for G, cell in per_g.items():
                lo, hi = cell["ci95"]
                assert lo <= cell["final_mean"] <= hi and 0 < cell["auc_mean"] <= 1
                grid = on_disk["lr_grids"][name][f"{label}|{G}"]
                assert cell["lr"] in grid and {0.1, 1.0} <= set(grid)
                scores = on_disk["tune_auc"][name][f"{label}|{G}"]
                assert cell["lr"] == grid[int(np.argmax(scores))]  # the tuning seeds' best AUC
                if label == "dapo":
                    assert cell["degenerate_discard_frac"] + cell["surplus_discard_frac"] == pytest.approx(
                        cell["discarded_frac"], abs=1e-9)
    assert on_disk["results"] == on_disk["regimes"]["shared"]  # the old key: the shared regime
    # 3 regimes x 2 pairs x 2 G x (final, AUC, gradient noise)
    assert sum(len(per_g) for comps in on_disk["regime_comparisons"].values() for per_g in comps.values()) == 3 * 2 * 2
    for comps in on_disk["regime_comparisons"].values():
        for c in comps["ebpo-grpo"].values():
            assert c["noise_ratio"] > 0 and c["noise_class"] in ("higher", "lower", "higher (possibly negligible)",
                                                                 "lower (possibly negligible)", "negligible",
                                                                 "equivalent", "not resolved")
    assert on_disk["regime_settings"]["hard"]["beta"] == [0.3, 3.0]
    assert "## Cells" in (tmp_path / "results.md").read_text()


def test_the_lr_is_chosen_on_tuning_seeds_only():
    """The chosen lr and the reported rows equal separate runs: tuning seeds per lr, then reporting seeds."""
    from verl_ebpo.tools.simulate import regimes

    o = regimes.regime_options(SimOptions(**FAMILY), "per_prompt")
    run, lr, scores, grid = regimes.run_cell(regimes.build_task_rows(o), parse_estimator("ebpo"), 2, o)
    assert set(o.lrs) <= set(grid) and grid == sorted(grid)
    tune = regimes.regime_options(SimOptions(**{**FAMILY, "seed": o.seeds, "seeds": 1}), "per_prompt")
    alone = [regimes.auc(engine.run_one(engine.build_task(tune), parse_estimator("ebpo"), 2, tune, lrs=[x]).curve
                         ).mean() for x in grid]
    assert scores == pytest.approx(alone, abs=1e-12)
    assert lr == grid[int(np.argmax(alone))]
    ref = engine.run_one(engine.build_task(o), parse_estimator("ebpo"), 2, o, lrs=[lr] * o.seeds)
    assert np.allclose(run.final, ref.final, atol=1e-12, rtol=0)


def test_beyond_walks_the_1_3_sequence_and_stops_at_the_limits():
    from verl_ebpo.tools.simulate import regimes

    grid = [0.1, 0.3, 1.0, 3.0, 10.0, 30.0]
    assert regimes.beyond(grid, True) == 100.0 and regimes.beyond(grid, False) == 0.03
    assert regimes.beyond([1.0, 3.0], True) == 10.0 and regimes.beyond([0.3, 1.0], False) == 0.1
    assert regimes.beyond([0.5, 2.0], True) == 8.0 and regimes.beyond([0.5, 2.0], False) == 0.125  # off the sequence
    assert regimes.beyond([300.0, 1000.0], True) is None and regimes.beyond([1e-4, 3e-4], False) is None


@pytest.mark.parametrize("grid0, erosion", [((0.01, 0.03), 0.1), ((0.3, 1.0), 1.0)])
def test_a_grid_whose_best_is_at_an_edge_is_extended_until_it_is_inside(grid0, erosion):
    """Without score noise a larger step learns faster until erosion stops it: a grid below the optimum is
    extended upward on the 1-3 sequence, one value at a time, until the best lies inside it (strong erosion) or
    MAX_EXTEND values were added (weak erosion); the chosen lr's rows equal a separate run."""
    from verl_ebpo.tools.simulate import regimes

    o = SimOptions(**{**FAMILY, "regime": "custom", "score_noise": 0.0, "erosion": erosion, "lr_grid": grid0})
    run, lr, scores, grid = regimes.run_cell(regimes.build_task_rows(o), parse_estimator("grpo"), 2, o)
    assert grid[:2] == list(grid0) and grid[2] == regimes.beyond(list(grid0), True)
    best = int(np.argmax(scores))
    assert lr == grid[best]
    if erosion > 0.5:
        assert 0 < best < len(grid) - 1 and len(grid) - 2 < regimes.MAX_EXTEND
    else:
        assert best == len(grid) - 1 and len(grid) - 2 == regimes.MAX_EXTEND
    ref = engine.run_one(engine.build_task(o), parse_estimator("grpo"), 2, o, lrs=[lr] * o.seeds)
    assert np.allclose(run.final, ref.final, atol=1e-12, rtol=0)


def test_auc_known_answers():
    from verl_ebpo.tools.simulate import regimes

    curve = np.array([[0.2, 0.4, 0.7, 0.8], [0.5, 0.5, 0.5, 0.5]])
    assert regimes.auc(curve).tolist() == pytest.approx([1.6 / 3, 0.5])
