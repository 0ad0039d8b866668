"""Where preflight finds a model's config.json: a local folder, the Hugging Face cache, the shapes shipped for the
recipes' models (model_shapes.json), then the Hub itself within a bounded time. verl-free."""

from __future__ import annotations

import json
import os
import re
import threading
from dataclasses import dataclass
from importlib import resources
from typing import Optional

HUB_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*/[A-Za-z0-9][A-Za-z0-9._-]*$")


@dataclass(frozen=True)
class Found:
    """`config` (None when not found), where it came from, and `fail`: a file the run will read and cannot (a local
    path that does not exist, a config.json that is not a JSON object or cannot be read)."""

    config: Optional[dict]
    where: str
    fail: bool = False


def shipped_shapes() -> dict:
    """The recipes' models' config.json values: {hub id: {key: value}}."""
    text = resources.files("verl_ebpo.tools.preflight").joinpath("model_shapes.json").read_text(encoding="utf-8")
    return {k: v for k, v in json.loads(text).items() if not k.startswith("_")}


def _read(file: str) -> Found:
    try:
        with open(file, encoding="utf-8") as fh:
            data = json.load(fh)
    except (OSError, ValueError) as exc:
        return Found(None, f"{file}: not readable JSON ({exc})", fail=True)
    if not isinstance(data, dict):
        return Found(None, f"{file}: not a JSON object", fail=True)
    return Found(data, file)


def _cached(repo: str) -> Optional[str]:
    try:
        from huggingface_hub import try_to_load_from_cache

        hit = try_to_load_from_cache(repo, "config.json")
        return hit if isinstance(hit, str) else None
    except Exception:  # noqa: BLE001 - not an HF id, no huggingface_hub: not cached
        return None


def hub_timeout() -> float:
    from verl_ebpo.tools import env  # VERL_EBPO_HUB_TIMEOUT_S, [0, 120]; a refused value names the variable

    return env.read("VERL_EBPO_HUB_TIMEOUT_S")


def _hub_download(repo: str, timeout: float) -> Optional[str]:
    """config.json of `repo` from the Hub, or None when the Hub does not answer within `timeout` seconds (the
    download runs in a daemon thread; a hung connection is left behind, never waited for)."""
    if timeout <= 0 or os.environ.get("HF_HUB_OFFLINE", "0") not in ("", "0", "false", "False"):
        return None
    out: dict = {}

    def fetch():
        try:
            from huggingface_hub import hf_hub_download

            out["file"] = hf_hub_download(repo, "config.json", etag_timeout=timeout)
        except Exception as exc:  # noqa: BLE001 - no network, gated model, unknown id
            out["error"] = exc

    worker = threading.Thread(target=fetch, daemon=True)
    worker.start()
    worker.join(timeout)
    return out.get("file")


def find_config(path: str, working_dir: str) -> Found:
    """`actor_rollout_ref.model.path` -> its config.json. A path that looks local (absolute, ./, ~, or an existing
    relative folder) and does not exist, or a config.json it cannot read, is `fail`; an `org/name` id is looked up
    in the HF cache, then in the shipped shapes, then on the Hub (at most `hub_timeout()` seconds)."""
    raw, local = path.removeprefix("file://"), os.path.join(working_dir, os.path.expanduser(path.removeprefix("file://")))
    if os.path.isdir(local):
        file = os.path.join(local, "config.json")
        return _read(file) if os.path.isfile(file) else Found(None, f"{local}: a folder without config.json", fail=True)
    if not HUB_ID.match(raw) or raw.startswith((".", "~")):
        return Found(None, f"{local} does not exist (a local path; an HF id is written org/name)", fail=True)
    hit = _cached(raw)
    if hit:
        return _read(hit)
    shipped = shipped_shapes().get(raw)
    if shipped is not None:
        return Found(dict(shipped), f"{raw}: the shape shipped with verl_ebpo (not in the HF cache)")
    file = _hub_download(raw, hub_timeout())
    if file:
        return _read(file)
    return Found(None, f"{raw}: no config.json (not a local folder, not in the HF cache, no shipped shape, the Hub "
                       f"did not answer within {hub_timeout():g} s)")
