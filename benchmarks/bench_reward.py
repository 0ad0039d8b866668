"""Throughput of `verl_ebpo.rewards.compute_score` on realistic math answers.

    python benchmarks/bench_reward.py                 # 10k answers: 625 prompts x 16 samples, 1 verifier process
    python benchmarks/bench_reward.py --unique        # every answer distinct (no cache hits: a worst case)
    python benchmarks/bench_reward.py --threads 16 --processes 2
    python benchmarks/bench_reward.py --workers 1,2,4 # answers/s at 1, 2 and 4 workers (threads = processes)

The answers are generated: about 40 kinds of MATH/DAPO-style ground truths (integers, fractions, decimals,
surds, pi, intervals, tuples, sets, polynomials, degrees, percents, matrices, text), each with equivalent
forms (should score 1) and wrong forms (should score 0), inside ~1.5k characters of reasoning, ending in
`\\boxed{}` (80%), an `Answer:` line (12%) or nothing (8%, e.g. truncated). Within a prompt's group of 16
the samples repeat answers, as a policy's samples do. The generator knows each label, so the run also reports
where math-verify disagrees with it.

Reported: answers/s of wall time and answers/s per core = answers / (CPU seconds of this process + of the
verifier processes), and the time a 512x16 batch would take on 16 reward workers at that rate.
"""

from __future__ import annotations

import argparse
import os
import random
import sys
import time
from concurrent.futures import ThreadPoolExecutor

# (gold, [equivalent forms], [wrong forms]) built from random parameters
def _problem(rng: random.Random) -> tuple[str, list[str], list[str]]:
    k = rng.randrange(14)
    a, b = rng.randint(2, 60), rng.randint(2, 60)
    if k == 0:  # integer
        n = rng.randint(-50, 2000)
        right = [str(n), f"{n}.0", f"{n:,}" if abs(n) >= 1000 else f"{n}"]
        return str(n), right, [str(n + 1), str(-n - 1), str(n + 10)]
    if k == 1:  # fraction
        p, q = a, b + (1 if a == b else 0)
        from math import gcd

        g = gcd(p, q)
        p, q = p // g, q // g
        if q == 1:
            q = p + 1  # coprime with p
        near = round(p / q, 1) if round(p / q, 1) != p / q else p / q + 1  # a rounded (wrong) decimal
        return (
            f"\\frac{{{p}}}{{{q}}}",
            [f"\\dfrac{{{p}}}{{{q}}}", f"{p}/{q}", f"\\frac{{{2 * p}}}{{{2 * q}}}", f"\\tfrac{{{p}}}{{{q}}}"],
            [f"\\frac{{{q}}}{{{p}}}", f"\\frac{{{p + 1}}}{{{q}}}", str(near)],
        )
    if k == 2:  # terminating decimal
        p, q = a, rng.choice([2, 4, 5, 8, 10, 20, 25])
        return (
            f"\\frac{{{p}}}{{{q}}}",
            [str(p / q), f"\\dfrac{{{p}}}{{{q}}}"],
            [str(p / q + 0.5), f"\\frac{{{q}}}{{{p}}}" if p != q else "0"],
        )
    if k == 3:  # surd
        s = rng.choice([2, 3, 5, 6, 7])
        return (
            f"{a}\\sqrt{{{s}}}",
            [f"\\sqrt{{{a * a * s}}}", f"{a} \\sqrt{s}", f"\\frac{{{a * s}}}{{\\sqrt{{{s}}}}}"],
            [f"{a}\\sqrt{{{s + 1}}}", f"{a + 1}\\sqrt{{{s}}}", f"{a * s}"],
        )
    if k == 4:  # pi
        return (
            f"\\frac{{{a}\\pi}}{{{b}}}",
            [f"\\dfrac{{{a}\\pi}}{{{b}}}", f"{a}\\pi/{b}", f"\\frac{{{a}}}{{{b}}}\\pi"],
            [f"\\frac{{{a}\\pi}}{{{b + 1}}}", f"\\frac{{{a}}}{{{b}}}"],
        )
    if k == 5:  # interval
        lo, hi = -a, b
        return (
            f"({lo}, {hi}]",
            [f"({lo},{hi}]", f"\\left({lo}, {hi}\\right]", f"x \\in ({lo}, {hi}]"],
            [f"[{lo}, {hi}]", f"({lo}, {hi})", f"({lo}, {hi + 1}]"],
        )
    if k == 6:  # tuple / point
        return (
            f"({a}, -{b})",
            [f"({a},-{b})", f"\\left( {a}, -{b} \\right)"],
            [f"(-{b}, {a})", f"({a}, {b})"],
        )
    if k == 7:  # set of roots
        return (
            f"\\{{{a}, {-b}\\}}",
            [f"\\{{{-b}, {a}\\}}", f"x = {a} \\text{{ or }} x = {-b}"],
            [f"\\{{{a}, {b}\\}}", f"{a}"],
        )
    if k == 8:  # polynomial
        return (
            f"x^2 + {2 * a}x + {a * a}",
            [f"(x+{a})^2", f"x^{{2}}+{2 * a} x+{a * a}"],
            [f"(x-{a})^2", f"x^2 + {a * a}", f"(x+{a + 1})^2"],
        )
    if k == 9:  # degrees
        d = rng.choice([30, 45, 60, 72, 90, 120, 135, 150])
        return str(d), [f"{d}^\\circ", f"{d}^{{\\circ}}", f"{d}"], [f"{180 - d if d != 90 else 45}^\\circ", f"{d + 10}"]
    if k == 10:  # percent
        return f"{a}\\%", [f"{a}\\%", f"{a}"], [f"{a + 5}\\%", f"{b + a + 1}"]
    if k == 11:  # matrix / vector
        return (
            f"\\begin{{pmatrix}} {a} \\\\ {-b} \\end{{pmatrix}}",
            [f"\\begin{{pmatrix}}{a}\\\\{-b}\\end{{pmatrix}}"],
            [f"\\begin{{pmatrix}} {-b} \\\\ {a} \\end{{pmatrix}}"],
        )
    if k == 12:  # text / multiple choice
        letter = rng.choice("ABCDE")
        other = rng.choice([c for c in "ABCDE" if c != letter])
        return f"\\text{{({letter})}}", [letter, f"\\text{{{letter}}}", f"({letter})"], [other, f"\\text{{({other})}}"]
    # k == 13: exponent / big-ish number
    e = b % 9 + 2
    return f"{a}^{{{e}}}", [str(a**e), f"{a}^{e}"], [str(a**e + 1), f"{a}^{{{e + 1}}}"]


_FILLER = [
    "Let me work through this carefully. ",
    "First we set up the equation $ax^2 + bx + c = 0$ and apply the quadratic formula. ",
    "By the triangle inequality, $|x + y| \\le |x| + |y|$, so we bound each term. ",
    "Substituting $t = \\frac{1}{2}$ gives $f(t) = \\sqrt{t^2 + 1}$. ",
    "We check the boundary cases $x = 0$ and $x = 1$ separately. ",
    "Summing the geometric series $\\sum_{k=0}^{n} r^k = \\frac{1 - r^{n+1}}{1 - r}$. ",
    "Wait, let me double-check that step: the sign was wrong, so we redo it. ",
    "Hence the intermediate value is $12$ but we are not done yet. ",
]
_BOXED_FILLER = "An intermediate result, $\\boxed{12}$, is not the answer yet. "  # the last box wins


def _solution(rng: random.Random, answer: str, style: str, length: int) -> str:
    body = []
    n = 0
    while n < length:
        piece = rng.choice(_FILLER)
        body.append(piece)
        n += len(piece)
    text = "".join(body)
    if style == "boxed":
        if rng.random() < 0.2:
            text += _BOXED_FILLER
        return f"{text}\nTherefore, the final answer is $\\boxed{{{answer}}}$."
    if style == "answer":
        return f"{text}\nAnswer: ${answer}$"
    return text + " and then the computation continues with"  # truncated, no final answer


def make_dataset(n: int, group: int, unique: bool, seed: int) -> list[tuple[str, str, bool]]:
    """[(solution_str, ground_truth, expected_correct)]; expected is False for outputs without an answer."""
    rng = random.Random(seed)
    rows = []
    while len(rows) < n:
        gold, right, wrong = _problem(rng)
        # a policy's group: a few distinct answers, repeated
        pool = [(r, True) for r in right] + [(w, False) for w in wrong]
        for _ in range(group):
            if unique:
                gold, right, wrong = _problem(rng)
                pool = [(r, True) for r in right] + [(w, False) for w in wrong]
            ans, ok = rng.choice(pool)
            u = rng.random()
            style = "boxed" if u < 0.80 else ("answer" if u < 0.92 else "none")
            sol = _solution(rng, ans, style, rng.randint(800, 2500))
            rows.append((sol, gold, ok and style != "none"))
    return rows[:n]


def _cpu_of(pids: list[int]) -> float:
    total = 0.0
    tick = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
    for pid in pids:
        try:
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            total += (int(fields[11]) + int(fields[12])) / tick
        except (OSError, IndexError, ValueError):
            pass
    return total


def measure(rows, threads: int, processes: int, timeout: float) -> dict:
    """Score `rows` with `threads` calling threads and `processes` verifier processes (a fresh pool, all of its
    processes started before the clock starts). Returns wall and CPU seconds, the results and the stats."""
    from verl_ebpo.rewards import compute_score, shutdown, stats
    from verl_ebpo.rewards.pool import current_pool

    shutdown()
    kw = {"processes": processes, "timeout": timeout}
    # Start-up is not throughput: processes start lazily, on concurrent demand, so ask `processes` distinct
    # questions at once until every process is up (bounded: a start-up failure must not hang the benchmark).
    deadline = time.monotonic() + 120
    round_ = 0
    while True:
        with ThreadPoolExecutor(processes) as ex:
            list(ex.map(lambda i: compute_score("bench", f"\\boxed{{{round_ * 1000 + i}}}", "-1", **kw),
                        range(processes)))
        pool = current_pool()
        if pool is None or len(pool.pids()) >= pool.size or time.monotonic() > deadline:
            break
        round_ += 1
        time.sleep(0.05)
    pids = pool.pids() if pool else []
    live = len(pids)
    before = stats()
    own0, kids0 = time.process_time(), _cpu_of(pids)
    t0 = time.perf_counter()

    def one(row):
        return compute_score("bench", row[0], row[1], **kw)

    if threads == 1:
        results = [one(r) for r in rows]
    else:
        with ThreadPoolExecutor(threads) as ex:
            results = list(ex.map(one, rows))
    wall = time.perf_counter() - t0
    pool = current_pool()
    pids_now = sorted(set(pids) | set(pool.pids() if pool else []))
    own = time.process_time() - own0
    kids = _cpu_of(pids_now) - kids0
    after = stats()
    shutdown()
    return {"wall": wall, "own": own, "kids": kids, "results": results, "live": live,
            "stats": {k: after[k] - before.get(k, 0) for k in after}}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, default=10_000, help="answers to score (default 10000)")
    ap.add_argument("--group", type=int, default=16, help="samples per prompt (default 16)")
    ap.add_argument("--unique", action="store_true", help="every answer a fresh problem (no cache hits)")
    ap.add_argument("--threads", type=int, default=1, help="calling threads (verl: a thread pool)")
    ap.add_argument("--processes", type=int, default=1, help="verifier processes (reward_kwargs.processes)")
    ap.add_argument("--workers", default=None, metavar="W,W,...",
                    help="instead: one run per W with W threads and W verifier processes (as a tool's --workers "
                         "gives them), e.g. 1,2,4; prints answers/s at each")
    ap.add_argument("--timeout", type=float, default=3.0)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)

    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    from verl_ebpo.rewards.pool import MAX_PROCESSES

    rows = make_dataset(args.n, args.group, args.unique, args.seed)
    n = len(rows)
    what = "unique" if args.unique else f"groups of {args.group}"
    if args.workers:
        try:
            sweep = [int(w) for w in args.workers.split(",")]
        except ValueError:
            ap.error(f"--workers takes comma-separated integers, got {args.workers!r}")
        if not sweep or min(sweep) < 1:
            ap.error(f"--workers takes integers >= 1, got {args.workers!r}")
        print(f"answers: {n} ({what}), timeout {args.timeout}s; verifier processes capped at {MAX_PROCESSES} "
              f"(the CPUs)")
        print("workers  verifier processes  answers/s  answers/s/core  disagreements")
        for w in sweep:
            m = measure(rows, w, w, args.timeout)
            cpu = m["own"] + m["kids"]
            bad = sum(res["acc"] != r[2] for r, res in zip(rows, m["results"]))
            print(f"{w:>7d}  {m['live']:>18d}  {n / m['wall']:>9.0f}  {n / cpu if cpu > 0 else float('nan'):>14.0f}  "
                  f"{bad:>13d}", flush=True)
        return 0

    m = measure(rows, args.threads, args.processes, args.timeout)
    wall, own, kids, results, st = m["wall"], m["own"], m["kids"], m["results"], m["stats"]
    cpu = own + kids
    disagree = [(r[0][-80:], r[1], r[2], res["verdict"]) for r, res in zip(rows, results) if res["acc"] != r[2]]
    per_core = n / cpu if cpu > 0 else float("nan")
    print(f"answers: {n}  ({what}), threads {args.threads}, "
          f"verifier processes {m['live']} (asked {args.processes}), timeout {args.timeout}s")
    print(f"wall: {wall:.2f} s  -> {n / wall:.0f} answers/s")
    print(f"CPU: {cpu:.2f} s (this process {own:.2f} s + verifiers {kids:.2f} s)  -> {per_core:.0f} answers/s/core")
    print(f"a 512x16 batch on 16 reward workers at this rate: {512 * 16 / 16 / per_core:.1f} s")
    print("verdicts:", {k: v for k, v in st.items() if v})
    print(f"disagreements with the generator's labels: {len(disagree)} ({100 * len(disagree) / n:.2f}%)")
    for d in disagree[:10]:
        print("   ", d)
    return 0


if __name__ == "__main__":
    sys.exit(main())
