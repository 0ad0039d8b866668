"""The README's commands stay true: the GPU command composes in verl, the set-up commands keep their markers."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

README = (Path(__file__).resolve().parents[1] / "README.md").read_text()


def _block(after: str) -> str:
    m = re.search(re.escape(after) + r".*?```bash\n(.*?)```", README, re.S)
    assert m, after
    return m.group(1)


def test_readme_is_a_landing_page():
    assert len(README.split()) <= 1500
    for marker in ("<!-- main-command -->", "<!-- /main-command -->", "<!-- test-command -->", "<!-- /test-command -->"):
        assert README.count(marker) == 1, marker
    for doc in re.findall(r"\]\((docs/[a-z_]+\.md)", README):
        assert (Path(__file__).resolve().parents[1] / doc).is_file(), doc


def test_the_gpu_command_composes_in_verl_with_every_feature():
    cmd = _block("## One complete GPU run").replace("\\\n", " ")
    args = shlex.split(os.path.expandvars(cmd))
    assert args[:3] == ["python3", "-m", "verl.trainer.main_ppo"]
    out = subprocess.run([sys.executable, *args[1:], "--cfg", "job"], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    from omegaconf import OmegaConf

    cfg = OmegaConf.create(out.stdout)
    assert cfg.algorithm.adv_estimator == "ebpo"
    assert cfg.trainer.checkpoint_callback_class == "verl_ebpo.EBPOCheckpointCallback"
    assert cfg.reward.custom_reward_function.path == "pkg://verl_ebpo.rewards"
    assert cfg.data.custom_cls.name == "TopicOrderedDataset" and cfg.data.shuffle is False
