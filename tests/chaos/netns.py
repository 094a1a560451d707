"""Network namespaces for the multi-host scenarios: one server namespace and N host
namespaces, each host joined to the server by its own veth pair on 10.213.<i>.0/24.

  rq<tok>-srv   10.213.1.1, 10.213.2.1, ...   git daemon listens here
  rq<tok>-h1    10.213.1.2                     workers of host-1 run here
  rq<tok>-h2    10.213.2.2                     ...

Traffic never leaves the namespaces this module creates. A partition drops the host's
end of its veth (its pushes and fetches then fail at once with "Network is unreachable");
healing brings it back up. Everything is torn down by `down()`, also after a failure.
"""

from __future__ import annotations

import os
import secrets
import shutil
import subprocess
from dataclasses import dataclass, field

SUBNET = "10.213"


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    proc = subprocess.run(["ip", *args], capture_output=True, text=True, timeout=30)
    if check and proc.returncode != 0:
        raise RuntimeError(f"ip {' '.join(args)} failed: {proc.stderr.strip()}")
    return proc


def unavailable() -> str | None:
    """Why network namespaces cannot be used here, or None when they can."""
    if shutil.which("ip") is None:
        return "iproute2 (`ip`) is not installed"
    if os.geteuid() != 0:
        return "network namespaces need root (CAP_SYS_ADMIN and CAP_NET_ADMIN); run the suite as root to include them"
    probe = f"rqprobe{secrets.token_hex(3)}"
    proc = _ip("netns", "add", probe, check=False)
    if proc.returncode != 0:
        return f"`ip netns add` is not permitted here: {proc.stderr.strip()}"
    _ip("netns", "del", probe, check=False)
    return None


@dataclass
class Lab:
    hosts: int
    token: str = field(default_factory=lambda: secrets.token_hex(2))
    created: list[str] = field(default_factory=list)

    @property
    def server(self) -> str:
        return f"rq{self.token}-srv"

    def ns(self, index: int) -> str:
        return f"rq{self.token}-h{index}"

    def host_veth(self, index: int) -> str:
        return f"rq{self.token}h{index}"  # <= 15 characters

    def server_veth(self, index: int) -> str:
        return f"rq{self.token}s{index}"

    def server_addr(self, index: int) -> str:
        return f"{SUBNET}.{index}.1"

    def host_addr(self, index: int) -> str:
        return f"{SUBNET}.{index}.2"

    def up(self) -> Lab:
        try:
            _ip("netns", "add", self.server)
            self.created.append(self.server)
            _ip("-n", self.server, "link", "set", "lo", "up")
            for index in range(1, self.hosts + 1):
                ns, hv, sv = self.ns(index), self.host_veth(index), self.server_veth(index)
                _ip("netns", "add", ns)
                self.created.append(ns)
                _ip("-n", ns, "link", "set", "lo", "up")
                _ip("link", "add", hv, "type", "veth", "peer", "name", sv)
                _ip("link", "set", hv, "netns", ns)
                _ip("link", "set", sv, "netns", self.server)
                _ip("-n", ns, "addr", "add", f"{self.host_addr(index)}/24", "dev", hv)
                _ip("-n", self.server, "addr", "add", f"{self.server_addr(index)}/24", "dev", sv)
                _ip("-n", ns, "link", "set", hv, "up")
                _ip("-n", self.server, "link", "set", sv, "up")
        except Exception:
            self.down()
            raise
        return self

    def exec_prefix(self, ns: str) -> list[str]:
        return ["ip", "netns", "exec", ns]

    def cut(self, index: int) -> None:
        _ip("-n", self.ns(index), "link", "set", self.host_veth(index), "down")

    def heal(self, index: int) -> None:
        _ip("-n", self.ns(index), "link", "set", self.host_veth(index), "up")

    def pids_inside(self) -> list[int]:
        pids: list[int] = []
        for ns in self.created:
            proc = _ip("netns", "pids", ns, check=False)
            pids += [int(p) for p in proc.stdout.split() if p.isdigit()]
        return pids

    def down(self) -> None:
        import signal

        for pid in self.pids_inside():  # only processes inside the namespaces this lab made
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        for ns in reversed(self.created):
            _ip("netns", "del", ns, check=False)  # deleting a namespace deletes the veths inside it
        self.created.clear()
