"""Throughput and accuracy of `verl_ebpo.rewards.compute_score`.

    python benchmarks/bench_reward.py                 # 10k generated answers: 625 prompts x 16 samples, 1 process
    python benchmarks/bench_reward.py --unique        # every answer distinct (no cache hits: a worst case)
    python benchmarks/bench_reward.py --threads 16 --processes 2
    python benchmarks/bench_reward.py --workers 1,2,4 # answers/s at 1, 2 and 4 workers (threads = processes)
    python benchmarks/bench_reward.py --accuracy [--show]   # agreement with tests/reward_cases' labels, by form

Throughput: ground truths of 12 kinds (integers, fractions, surds, pi, intervals, tuples, sets, polynomials,
degrees, percents, matrices, choices), each with equivalent and wrong forms, inside ~1.5k characters of reasoning,
ending in `\\boxed{}` (80%), an `Answer:` line (12%) or nothing (8%). A prompt's 16 samples repeat answers, as a
policy's do. Reported: answers/s of wall time and per core (answers / CPU s of this process and its verifiers).
Accuracy: the reward is whatever `verl_ebpo` is first on the import path (printed), so versions can be compared.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import math
import os
import random
import sys
import time
from collections import defaultdict
from concurrent.futures import ThreadPoolExecutor

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _problem(rng: random.Random) -> tuple[str, list[str], list[str]]:
    """(gold, equivalent forms, wrong forms)."""
    a, b, c, n = rng.randint(2, 60), rng.randint(2, 60), rng.randint(1, 8), rng.randint(-50, 2000)
    q, s, d, letter = a + c, rng.choice([2, 3, 5, 6, 7]), rng.choice([30, 45, 60, 72, 120, 150]), rng.choice("ABCDE")
    p, r = a // math.gcd(a, q), q // math.gcd(a, q)  # p/r in lowest terms, 0 < p < r
    return rng.choice([
        (str(n), [str(n), f"{n}.0", f"{n:,}"], [str(n + 1), str(-n - 1), str(n + 10)]),
        (f"\\frac{{{p}}}{{{r}}}", [f"\\dfrac{{{p}}}{{{r}}}", f"{p}/{r}", f"\\frac{{{2 * p}}}{{{2 * r}}}"],
         [f"\\frac{{{r}}}{{{p}}}", f"\\frac{{{p + 1}}}{{{r}}}"]),
        (f"{a}\\sqrt{{{s}}}", [f"\\sqrt{{{a * a * s}}}", f"\\sqrt{s}\\cdot {a}"],
         [f"{a}\\sqrt{{{s + 1}}}", f"{a + 1}\\sqrt{s}"]),
        (f"\\frac{{{a}\\pi}}{{{q}}}", [f"{a}\\pi/{q}", f"\\frac{{{a}}}{{{q}}}\\pi"], [f"\\frac{{{a}\\pi}}{{{q + 1}}}"]),
        (f"({-a}, {b}]", [f"({-a},{b}]", f"\\left({-a}, {b}\\right]"], [f"[{-a}, {b}]", f"({-a}, {b})"]),
        (f"({a}, -{b})", [f"({a},-{b})", f"\\left( {a}, -{b} \\right)"], [f"(-{b}, {a})", f"({a}, {b})"]),
        (f"\\{{{a}, {-b}\\}}", [f"\\{{{-b}, {a}\\}}"], [f"\\{{{a}, {b}\\}}", f"{a}"]),
        (f"x^2 + {2 * a}x + {a * a}", [f"(x+{a})^2"], [f"(x-{a})^2", f"x^2 + {a * a}"]),
        (str(d), [f"{d}^\\circ", f"{d}^{{\\circ}}"], [f"{d + 10}"]),
        (f"{a}\\%", [f"{a}\\%", f"{a}"], [f"{a + 5}\\%"]),
        (f"\\begin{{pmatrix}} {a} \\\\ {-b} \\end{{pmatrix}}", [f"\\begin{{pmatrix}}{a}\\\\{-b}\\end{{pmatrix}}"],
         [f"\\begin{{pmatrix}} {-b} \\\\ {a} \\end{{pmatrix}}"]),
        (f"\\text{{({letter})}}", [letter, f"({letter})"], ["ABCDE"["ABCDE".index(letter) - 1]]),
    ])


_FILLER = ["Let me work through this carefully. ", "By the triangle inequality, $|x + y| \\le |x| + |y|$. ",
           "Substituting $t = \\frac{1}{2}$ gives $f(t) = \\sqrt{t^2 + 1}$. ", "We check $x = 0$ and $x = 1$. ",
           "Wait, the sign was wrong, so we redo it. ", "Summing $\\sum_{k=0}^{n} r^k = \\frac{1 - r^{n+1}}{1 - r}$. "]


def make_dataset(n: int, group: int, unique: bool, seed: int) -> list[tuple[str, str, bool]]:
    """[(solution_str, ground_truth, expected_correct)], in groups of `group` samples of one prompt."""
    rng, rows = random.Random(seed), []
    while len(rows) < n:
        gold, right, wrong = _problem(rng)
        for _ in range(group):
            if unique:
                gold, right, wrong = _problem(rng)
            answer, ok = rng.choice([(x, True) for x in right] + [(x, False) for x in wrong])
            text = "".join(rng.choice(_FILLER) for _ in range(rng.randint(15, 50)))
            style = rng.choices(["boxed", "answer", "none"], [80, 12, 8])[0]
            step = "An intermediate result, $\\boxed{12}$, is not the answer yet. " if rng.random() < 0.2 else ""
            end = {"boxed": f"{step}\nSo the final answer is $\\boxed{{{answer}}}$.", "answer": f"\nAnswer: ${answer}$"}
            rows.append((text + end.get(style, " and then the computation continues"), gold, ok and style != "none"))
    return rows[:n]


def _verifiers() -> list[int]:
    """The pids of this process's live verifier processes: its children (of any thread) that run the pool (Linux)."""
    pids = []
    for path in [f"/proc/self/task/{t}/children" for t in os.listdir("/proc/self/task")]:
        with contextlib.suppress(OSError), open(path) as f:
            pids += [int(p) for p in f.read().split()]
    return sorted(p for p in pids if b"rewards.pool import serve" in _read(f"/proc/{p}/cmdline"))


def _read(path: str) -> bytes:
    with contextlib.suppress(OSError), open(path, "rb") as f:
        return f.read()
    return b""


def _cpu_of(pids: list[int]) -> float:
    total = 0.0
    for pid in pids:
        try:
            with open(f"/proc/{pid}/stat") as f:
                total += sum(int(x) for x in f.read().rsplit(")", 1)[1].split()[11:13]) / os.sysconf("SC_CLK_TCK")
        except (OSError, ValueError):
            pass
    return total


def measure(rows, threads: int, processes: int, timeout: float) -> dict:
    """Score `rows` from `threads` threads with a fresh pool of `processes` verifiers, all started before the clock."""
    from verl_ebpo.rewards import compute_score, shutdown
    from verl_ebpo.rewards.pool import MAX_PROCESSES

    shutdown()
    kw, deadline, k = {"processes": processes, "timeout": timeout}, time.monotonic() + 120, 0
    while True:  # processes start on concurrent demand: ask `processes` questions at once until all are up
        with ThreadPoolExecutor(processes) as ex:
            list(ex.map(lambda i: compute_score("bench", f"\\boxed{{{k * 1000 + i}}}", "-1", **kw), range(processes)))
        k += 1
        if len(_verifiers()) >= min(processes, MAX_PROCESSES) or time.monotonic() > deadline:
            break
    pids = _verifiers()
    own0, kids0, t0 = time.process_time(), _cpu_of(pids), time.perf_counter()
    with ThreadPoolExecutor(threads) as ex:
        results = list(ex.map(lambda row: compute_score("bench", row[0], row[1], **kw), rows))
    wall = time.perf_counter() - t0
    cpu = time.process_time() - own0 + _cpu_of(sorted(set(pids) | set(_verifiers()))) - kids0
    shutdown()
    bad = [(row, out) for row, out in zip(rows, results) if out["acc"] != row[2]]
    return {"wall": wall, "cpu": cpu, "live": len(pids), "bad": bad}


def load_cases() -> list[dict]:
    spec = importlib.util.spec_from_file_location("reward_cases", os.path.join(ROOT, "tests/reward_cases/cases.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.cases()


def table(results: list[dict]) -> str:
    """Agreement with the labels by form, tag and overall; each result is a case with `got` (bool)."""
    groups = defaultdict(list)
    for r in results:
        for key in (r["form"], f"tag: {r['tag']}" if r["tag"] else None, "**all**"):
            groups[key].append(r)
    lines = ["| answers | cases | agreement | wrong accepted | right rejected |", "|---|---:|---:|---:|---:|"]
    for key in ("boxed", "answer_line", "multi_box", "none", "tag: hedged", "tag: prefix", "tag: thousands", "**all**"):
        rows = groups.get(key, [])
        agree, fa = sum(r["got"] == r["label"] for r in rows), sum(r["got"] and not r["label"] for r in rows)
        fr = sum(r["label"] and not r["got"] for r in rows)
        lines += [f"| {key} | {len(rows)} | {100 * agree / len(rows):.1f}% | {fa} | {fr} |"] if rows else []
    return "\n".join(lines)


def accuracy(args) -> None:
    import verl_ebpo
    from verl_ebpo.rewards import compute_score, shutdown

    cases = load_cases()
    kw = {"processes": args.processes, "timeout": args.timeout}
    try:
        with ThreadPoolExecutor(max(args.threads, 4)) as ex:
            outs = list(ex.map(lambda c: compute_score("regression", c["solution"], c["ground_truth"], **kw), cases))
    finally:
        shutdown()
    results = [{**c, "got": bool(o["acc"]), "verdict": o["verdict"], "pred": o["pred"]} for c, o in zip(cases, outs)]
    print(f"reward: {os.path.dirname(verl_ebpo.__file__)}  cases: {len(cases)}  timeout: {args.timeout}s")
    print(table(results))
    for r in results if args.show else []:
        if r["got"] != r["label"]:
            print(f"  {r['id']} label={r['label']} verdict={r['verdict']} gt={r['ground_truth']!r} pred={r['pred']!r}")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, default=10_000, help="answers to score")
    ap.add_argument("--group", type=int, default=16, help="samples per prompt")
    ap.add_argument("--unique", action="store_true", help="every answer a fresh problem (no cache hits)")
    ap.add_argument("--threads", type=int, default=1, help="calling threads (verl: a thread pool)")
    ap.add_argument("--processes", type=int, default=None, help="verifier processes (default 1; --accuracy: 2)")
    ap.add_argument("--workers", help="W,W,...: one run per W with W threads and W verifier processes")
    ap.add_argument("--timeout", type=float, default=3.0, help="reward_kwargs.timeout (a loaded machine needs more)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--accuracy", action="store_true", help="agreement with tests/reward_cases' labels instead")
    ap.add_argument("--show", action="store_true", help="with --accuracy: list every disagreement")
    args = ap.parse_args(argv)
    if ROOT not in sys.path and not os.environ.get("PYTHONPATH"):
        sys.path.insert(0, ROOT)
    if args.accuracy:
        args.processes = args.processes or 2
        return accuracy(args) or 0
    rows = make_dataset(args.n, args.group, args.unique, args.seed)
    what = "unique" if args.unique else f"groups of {args.group}"
    if args.workers:
        print(f"answers: {len(rows)} ({what}), timeout {args.timeout}s\nworkers  verifier processes  answers/s  "
              "answers/s/core  disagreements")
        for w in (int(w) for w in args.workers.split(",")):
            m = measure(rows, w, w, args.timeout)
            print(f"{w:>7d}  {m['live']:>18d}  {len(rows) / m['wall']:>9.0f}  {len(rows) / m['cpu']:>14.0f}  "
                  f"{len(m['bad']):>13d}", flush=True)
        return 0
    m = measure(rows, args.threads, args.processes or 1, args.timeout)
    per_core = len(rows) / m["cpu"]
    print(f"answers: {len(rows)} ({what}), threads {args.threads}, verifiers {m['live']}, timeout {args.timeout}s")
    print(f"wall: {m['wall']:.2f} s -> {len(rows) / m['wall']:.0f} answers/s; CPU: {m['cpu']:.2f} s -> {per_core:.0f} "
          f"answers/s/core; a 512x16 batch on 16 reward workers at this rate: {512 / per_core:.1f} s")
    print(f"disagreements with the generator's labels: {len(m['bad'])} ({100 * len(m['bad']) / len(rows):.2f}%)")
    for (solution, gold, label), out in m["bad"][:10]:
        print("   ", solution[-80:], gold, label, out["verdict"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
