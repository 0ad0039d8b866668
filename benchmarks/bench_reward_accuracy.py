"""Agreement of `verl_ebpo.rewards.compute_score` with the labels of the regression cases, by answer form.

    python benchmarks/bench_reward_accuracy.py              # this checkout's reward
    PYTHONPATH=/other/checkout python benchmarks/bench_reward_accuracy.py   # another version's, same cases
    python benchmarks/bench_reward_accuracy.py --show       # also list every disagreement

The cases are tests/reward_cases/cases.py (drawn from public graders' tests; each names its source).
Printed: per answer form (boxed, answer_line, multi_box, none) and per tag (hedged, prefix, thousands): cases,
agreement with the labels, wrong answers accepted, right answers rejected; then the same overall. The reward
is imported from whatever `verl_ebpo` is first on the import path (printed), so two versions can be measured
on the same cases.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import sys
from collections import defaultdict
from concurrent.futures import ThreadPoolExecutor

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def load_cases() -> list[dict]:
    path = os.path.join(ROOT, "tests", "reward_cases", "cases.py")
    spec = importlib.util.spec_from_file_location("reward_cases", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.cases()


def score_cases(cases: list[dict], threads: int = 4, processes: int = 2) -> list[dict]:
    """Each case with `got` (bool), `verdict` and `pred` filled in."""
    from verl_ebpo.rewards import compute_score

    def one(case):
        out = compute_score("regression", case["solution"], case["ground_truth"], processes=processes)
        return {**case, "got": bool(out["acc"]), "verdict": out["verdict"], "pred": out["pred"]}

    with ThreadPoolExecutor(threads) as ex:
        return list(ex.map(one, cases))


def table(results: list[dict]) -> str:
    groups: dict = defaultdict(list)
    for r in results:
        groups[("form", r["form"])].append(r)
        if r["tag"]:
            groups[("tag", r["tag"])].append(r)
        groups[("all", "all")].append(r)
    order = [("form", f) for f in ("boxed", "answer_line", "multi_box", "none")]
    order += [("tag", t) for t in ("hedged", "prefix", "thousands")] + [("all", "all")]
    lines = ["| answers | cases | agreement | wrong accepted | right rejected |", "|---|---:|---:|---:|---:|"]
    for key in order:
        rows = groups.get(key)
        if not rows:
            continue
        agree = sum(r["got"] == r["label"] for r in rows)
        fa = sum(r["got"] and not r["label"] for r in rows)
        fr = sum(r["label"] and not r["got"] for r in rows)
        name = key[1] if key[0] == "form" else (f"tag: {key[1]}" if key[0] == "tag" else "**all**")
        lines.append(f"| {name} | {len(rows)} | {100 * agree / len(rows):.1f}% | {fa} | {fr} |")
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--show", action="store_true", help="list every disagreement")
    ap.add_argument("--threads", type=int, default=4)
    ap.add_argument("--processes", type=int, default=2)
    args = ap.parse_args(argv)

    if ROOT not in sys.path and not os.environ.get("PYTHONPATH"):
        sys.path.insert(0, ROOT)
    import verl_ebpo
    from verl_ebpo.rewards import shutdown

    cases = load_cases()
    try:
        results = score_cases(cases, args.threads, args.processes)
    finally:
        shutdown()
    print(f"reward: {os.path.dirname(verl_ebpo.__file__)}  cases: {len(cases)}")
    print(table(results))
    if args.show:
        for r in results:
            if r["got"] != r["label"]:
                print(f"  {r['id']} [{r['tag'] or '-'}] label={r['label']} verdict={r['verdict']} "
                      f"gt={r['ground_truth']!r} pred={r['pred']!r}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
