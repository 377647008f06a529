"""What a user reads and what a fault-tolerant job exposes: the documented example under three kills prints
under 100 lines besides its own, and nothing of bagua's or torchft's listens beyond loopback in a one-host
job (the lighthouse, the replicas' manager servers and gloo connections; a joiner heals over the replicas'
group, no HTTP server). torch's launcher's rendezvous stores (in the per-replica launcher processes) listen
on every interface in every torchrun job: they are left out, as docs/fault_tolerance.md says."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.process_tree import children as _children
from tests.process_tree import cmdline as _cmdline

REPO = Path(__file__).resolve().parent.parent
pytest.importorskip("torchft")


def _listening(pids: list[int]) -> dict[int, list[str]]:
    """The TCP addresses each of ``pids`` listens on (``/proc/net/tcp*``, state 0A), as ``host:port``."""
    by_inode: dict[str, str] = {}
    for table, v6 in (("/proc/net/tcp", False), ("/proc/net/tcp6", True)):
        for line in Path(table).read_text().splitlines()[1:]:
            fields = line.split()
            if fields[3] != "0A":
                continue
            address, port = fields[1].split(":")
            raw = bytes.fromhex(address)
            if v6:
                words = [raw[i:i + 4][::-1] for i in range(0, 16, 4)]
                host = ":".join(b"".join(words)[i:i + 2].hex() for i in range(0, 16, 2))
                host = {"0000:0000:0000:0000:0000:0000:0000:0000": "::",
                        "0000:0000:0000:0000:0000:0000:0000:0001": "::1"}.get(host, host)
            else:
                host = ".".join(str(b) for b in raw[::-1])
            by_inode[fields[9]] = f"{host}:{int(port, 16)}"
    out: dict[int, list[str]] = {}
    for pid in pids:
        try:
            links = [os.readlink(f"/proc/{pid}/fd/{fd}") for fd in os.listdir(f"/proc/{pid}/fd")]
        except OSError:
            continue
        inodes = [m.group(1) for link in links if (m := re.match(r"socket:\[(\d+)\]", link))]
        out[pid] = [by_inode[i] for i in inodes if i in by_inode]
    return out


def _workers(pids: list[int]) -> list[int]:
    return sorted(p for p in pids if any(a.endswith("ft_train.py") for a in _cmdline(p))
                  and not any("bagua_cli" in a or "torch.distributed.run" in a for a in _cmdline(p)))


@pytest.mark.slow
@pytest.mark.timeout(600, func_only=True)
def test_the_documented_example_under_three_kills_is_quiet_and_listens_on_loopback(tmp_path: Path) -> None:
    doc = (REPO / "docs" / "fault_tolerance.md").read_text()
    script = re.search(r"```python\n(# train\.py\n.*?)```", doc, re.S).group(1)
    assert "epochs, committed = 2, 0" in script
    (tmp_path / "ft_train.py").write_text(script.replace("epochs, committed = 2, 0", "epochs, committed = 150, 0"))
    env = {k: v for k, v in os.environ.items() if k not in ("RUST_LOG", "BAGUA_VERBOSE")}
    env.update(OMP_NUM_THREADS="1", PYTHONPATH=os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")])))
    proc = subprocess.Popen([sys.executable, "-m", "bagua_cli", "run", "--fault-tolerant", "--replicas", "2",
                             "--max-restarts", "3", "ft_train.py"], cwd=tmp_path, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, start_new_session=True)
    try:
        deadline = time.monotonic() + 120
        while len(_workers(_children(proc.pid))) < 2 and time.monotonic() < deadline:
            time.sleep(0.5)
        listening: dict[int, list[str]] = {}
        # both replicas' servers and the lighthouse up: each imports torch first (seconds under load), the
        # lighthouse's script too, so it may listen after the replicas' servers do
        while time.monotonic() < deadline:
            tree = _children(proc.pid)
            ours = [p for p in tree if not any("bagua_cli" in a for a in _cmdline(p))]  # not the launchers
            listening = _listening(ours)
            if sum(1 for p in _workers(tree) if listening.get(p)) == 2 and sum(map(len, listening.values())) >= 3:
                break
            time.sleep(0.5)
        assert sum(len(a) for a in listening.values()) >= 3, listening  # the lighthouse and the replicas' servers
        exposed = {p: [a for a in addresses if not a.startswith(("127.", "::1:"))] for p, addresses in listening.items()}
        assert not any(exposed.values()), {p: (_cmdline(p)[:3], a) for p, a in exposed.items() if a}
        kills, both_since = 0, None
        while kills < 3 and proc.poll() is None:  # a kill once both replicas have trained together for 3 s
            workers = _workers(_children(proc.pid))
            if len(workers) < 2:
                both_since = None
            elif both_since is None:
                both_since = time.monotonic()
            elif time.monotonic() - both_since >= 3:
                os.kill(workers[kills % 2], signal.SIGKILL)
                kills, both_since = kills + 1, None
            time.sleep(0.5)
        output, _ = proc.communicate(timeout=420)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert kills == 3 and proc.returncode == 0, output[-3000:]
    lines = output.splitlines()
    own = [line for line in lines if "epochs done" in line]
    assert own, output[-3000:]
    assert len(lines) - len(own) < 100, f"{len(lines) - len(own)} lines besides the script's:\n" + output[-5000:]
    chatter = [line for line in lines if "GLHF" in line or "[INFO]" in line or "torchft::" in line]
    assert not chatter, "torchft's (or torch's) own chatter reached the output:\n" + "\n".join(chatter[:10])
