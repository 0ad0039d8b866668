"""A local Ray cluster of its own for CPU runs of verl (`ray_cluster`), and stopping a process group.

Runs join a cluster one at a time: verl 0.9.1's TransferQueue controller is a single named actor per cluster
(`TransferQueueController` in namespace `transfer_queue`), so two runs at once would share it and mix their data;
runs at once need a cluster each (the demo's lanes)."""

from __future__ import annotations

import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from contextlib import contextmanager
from typing import Iterator

from verl_ebpo.tools.cpu.overrides import cpu_env

SHARED_RAY_PREFIX = "verl_ebpo_ray_"  # temp dir of a `ray_cluster`


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _kill_group(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=15)
    except ProcessLookupError:
        pass


@contextmanager
def ray_cluster(num_cpus: int = 16, num_gpus: int = 1, timeout_s: float = 180) -> Iterator[tuple[str, dict]]:
    """Start one local Ray cluster (`ray start --head --block`: its own process group, free ports, a private temp
    dir, its own authentication token, no prestarted workers); yields `(address, auth_env)`, the variables a process
    needs to join it (`CPURun(ray_address=address, ray_env=auth_env)`). It is stopped when the block ends, also on
    error. This process's environment is not changed, so several clusters can run at once."""
    ray_cli = shutil.which("ray", path=os.path.dirname(sys.executable)) or shutil.which("ray")
    if ray_cli is None:
        raise RuntimeError("ray_cluster: the `ray` command is not installed next to this Python")
    auth = {"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": secrets.token_hex(32)}
    port = _free_port()
    # A private temp dir: `ray start` records its address in <temp dir>/ray_current_cluster, and a plain
    # `ray.init()` elsewhere on the machine (verl's default) would try to join whatever /tmp/ray's copy names.
    temp_dir = tempfile.mkdtemp(prefix=SHARED_RAY_PREFIX)
    command = [
        ray_cli, "start", "--head", "--block", f"--port={port}", "--node-ip-address=127.0.0.1", f"--temp-dir={temp_dir}",
        f"--num-cpus={num_cpus}", f"--num-gpus={num_gpus}", "--include-dashboard=false", "--disable-usage-stats",
        f"--ray-client-server-port={_free_port()}", f"--dashboard-agent-listen-port={_free_port()}",
    ]
    proc = subprocess.Popen(command, env={**cpu_env(), **auth}, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, start_new_session=True)
    try:
        output: list[str] = []
        ready = threading.Event()

        def read() -> None:
            for line in proc.stdout:
                output.append(line)
                if "Ray runtime started" in line:
                    ready.set()

        threading.Thread(target=read, daemon=True).start()
        deadline = time.time() + timeout_s
        while not ready.wait(0.5):
            if proc.poll() is not None or time.time() > deadline:
                raise RuntimeError("ray_cluster: `ray start` failed:\n" + "".join(output[-30:]))
        yield f"127.0.0.1:{port}", dict(auth)
    finally:
        _kill_group(proc)
        shutil.rmtree(temp_dir, ignore_errors=True)
