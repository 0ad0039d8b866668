#!/usr/bin/env python3
"""Prepare the paper's training and evaluation data as verl RL parquet files, with the DAPO prompt.

    python recipes/data/prepare_data.py --out-dir ~/data/verl_ebpo
    python recipes/data/prepare_data.py --out-dir /tmp/d --source dapo_math=./dapo.parquet --only dapo_math

Writes, into --out-dir:

| file                       | source (HuggingFace dataset id, config, split)         | rows     |
|----------------------------|--------------------------------------------------------|----------|
| dapo_math_17k.parquet      | BytedTsinghua-SIA/DAPO-Math-17k, train, deduplicated   | training |
| math500.parquet            | HuggingFaceH4/MATH-500, test                           | 500      |
| aime24.parquet             | HuggingFaceH4/aime_2024, train                         | 30       |
| aime25.parquet             | math-ai/aime25, test                                   | 30       |
| amc23.parquet              | math-ai/amc23, test                                    | 40       |
| olympiadbench.parquet      | Hothan/OlympiadBench, OE_TO_maths_en_COMP, train       | 675      |
| dapo_math_holdout.parquet  | --holdout N problems taken out of the training set     | N        |
| manifest.json              | sources, row counts, duplicates removed, sha256 of every file |   |

Each row is verl's RL format: `prompt` = one user message with the DAPO-Math prompt
(`PROMPT_TEMPLATE`, ending in the instruction to write `Answer: ...` on the last line), `data_source`,
`ability`, `reward_model = {style, ground_truth}`, `extra_info = {index, split, problem, source_id}`.
The training prompts of DAPO-Math-17k already carry that template; the problem is cut out of it and
wrapped again, so training and evaluation prompts are built by the same code.

Deduplication: DAPO-Math-17k repeats each problem many times; rows whose problem text is equal after
whitespace normalisation are kept once (the first), and rows whose duplicates disagree on the answer
are counted in the manifest (`answer_conflicts`; the first answer is kept).

--source NAME=PATH reads a local parquet/json/jsonl/csv file, a folder of such files, or a folder
written by `datasets.Dataset.save_to_disk` instead of the Hub (no network needed).

All files of one call are written as one unit: every source is loaded and converted in memory first, then each
file (the manifest last) is written to a temporary file beside it and all are renamed into place. Any failure
before the renames (a bad row, an unreadable or empty source, no network, a full disk) leaves the previous files
and manifest as they were. Outputs are never written over a --source input, inside a --source folder (--out-dir
may not be one, or lie inside one: refused before anything is created) or over a non-regular file. Every error
is one line on stderr, exit code 2.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import math
import os
import random
import re
import stat
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Optional

from verl_ebpo.tools.cli import one_line
from verl_ebpo.tools.files import OutputPathError, atomic_output, check_output_path

PROMPT_TEMPLATE = (
    "Solve the following math problem step by step. The last line of your response should be of the form "
    "Answer: $Answer (without quotes) where $Answer is the answer to the problem.\n\n"
    "{problem}\n\n"
    'Remember to put your answer on its own line after "Answer:".'
)


@dataclass(frozen=True)
class Source:
    name: str
    hf_id: str
    config: Optional[str]
    split: str
    out_file: str
    data_source: str
    kind: str  # "train" | "test"


SOURCES = {
    s.name: s
    for s in (
        # name, HuggingFace id, config, split, output file, data_source, kind
        Source("dapo_math", "BytedTsinghua-SIA/DAPO-Math-17k", None, "train", "dapo_math_17k.parquet",
               "math_dapo", "train"),
        Source("math500", "HuggingFaceH4/MATH-500", None, "test", "math500.parquet", "math500", "test"),
        Source("aime24", "HuggingFaceH4/aime_2024", None, "train", "aime24.parquet", "aime24", "test"),
        Source("aime25", "math-ai/aime25", None, "test", "aime25.parquet", "aime25", "test"),
        Source("amc23", "math-ai/amc23", None, "test", "amc23.parquet", "amc23", "test"),
        Source("olympiadbench", "Hothan/OlympiadBench", "OE_TO_maths_en_COMP", "train", "olympiadbench.parquet",
               "olympiadbench", "test"),
    )
}
HOLDOUT_FILE = "dapo_math_holdout.parquet"
MANIFEST_FILE = "manifest.json"
PROBLEM_KEYS = ("problem", "question", "Problem", "Question", "prompt")
ANSWER_KEYS = ("answer", "final_answer", "Answer", "expected_answer", "ground_truth", "solution")
ID_KEYS = ("unique_id", "id", "ID", "problem_idx", "index")


class DataError(ValueError):
    """A source row or file that cannot be turned into a training/evaluation row."""


# ------------------------------------------------------------------------------------------------
# loading


def load_rows(source: Source, local: Optional[str]):
    """Rows of `source` (a `datasets.Dataset`: iterating gives dicts), from `local` (file or folder) or the
    HuggingFace Hub; and where they came from. Anything `datasets` cannot read is a one-line DataError."""
    import datasets

    where = f"--source {source.name}={local}" if local is not None else f"{source.name} (Hub: {source.hf_id})"
    verbosity = datasets.logging.get_verbosity()
    datasets.logging.set_verbosity(datasets.logging.CRITICAL)  # a failure is reported once, below, in one line
    if local is not None:
        datasets.disable_progress_bars()  # a local file converts in moments; keep the bars for Hub downloads
    try:
        return _load_rows(source, local)
    except DataError:
        raise
    except Exception as e:  # noqa: BLE001 - datasets/pyarrow/fsspec raise many types; all mean "cannot read"
        root = _root_cause(e)
        hint = f"; offline, give a local copy: --source {source.name}=PATH" if local is None else ""
        raise DataError(f"{where}: cannot read it ({type(root).__name__}: {one_line(root)[:300]}){hint}") from None
    finally:
        datasets.logging.set_verbosity(verbosity)
        datasets.enable_progress_bars()


def _root_cause(e: BaseException) -> BaseException:
    """The innermost explicitly chained exception (datasets wraps the reader's error in DatasetGenerationError
    `from` it); implicit contexts are left alone (they are often a fallback reader's unrelated complaint)."""
    seen = set()
    while e.__cause__ is not None and id(e) not in seen:
        seen.add(id(e))
        e = e.__cause__
    return e


def _load_rows(source: Source, local: Optional[str]):
    import datasets

    if local is None:
        ds = datasets.load_dataset(source.hf_id, source.config, split=source.split)
        origin = f"hf:{source.hf_id}" + (f"/{source.config}" if source.config else "") + f"[{source.split}]"
        return ds, origin
    path = Path(local).expanduser()
    if not path.exists():
        raise DataError(f"--source {source.name}={local}: no such file or folder")
    if path.is_dir() and any((path / f).exists() for f in ("dataset_info.json", "state.json", "dataset_dict.json")):
        ds = datasets.load_from_disk(str(path))
        if isinstance(ds, datasets.DatasetDict):
            split = source.split if source.split in ds else next(iter(ds))
            ds = ds[split]
        return ds, f"local:{path}"
    if not path.is_dir() and not path.is_file():
        raise DataError(f"--source {source.name}={local}: not a regular file or folder")
    files = sorted(p for p in path.iterdir() if p.is_file()) if path.is_dir() else [path]
    for f in files:
        if _format_of(f) and f.stat().st_size == 0:
            raise DataError(f"--source {source.name}={local}: {f} is empty")
        if _format_of(f) == "parquet":
            import pyarrow.parquet as pq

            try:
                n = pq.ParquetFile(f).metadata.num_rows
            except Exception as e:  # noqa: BLE001 - not a parquet file
                raise DataError(f"--source {source.name}={local}: {f} is not a parquet file ({one_line(e)[:200]})") from None
            if n == 0:
                raise DataError(f"--source {source.name}={local}: {f} has no rows")
    by_format: dict[str, list[str]] = {}
    for f in files:
        fmt = _format_of(f)
        if fmt:
            by_format.setdefault(fmt, []).append(str(f))
    if len(by_format) != 1:
        raise DataError(
            f"--source {source.name}={local}: expected parquet, json, jsonl or csv file(s) of one format, "
            f"found {sorted(by_format) or 'none'}"
        )
    (fmt, data_files), = by_format.items()
    ds = datasets.load_dataset(fmt, data_files=data_files, split="train")
    return ds, f"local:{path}"


def _format_of(path: Path) -> Optional[str]:
    suffix = path.suffix.lower()
    return {".parquet": "parquet", ".json": "json", ".jsonl": "json", ".csv": "csv"}.get(suffix)


# ------------------------------------------------------------------------------------------------
# one row


def normalise_space(text: str) -> str:
    return re.sub(r"\s+", " ", text).strip()


_TEMPLATE_HEAD = re.compile(
    r"^\s*Solve the following math problem step by step\..*?where \$Answer is the answer to the problem\.\s*", re.DOTALL
)
_TEMPLATE_TAIL = re.compile(r"\s*Remember to put your answer on its own line after \"Answer:\"\.?\s*$")


def strip_template(text: str) -> str:
    """The problem inside a DAPO-Math prompt (the text itself, stripped, if it is not one)."""
    return _TEMPLATE_TAIL.sub("", _TEMPLATE_HEAD.sub("", text, count=1), count=1).strip()


def _first(row: dict, keys: Iterable[str]) -> tuple[Optional[str], Any]:
    for k in keys:
        if k in row and row[k] is not None and not (isinstance(row[k], str) and not row[k].strip()):
            return k, row[k]
    return None, None


def problem_of(row: dict) -> str:
    key, value = _first(row, PROBLEM_KEYS)
    if key is None:
        raise DataError(f"row has no problem text (looked for {list(PROBLEM_KEYS)}); fields: {sorted(row)}")
    if isinstance(value, (list, tuple)):  # chat messages
        users = [m.get("content", "") for m in value if isinstance(m, dict) and m.get("role") == "user"]
        if not users:
            raise DataError(f"row's {key!r} has no user message: {value!r:.200}")
        value = users[-1]
    if not isinstance(value, str):
        raise DataError(f"row's {key!r} is not text: {value!r:.200}")
    problem = strip_template(value)
    if not problem:
        raise DataError(f"row's {key!r} is empty after removing the prompt template")
    if "Answer: $Answer" in problem or "Remember to put your answer on its own line" in problem:
        # a prompt template in a wording this script does not know: wrapping it again would nest two
        raise DataError(f"row's {key!r} holds a prompt template this script does not recognise: {value!r:.300}")
    return problem


def answer_of(row: dict) -> str:
    rm = row.get("reward_model")
    if isinstance(rm, dict) and rm.get("ground_truth") not in (None, ""):
        value = rm["ground_truth"]
    else:
        key, value = _first(row, ANSWER_KEYS[:-1])
        if key is None:
            raise DataError(f"row has no answer (looked for reward_model.ground_truth, {list(ANSWER_KEYS[:-1])}); "
                            f"fields: {sorted(row)}")
    return answer_text(value)


def answer_text(value: Any) -> str:
    """A ground truth as one string: numbers without a spurious '.0', lists joined (all parts required),
    surrounding `$` removed."""
    if isinstance(value, (list, tuple)):
        parts = [answer_text(v) for v in value]
        if not parts:
            raise DataError("empty answer list")
        return ", ".join(parts)
    if isinstance(value, bool):
        raise DataError(f"answer is a boolean: {value!r}")
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            raise DataError(f"answer is not finite: {value!r}")
        return str(int(value)) if value.is_integer() else repr(value)
    if not isinstance(value, str):
        raise DataError(f"answer is neither text nor a number: {value!r:.200}")
    text = value.strip()
    while len(text) >= 2 and text.startswith("$") and text.endswith("$"):
        text = text[1:-1].strip()
    if not text:
        raise DataError("answer is empty")
    return text


def source_id_of(row: dict, index: int) -> str:
    info = row.get("extra_info")
    if isinstance(info, dict) and info.get("index") is not None:
        return str(info["index"])
    key, value = _first(row, ID_KEYS)
    return str(value) if key is not None else str(index)


def rl_row(problem: str, answer: str, data_source: str, split: str, index: int, source_id: str) -> dict:
    return {
        "data_source": data_source,
        "prompt": [{"role": "user", "content": PROMPT_TEMPLATE.format(problem=problem)}],
        "ability": "math",
        "reward_model": {"style": "rule", "ground_truth": answer},
        "extra_info": {"index": index, "split": split, "problem": problem, "source_id": source_id},
    }


# ------------------------------------------------------------------------------------------------
# one source


def convert(source: Source, rows: Iterable[dict], dedup: bool) -> tuple[list[dict], dict]:
    """verl rows for one source, and its counts for the manifest."""
    seen: dict[str, str] = {}
    out: list[dict] = []
    duplicates = conflicts = rows_in = 0
    for i, row in enumerate(rows):
        rows_in += 1
        if not isinstance(row, dict):
            raise DataError(f"{source.name}: row {i}: expected a record with named fields, got {row!r:.100}")
        try:
            problem, answer = problem_of(row), answer_of(row)
        except DataError as e:
            raise DataError(f"{source.name}: row {i}: {e}") from None
        key = normalise_space(problem)
        if key in seen:
            duplicates += 1
            conflicts += seen[key] != answer
            if dedup:
                continue
        else:
            seen[key] = answer
        out.append(rl_row(problem, answer, source.data_source, source.kind, len(out), source_id_of(row, i)))
    if not out:
        raise DataError(f"{source.name}: the source has no rows")
    counts = {"rows_in": rows_in, "rows_out": len(out), "duplicates": duplicates, "answer_conflicts": conflicts}
    return out, counts


def split_holdout(rows: list[dict], n: int, seed: int) -> tuple[list[dict], list[dict]]:
    """(train, holdout): n rows drawn with `seed`, both re-indexed, original order kept."""
    if n <= 0:
        return rows, []
    if n >= len(rows):
        raise DataError(f"--holdout {n} leaves no training rows (the training set has {len(rows)})")
    picked = set(random.Random(seed).sample(range(len(rows)), n))
    train = [r for i, r in enumerate(rows) if i not in picked]
    hold = [r for i, r in enumerate(rows) if i in picked]
    for split, part in (("train", train), ("val", hold)):
        for j, r in enumerate(part):
            r["extra_info"] = {**r["extra_info"], "index": j, "split": split}
    return train, hold


def read_manifest(path: Path) -> dict:
    """The existing manifest (empty when there is none); a corrupt one is a DataError (never silently dropped:
    it describes files this call may not rewrite)."""
    if not os.path.lexists(path):
        return {}
    try:
        st = os.stat(path)
    except OSError as e:
        raise DataError(f"{path}: {e.strerror or e}") from None
    if not stat.S_ISREG(st.st_mode):
        raise DataError(f"{path} is not a regular file; move it away")
    try:
        manifest = json.loads(path.read_text(encoding="utf-8"))
    except (ValueError, RecursionError) as e:
        raise DataError(f"{path} is not valid JSON ({one_line(e)[:200]}); move it away and rerun with all sources") from None
    if not isinstance(manifest, dict) or not isinstance(manifest.get("files", {}), dict):
        raise DataError(f"{path} is not a prepare_data manifest (no 'files' object); move it away and rerun")
    return manifest


def write_set(out_dir: Path, parts: dict[str, list[dict]], entries: dict[str, dict], manifest: dict,
              remove: list[str], inputs=()) -> None:
    """Write `parts` (file name -> rows) and the manifest (with `entries` and each file's sha256): every file to
    a temporary one first, then all renamed into place, manifest last; a failure before the renames changes nothing."""
    import pandas as pd

    files = {k: v for k, v in manifest.get("files", {}).items() if k not in remove}
    with contextlib.ExitStack() as stack:  # exits in reverse: the manifest, entered first, is renamed last
        manifest_tmp = stack.enter_context(atomic_output(out_dir / MANIFEST_FILE, inputs))
        for name, rows in parts.items():
            tmp = stack.enter_context(atomic_output(out_dir / name, inputs))
            pd.DataFrame(rows).to_parquet(tmp, index=False)
            files[name] = {**entries[name], "sha256": hashlib.sha256(Path(tmp).read_bytes()).hexdigest()}
        new_manifest = {**manifest, "files": files, "prompt_template": PROMPT_TEMPLATE}
        Path(manifest_tmp).write_text(json.dumps(new_manifest, indent=2, sort_keys=True) + "\n")
    for name in remove:
        with contextlib.suppress(FileNotFoundError):
            (out_dir / name).unlink()


# ------------------------------------------------------------------------------------------------
# main


def parse_sources(items: list[str]) -> dict[str, str]:
    out = {}
    for item in items:
        name, sep, path = item.partition("=")
        if not sep or not path:
            raise DataError(f"--source takes NAME=PATH, got {item!r}")
        if name not in SOURCES:
            raise DataError(f"--source {name!r}: unknown name; names: {sorted(SOURCES)}")
        out[name] = path
    return out


def main(argv: Optional[list[str]] = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out-dir", required=True, help="folder for the parquet files and manifest.json")
    p.add_argument("--only", default=",".join(SOURCES), help=f"comma-separated subset of {','.join(SOURCES)}")
    p.add_argument("--source", action="append", default=[], metavar="NAME=PATH",
                   help="read NAME from a local file/folder instead of the Hub (repeatable)")
    p.add_argument("--holdout", type=int, default=0,
                   help="take N DAPO-Math problems out of training into dapo_math_holdout.parquet (validation)")
    p.add_argument("--holdout-seed", type=int, default=0)
    p.add_argument("--no-dedup", action="store_true", help="keep duplicate problems (counted all the same)")
    args = p.parse_args(argv)

    try:
        names = [n.strip() for n in args.only.split(",") if n.strip()]
        if not names:
            raise DataError("--only names no source")
        unknown = sorted(set(names) - set(SOURCES))
        if unknown:
            raise DataError(f"--only: unknown name(s) {unknown}; names: {sorted(SOURCES)}")
        if args.holdout < 0:
            raise DataError(f"--holdout must be >= 0, got {args.holdout}")
        if args.holdout and "dapo_math" not in names:
            raise DataError("--holdout needs dapo_math in --only")
        local = parse_sources(args.source)
        inputs = [os.path.expanduser(local[n]) for n in names if n in local]
        out_dir = Path(args.out_dir).expanduser()
        if os.path.lexists(out_dir) and not out_dir.is_dir():
            raise DataError(f"--out-dir {out_dir} exists and is not a folder")
        # before anything is created: --out-dir may not be (inside) a --source folder (verl_ebpo.tools.files' rule)
        try:
            check_output_path(out_dir / MANIFEST_FILE, inputs)
        except OutputPathError as e:
            raise DataError(f"--out-dir {out_dir}: {e}") from None
        out_dir.mkdir(parents=True, exist_ok=True)
        manifest = read_manifest(out_dir / MANIFEST_FILE)

        # 1. every source, in memory: nothing is written until all of them have converted
        parts: dict[str, list[dict]] = {}
        entries: dict[str, dict] = {}
        remove: list[str] = []
        lines: list[str] = []
        for name in names:
            src = SOURCES[name]
            rows, origin = load_rows(src, local.get(name))
            converted, counts = convert(src, rows, dedup=not args.no_dedup)
            files = [(src.out_file, converted)]
            if name == "dapo_math":
                train, hold = split_holdout(converted, args.holdout, args.holdout_seed)
                files = [(src.out_file, train)] + ([(HOLDOUT_FILE, hold)] if hold else [])
                if not hold and (os.path.lexists(out_dir / HOLDOUT_FILE) or HOLDOUT_FILE in manifest.get("files", {})):
                    remove.append(HOLDOUT_FILE)  # a holdout file from an earlier call would no longer be held out
            for file_name, part in files:
                parts[file_name] = part
                entry = {
                    "source": origin,
                    "hf_id": src.hf_id,
                    "hf_config": src.config,
                    "hf_split": src.split,
                    "data_source": src.data_source,
                    "rows": len(part),
                }
                if file_name == HOLDOUT_FILE:
                    entry.update(holdout_of=src.out_file, holdout_seed=args.holdout_seed)
                    lines.append(f"{file_name}: {len(part)} rows taken out of {src.out_file} (seed {args.holdout_seed})")
                else:
                    entry.update(counts)
                    lines.append(f"{file_name}: {len(part)} rows ({origin}; {counts['duplicates']} duplicates"
                                 f"{' removed' if not args.no_dedup else ''}, {counts['answer_conflicts']} answer conflicts)")
                entries[file_name] = entry

        # 2. all files and the manifest, as one unit
        write_set(out_dir, parts, entries, manifest, remove, inputs)
    except (DataError, ValueError, OSError) as e:  # OutputPathError is a ValueError
        print(f"prepare_data: error: {one_line(e)}", file=sys.stderr)
        return 2
    for line in lines:
        print(line)
    print(f"wrote {len(parts)} file(s) and {MANIFEST_FILE} to {out_dir}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
