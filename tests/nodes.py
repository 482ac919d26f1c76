"""Several "nodes" of one trainperf command on this machine: the same command line started
once per node, meeting at a loopback rendezvous (torchrun's c10d), each with its own store."""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path


def loopback_endpoint() -> str:
    """HOST:PORT of a free loopback port for a rendezvous."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"127.0.0.1:{s.getsockname()[1]}"


def run_on_nodes(args: list[str], folder: Path, nodes: int = 2, timeout: float = 180) -> list:
    """``(stdout, stderr)`` of ``trainperf ARGS --db FOLDER/nodeN.db`` on each of ``nodes``
    processes started together; each must exit 0."""
    started = [
        subprocess.Popen(
            [sys.executable, "-m", "trainperf", *args, "--db", str(folder / f"node{n}.db")],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for n in range(nodes)
    ]
    outputs = [node.communicate(timeout=timeout) for node in started]
    assert [node.returncode for node in started] == [0] * nodes, outputs
    return outputs
