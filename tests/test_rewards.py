"""The math reward as verl runs it: loaded by verl's `get_custom_reward_fn` from verl's own ppo_trainer.yaml
composed by Hydra with the README's overrides, called from thread pools (and through verl's real
NaiveRewardManager), on a table of known cases and adversarial inputs."""

import asyncio
import os
import warnings
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

import verl
from verl.trainer.ppo.reward import get_custom_reward_fn
from verl_ebpo.rewards import shutdown

TIMEOUT = 2.0  # seconds; the default is 3. Wall-clock, and this machine is shared: not lower.
GRACE = 1.0
OVERRIDES = [
    "reward.custom_reward_function.path=pkg://verl_ebpo.rewards",
    "reward.custom_reward_function.name=compute_score",
    f"+reward.custom_reward_function.reward_kwargs.timeout={TIMEOUT}",
    f"+reward.custom_reward_function.reward_kwargs.kill_grace={GRACE}",
    "+reward.custom_reward_function.reward_kwargs.processes=3",
]


def compose(*overrides):
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir

    config_dir = os.path.join(os.path.dirname(verl.__file__), "trainer", "config")
    with initialize_config_dir(config_dir=config_dir, version_base=None):
        return hydra_compose("ppo_trainer", overrides=list(overrides))


@pytest.fixture(scope="module")
def config():
    return compose(*OVERRIDES)


def with_reward_kwargs(config, **kwargs):
    """The composed config with more `reward_kwargs` (what `+reward.custom_reward_function.reward_kwargs.K=V`
    adds), without composing again."""
    from omegaconf import OmegaConf

    cfg = OmegaConf.create(OmegaConf.to_container(config.reward, resolve=False))
    for key, value in kwargs.items():
        OmegaConf.update(cfg, f"custom_reward_function.reward_kwargs.{key}", value, force_add=True)
    return OmegaConf.create({"reward": cfg})


@pytest.fixture(scope="module")
def reward_fn(config):
    fn = get_custom_reward_fn(config)
    assert fn is not None
    yield fn
    shutdown()


def verl_call(fn, solution, ground_truth, **extra):
    """Exactly the keyword arguments verl's reward managers pass (naive.py / dapo.py)."""
    extra_info = {"index": 0, "num_turns": 2, "rollout_reward_scores": {}}
    return fn(data_source="math_dapo", solution_str=solution, ground_truth=ground_truth, extra_info=extra_info, **extra)


B = "\\boxed"
# (id, solution_str, ground_truth, expected acc)
EQUIVALENT = [
    ("frac=decimal", "0.5", "\\frac{1}{2}"),
    ("dfrac", "\\dfrac{3}{4}", "0.75"),
    ("surd-rationalized", "\\frac{1}{\\sqrt{2}}", "\\frac{\\sqrt{2}}{2}"),
    ("surd-simplified", "\\sqrt{12}", "2\\sqrt{3}"),
    ("interval", "(1, 2]", "(1,2]"),
    ("interval-left", "\\left(-\\infty, 3\\right)", "(-\\infty,3)"),
    ("tuple", "\\left(3, -1\\right)", "(3,-1)"),
    ("set-order", "\\{2, 1\\}", "\\{1,2\\}"),
    ("polynomial", "(x+1)^2", "x^2+2x+1"),
    ("pi", "\\pi/3", "\\frac{\\pi}{3}"),
    ("thousands", "1,000", "1000"),
    ("degrees", "90^\\circ", "90"),
    ("percent", "10\\%", "10"),
    ("choice", "\\text{(B)}", "B"),
    ("equation", "x = 5", "5"),
    ("power", "2^{10}", "1024"),
]
CASES = []
for name, a, b in EQUIVALENT:  # both ways: each form as the answer and as the ground truth
    CASES.append((f"eq-{name}", f"So the answer is ${B}{{{a}}}$.", b, True))
    CASES.append((f"eq-{name}-swapped", f"So the answer is ${B}{{{b}}}$.", a, True))
CASES += [
    ("wrong-fraction", f"{B}{{\\frac{{1}}{{3}}}}", "\\frac{1}{2}", False),
    ("wrong-interval-closed", f"{B}{{[1,2]}}", "(1,2]", False),
    ("wrong-tuple-order", f"{B}{{(-1,3)}}", "(3,-1)", False),
    ("wrong-surd", f"{B}{{3\\sqrt{{2}}}}", "2\\sqrt{3}", False),
    ("wrong-polynomial", f"{B}{{x^2+1}}", "(x+1)^2", False),
    ("wrong-integer", f"{B}{{6}}", "5", False),
    ("wrong-rounded", f"{B}{{0.33}}", "\\frac{1}{3}", False),
    ("wrong-pi-approx", f"{B}{{3.14}}", "\\pi", False),
    ("wrong-sign", f"{B}{{-7}}", "7", False),
    # extraction
    ("last-box-wins", f"first {B}{{3}} then {B}{{5}}", "5", True),
    ("last-box-wins-neg", f"first {B}{{5}} then {B}{{3}}", "5", False),
    ("fbox", "\\fbox{42}", "42", True),
    ("nested-braces", f"{B}{{\\frac{{1}}{{\\sqrt{{4}}}}}}", "0.5", True),
    ("escaped-braces", f"{B}{{\\{{1,2\\}}}}", "\\{2,1\\}", True),
    ("box-space", f"{B} {{7}}", "7", True),
    ("unclosed-last-box", f"{B}{{5}} and finally {B}{{5", "5", False),
    ("unclosed-box-answer-line", f"{B}{{5\nAnswer: 5", "5", True),
    ("answer-line", "We compute.\nAnswer: 17", "17", True),
    ("answer-line-latex", "We compute.\nanswer: $\\frac{3}{6}$", "\\frac12", True),
    ("answer-line-last", "Answer: 3\nNo wait.\nAnswer: 4", "4", True),
    ("answer-next-line", "Answer:\n  12", "12", True),
    ("box-beats-answer-line", f"Answer: 4\n{B}{{5}}", "4", False),
    ("no-answer", "I think it is five.", "5", False),
    ("empty-box", f"{B}{{}} Answer: 5", "5", True),
    ("gold-boxed", f"{B}{{\\frac{{1}}{{2}}}}", f"{B}{{0.5}}", True),
    ("gold-int", f"{B}{{12}}", 12, True),
    ("gold-float", f"{B}{{\\frac{{1}}{{4}}}}", 0.25, True),
    ("gold-numpy", f"{B}{{12}}", np.int64(12), True),
    ("gold-list", f"{B}{{4}}", ["3", "4"], True),
    ("gold-array", f"{B}{{9}}", np.array(["3", "4"], dtype=object), False),
    ("nul-bytes", f"\x00{B}{{4\x00}}\x00", "4", True),
    ("lone-surrogate", f"\ud800 {B}{{4}}", "4", True),
    ("bytes-output", f"{B}{{4}}".encode(), "4", True),
    ("none-output", None, "4", False),
    ("think-tags", f"<think>maybe {B}{{3}}</think> The answer is {B}{{8}}.", "8", True),
    # long outputs
    ("120k-then-answer", "reasoning " * 12_000 + f"{B}{{\\frac{{2}}{{4}}}}", "0.5", True),
    ("120k-no-answer", "x" * 120_000, "1", False),
    ("120k-open-braces", B + "{" * 120_000, "1", False),
    ("many-box-openers", (B + "{") * 20_000, "1", False),
    ("answer-then-120k-spaces", "Answer:" + " " * 120_000, "1", False),
    ("deep-nesting", B + "{" + "{" * 3000 + "1" + "}" * 3000 + "}", "1", False),  # math-verify runs out of time
    # thousands of nested boxes or unclosed braces: one linear scan (tests/test_rewards_extract.py counts it)
    ("nested-4000-boxes", (B + "{") * 4000 + "7" + "}" * 4000, "7", True),
    ("nested-4000-boxes-wrong", (B + "{") * 4000 + "8" + "}" * 4000, "7", False),
    ("nested-4000-boxes-unclosed", (B + "{") * 4000 + "7", "7", False),
    ("box-of-4000-open-braces", B + "{" * 4001 + "7", "7", False),
]
# Adversarial answers: each must come back wrong within about timeout + grace, never raise, never hang.
ADVERSARIAL = [
    ("adv-power-tower", f"{B}{{9^{{9^{{9^{{9}}}}}}}}", "7"),
    ("adv-factorial-tower", f"{B}{{((10!)!)!}}", "3"),
    ("adv-huge-power", f"{B}{{2^{{2^{{40}}}}}}", "5"),
    ("adv-expansion", f"{B}{{(x+y+z+w)^{{60}}}}", "1"),
    ("adv-symbol-tower", f"{B}{{x^{{x^{{x^{{x^{{x^{{x}}}}}}}}}}}} - 1}}", "0"),
]
CASES += [(name, sol, gt, False) for name, sol, gt in ADVERSARIAL]


@pytest.fixture(scope="module")
def table_results(reward_fn):
    """Run the whole table at once from 16 threads (verl runs sync reward functions in a thread pool)."""

    def run(case):
        return verl_call(reward_fn, case[1], case[2]), None

    with ThreadPoolExecutor(16) as pool:
        results = dict(zip([c[0] for c in CASES], pool.map(run, CASES)))
    return results, None


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_known_case(table_results, case):
    name, _, _, expected = case
    out, _ = table_results[0][name]
    assert set(out) == {"score", "acc", "pred", "verdict"}
    assert out["acc"] is expected, out
    assert out["score"] == (1.0 if expected else 0.0)
    assert isinstance(out["pred"], str) and len(out["pred"]) <= 200


def test_table_verdicts_and_pred(table_results):
    results = table_results[0]
    assert results["no-answer"][0]["verdict"] == "no_answer" and results["no-answer"][0]["pred"] == ""
    assert results["120k-no-answer"][0]["verdict"] == "no_answer"
    assert results["unclosed-last-box"][0]["verdict"] == "no_answer"
    assert results["deep-nesting"][0]["verdict"] in ("timeout", "error")
    assert results["deep-nesting"][0]["pred"].endswith("...")
    assert results["last-box-wins"][0]["pred"] == "5"
    assert results["answer-line-latex"][0]["pred"] == "$\\frac{3}{6}$"
    assert results["nul-bytes"][0]["pred"] == "4"
    assert results["wrong-integer"][0]["verdict"] == "wrong"
    assert results["nested-4000-boxes"][0]["verdict"] == "correct" and results["nested-4000-boxes"][0]["pred"] == "7"
    assert results["nested-4000-boxes-wrong"][0]["verdict"] == "wrong"
    assert results["nested-4000-boxes-unclosed"][0]["verdict"] == "no_answer"
    assert results["box-of-4000-open-braces"][0]["verdict"] == "no_answer"


def test_adversarial_verdicts(table_results):
    for name, _, _ in ADVERSARIAL:
        out, _ = table_results[0][name]
        assert out["verdict"] in ("timeout", "wrong", "error"), (name, out)
    assert table_results[0]["adv-power-tower"][0]["verdict"] == "timeout"


def test_one_adversarial_call_is_bounded(reward_fn):
    out = verl_call(reward_fn, f"{B}{{((10!)!)!}}", "120")
    assert out["verdict"] == "timeout" and out["score"] == 0.0


TOWER = ADVERSARIAL[0][1:]  # (solution, ground truth) that timed out in the table: again, it costs its bound again


def test_dapo_scores_and_format_penalty(table_results, config):
    """DAPO's +1/-1 and a format penalty, from the command line's `+...reward_kwargs.*` overrides."""
    cfg = compose(
        *OVERRIDES,
        "+reward.custom_reward_function.reward_kwargs.wrong_score=-1",
        "+reward.custom_reward_function.reward_kwargs.no_answer_score=-1.5",
    )
    fn = get_custom_reward_fn(cfg)
    assert verl_call(fn, f"{B}{{2}}", "2")["score"] == 1.0
    assert verl_call(fn, f"{B}{{3}}", "2")["score"] == -1.0
    assert verl_call(fn, *TOWER)["score"] == -1.0  # a timeout is a wrong answer
    out = verl_call(fn, "no idea", "2")
    assert out["score"] == -1.5 and out["acc"] is False and out["verdict"] == "no_answer"


def test_verl_extra_kwargs_accepted_and_typos_warned(reward_fn):
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # verl's own extra arguments: no warning
        out = verl_call(reward_fn, f"{B}{{2}}", "2", reward_router_address=None, reward_model_tokenizer=None)
    assert out["acc"] is True
    with pytest.warns(UserWarning, match="ignoring unknown keyword argument.*'timout'.*options are"):
        out = verl_call(reward_fn, f"{B}{{2}}", "2", timout=5)
    assert out["acc"] is True


@pytest.mark.parametrize(
    "override, message",
    [
        ("timeout=0", "timeout"),
        ("timeout=soon", "timeout"),
        ("wrong_score=nan", "wrong_score"),
        ("processes=0", "processes"),
        ("kill_grace=-1", "kill_grace"),
    ],
)
def test_bad_options_raise_clear_errors(config, override, message):
    key, value = override.split("=")
    fn = get_custom_reward_fn(with_reward_kwargs(config, **{key: value}))
    with pytest.raises(ValueError, match=message):
        verl_call(fn, f"{B}{{2}}", "2")


@pytest.mark.parametrize("gt", [None, "", "  ", [], True, float("inf"), {"a": 1}])
def test_bad_ground_truth_raises_clear_error(reward_fn, gt):
    with pytest.raises(ValueError, match="ground_truth"):
        verl_call(reward_fn, f"{B}{{2}}", gt)


def test_verl_naive_reward_manager_end_to_end(table_results, config, reward_fn):
    """verl's real reward manager: decodes token ids, calls the function in its loop's default thread pool
    and turns the dict into reward_score + reward_extra_info."""
    import torch
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast
    from verl import DataProto
    from verl.experimental.reward_loop.reward_manager.naive import NaiveRewardManager

    rows = [
        ("So $\\boxed{\\dfrac{1}{2}}$.", "0.5", 1.0),
        ("Answer: 17", "17", 1.0),
        ("so \\boxed{(1,2]}", "[1,2]", 0.0),
        ("no answer here", "3", 0.0),
        (TOWER[0], TOWER[1], 0.0),
    ]
    chars = sorted(set("".join(r[0] for r in rows)))
    vocab = {"<pad>": 0, "<unk>": 1, **{c: i + 2 for i, c in enumerate(chars)}}
    core = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    core.pre_tokenizer = pre_tokenizers.Split(Regex(r"[\s\S]"), behavior="isolated")
    core.decoder = decoders.Fuse()
    tok = PreTrainedTokenizerFast(tokenizer_object=core, pad_token="<pad>", unk_token="<unk>")

    prompt_len, resp_len = 2, max(len(r[0]) for r in rows)
    n = len(rows)
    responses = torch.zeros(n, resp_len, dtype=torch.long)
    attention = torch.zeros(n, prompt_len + resp_len, dtype=torch.long)
    for i, (sol, _, _) in enumerate(rows):
        ids = tok(sol, add_special_tokens=False)["input_ids"]
        assert tok.decode(ids) == sol
        responses[i, : len(ids)] = torch.tensor(ids)
        attention[i, : prompt_len + len(ids)] = 1
    data = DataProto.from_dict(
        tensors={"prompts": torch.ones(n, prompt_len, dtype=torch.long), "responses": responses,
                 "attention_mask": attention},
        non_tensors={
            "data_source": np.array(["math_dapo"] * n, dtype=object),
            "reward_model": np.array([{"ground_truth": r[1]} for r in rows], dtype=object),
            "extra_info": np.array([{"index": i} for i in range(n)], dtype=object),
        },
    )
    loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)
    try:
        manager = NaiveRewardManager(config, tok, reward_fn)

        async def run_all():
            return await asyncio.gather(*(manager.run_single(data[i : i + 1]) for i in range(n)))

        outs = loop.run_until_complete(run_all())
    finally:
        loop.close()
        asyncio.set_event_loop(None)
    assert [o["reward_score"] for o in outs] == [r[2] for r in rows]
    assert [o["reward_extra_info"]["acc"] for o in outs] == [r[2] == 1.0 for r in rows]
    assert outs[0]["reward_extra_info"]["pred"] == "\\dfrac{1}{2}"
    assert outs[3]["reward_extra_info"]["verdict"] == "no_answer"
    # verl stacks each key of reward_extra_info into a numpy array (agent_loop.py): all rows have every key
    keys = [set(o["reward_extra_info"]) for o in outs]
    assert all(k == keys[0] for k in keys)
    np.array([o["reward_extra_info"]["pred"] for o in outs])
