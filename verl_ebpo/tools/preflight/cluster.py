"""What the cluster has: the GPUs of this machine (nvidia-smi) and, given a Ray address, the GPUs of
every alive Ray node (Ray's state API). verl-free; every probe bounded in time and silent when absent.

`python -m verl_ebpo.tools.preflight.cluster [--ray-address A]` prints `NODES GPUS_PER_NODE GPU_MEMORY_GB SOURCE`
(`-` where unknown): the recipes' defaults for NNODES, N_GPUS_PER_NODE and GPU_MEMORY_GB (recipes/common.sh).
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import threading
from dataclasses import dataclass
from typing import Optional

PROBE_TIMEOUT_S = 10.0  # nvidia-smi and Ray's state API each get at most this long


@dataclass(frozen=True)
class Cluster:
    """Detected resources; None where nothing was detected.

    nodes: nodes with at least one GPU (None when only this machine was seen); gpus_per_node: the fewest GPUs on
    such a node (verl places n_gpus_per_node on each of nnodes nodes); total_gpus (None: only this machine seen);
    gpu_bytes: one GPU's memory (this machine's GPUs: Ray does
    not report GPU memory); host_bytes: one node's host memory (this machine's); local_gpus: GPUs on this machine;
    source: how it was detected, for the table."""

    nodes: Optional[int] = None
    gpus_per_node: Optional[int] = None
    total_gpus: Optional[int] = None
    gpu_bytes: Optional[float] = None
    host_bytes: Optional[float] = None
    local_gpus: int = 0
    source: str = "not detected"
    unanswered: Optional[str] = None  # the Ray address that did not answer


def _nvidia_smi() -> Optional[list]:
    """Total memory of each visible GPU in bytes (nvidia-smi reports MiB), or None without nvidia-smi."""
    exe = shutil.which("nvidia-smi")
    try:
        out = subprocess.run([exe, "--query-gpu=memory.total", "--format=csv,noheader,nounits"], capture_output=True,
                             text=True, timeout=PROBE_TIMEOUT_S, check=True)
        sizes = [float(line) * 2**20 for line in out.stdout.split()]
    except (TypeError, ValueError, OSError, subprocess.SubprocessError):  # no nvidia-smi, no driver, odd output
        return None
    visible = os.environ.get("CUDA_VISIBLE_DEVICES", "").strip()
    if visible:
        sizes = [sizes[int(v)] for v in visible.split(",") if v.strip().isdigit() and int(v) < len(sizes)]
    return sizes or None


def _ray_nodes(address: str, timeout: float) -> Optional[list]:
    """The GPUs of every alive Ray node, or None when the cluster does not answer in time."""
    out: dict = {}

    def probe():
        try:
            from ray.util.state import list_nodes

            nodes = list_nodes(address=address, timeout=int(max(1, timeout)), detail=True)
            out["gpus"] = [int((n.resources_total or {}).get("GPU", 0)) for n in nodes
                           if str(n.state).upper().endswith("ALIVE")]
        except Exception:  # noqa: BLE001 - no Ray, no cluster at that address
            pass

    worker = threading.Thread(target=probe, daemon=True)
    worker.start()
    worker.join(timeout + 2)
    return out.get("gpus")


def detect(ray_address: Optional[str] = None) -> Cluster:
    """The cluster: Ray's alive nodes when `ray_address` is given and answers, else this machine's GPUs."""
    sizes, how = _nvidia_smi(), "nvidia-smi"
    gpu_bytes = min(sizes) if sizes else None
    local = len(sizes) if sizes else 0
    host = float(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))  # this machine's memory
    if ray_address:
        nodes = _ray_nodes(ray_address, PROBE_TIMEOUT_S)
        if nodes is not None:
            gpus = [g for g in nodes if g > 0]
            if gpus:
                return Cluster(len(gpus), min(gpus), sum(gpus), gpu_bytes, host, local,
                               f"Ray cluster at {ray_address}: {len(gpus)} GPU node(s), {sum(gpus)} GPUs"
                               + (f"; GPU memory from this machine ({how})" if gpu_bytes else ""))
            return Cluster(0, 0, 0, gpu_bytes, host, local, f"Ray cluster at {ray_address}: no GPU node")
        where = f"this machine: {local} GPU(s) ({how})" if sizes else "no local GPU"
        return Cluster(None, local or None, None, gpu_bytes, host, local,
                       f"Ray at {ray_address} did not answer in {PROBE_TIMEOUT_S:g} s; {where}", ray_address)
    if sizes:  # this machine only: the other nodes (if any) are not seen
        return Cluster(None, local, None, gpu_bytes, host, local, f"this machine: {local} GPU(s) ({how})")
    return Cluster(None, None, None, None, host, 0, "not detected (no local GPU; no Ray address: --ray-address or "
                   "RAY_ADDRESS)")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m verl_ebpo.tools.preflight.cluster",
                                     description="print NODES GPUS_PER_NODE GPU_MEMORY_GB SOURCE ('-' where unknown)")
    parser.add_argument("--ray-address", default=None, help="a Ray cluster's address (dashboard http://HOST:8265)")
    found = detect(parser.parse_args(argv).ray_address)
    gb = None if found.gpu_bytes is None else int(found.gpu_bytes // 1e9)
    print(*("-" if v is None else v for v in (found.nodes, found.gpus_per_node, gb)), found.source.replace(" ", "_"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
