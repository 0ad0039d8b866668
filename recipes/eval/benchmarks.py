"""The paper's evaluation protocol, shared by generate.py and score.py (arXiv 2602.05165, Sec. 4).

Pass@1 averaged over k samples per problem at temperature 1.0, top_p 1.0, at most 20480 new tokens,
DAPO-style prompt ending in "Answer:"; k = 16 for AIME24/AIME25/AMC23/MATH-500 and 4 for OlympiadBench.
"""

# the paper's column order
BENCHMARKS = ("math500", "aime24", "aime25", "amc23", "olympiadbench")
TITLES = {
    "math500": "MATH-500",
    "aime24": "AIME24",
    "aime25": "AIME25",
    "amc23": "AMC23",
    "olympiadbench": "OlympiadBench",
}
SAMPLES = {"math500": 16, "aime24": 16, "aime25": 16, "amc23": 16, "olympiadbench": 4}
TEMPERATURE = 1.0
TOP_P = 1.0
MAX_TOKENS = 20480
# EVAL_PROTOCOL=authors: the authors' evaluation prompt (Tonyzhou98/verl recipe/ebpo/ebpo_eval.py @75b0147):
# the first sentence pair of the DAPO-Math instruction, a blank line, then the problem, as plain text (no chat
# template, no closing "Remember to put your answer ..." sentence).
AUTHORS_PROMPT_PREFIX = (
    "Solve the following math problem step by step. The last line of your response should be of the form "
    "Answer: $Answer (without quotes) where $Answer is the answer to the problem.\n\n"
)

# recipes/<model>/ folder names and the paper's names for them
MODEL_TITLES = {"llama3_8b": "LLaMA3.1-8B", "qwen3_8b": "Qwen3-8B", "qwen3_14b": "Qwen3-14B"}
# run script suffixes (recipes/<model>/run_<method>.sh) and the paper's names for them
METHODS = ("grpo", "drgrpo", "dapo", "ebpo", "ebpo_topic", "grpo_diff", "drgrpo_diff", "dapo_diff", "ebpo_diff")
METHOD_TITLES = {
    "grpo": "GRPO",
    "drgrpo": "Dr.GRPO",
    "dapo": "DAPO",
    "ebpo": "EBPO-naive",
    "ebpo_topic": "EBPO-topic",
    "grpo_diff": "GRPO-diff",
    "drgrpo_diff": "Dr.GRPO-diff",
    "dapo_diff": "DAPO-diff",
    "ebpo_diff": "EBPO-diff",
}


def parse_mapping(text, cast=int, known=BENCHMARKS, what="benchmark"):
    """'a=1,b=2' -> {'a': 1, 'b': 2}; names must be in `known`."""
    out = {}
    for item in (text or "").split(","):
        item = item.strip()
        if not item:
            continue
        name, sep, value = item.partition("=")
        if not sep:
            raise ValueError(f"expected NAME=VALUE, got {item!r}")
        if name not in known:
            raise ValueError(f"unknown {what} {name!r}; known: {', '.join(known)}")
        out[name] = cast(value)
    return out
