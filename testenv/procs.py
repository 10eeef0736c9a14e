"""Process and port bookkeeping for the test environment (stdlib only, Linux /proc).

Every process is started in its own session (``setsid``), so it and everything it forks can be
found again by the session id, which equals the PID we recorded. Stopping never looks processes
up by name.
"""

from __future__ import annotations

import contextlib
import ipaddress
import json
import os
import signal
import socket
import subprocess
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path


def start_time(pid: int) -> int | None:
    """Kernel start time of `pid` (clock ticks since boot), or None if it is gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat[stat.rindex(")") + 2 :].split()
    return int(fields[19])


def session_of(pid: int) -> int | None:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat[stat.rindex(")") + 2 :].split()
    if fields[0] == "Z":
        return None
    return int(fields[3])


def session_members(sid: int) -> list[int]:
    """Live (non-zombie) processes whose session id is `sid`."""
    members = []
    for entry in os.listdir("/proc"):
        if entry.isdigit() and session_of(int(entry)) == sid:
            members.append(int(entry))
    return members


def alive(pid: int, started: int | None = None) -> bool:
    st = start_time(pid)
    if st is None or session_of(pid) is None:
        return False
    return started is None or st == started


def spawn(
    args: Sequence[str],
    log: Path,
    env: Mapping[str, str] | None = None,
    cwd: Path | None = None,
    niceness: int = 0,
) -> subprocess.Popen[bytes]:
    """Start `args` in a new session with stdout+stderr appended to `log`; with `niceness`,
    under coreutils' ``nice`` (which execs it: the PID is the program's, and every thread it
    starts inherits the priority), and its session's scheduling group at the same niceness
    (``set_group_niceness``)."""
    log.parent.mkdir(parents=True, exist_ok=True)
    argv = ["nice", "-n", str(niceness), *args] if niceness else list(args)
    with log.open("ab") as fh:
        proc = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=fh,
            stderr=subprocess.STDOUT,
            env=dict(env) if env is not None else None,
            cwd=cwd,
            start_new_session=True,
        )
    if niceness:
        set_group_niceness(proc.pid, niceness)
    return proc


def set_group_niceness(pid: int, niceness: int) -> None:
    """Give the scheduling group of `pid`'s session (Linux autogroup) `niceness`; nothing
    when the kernel has no such groups or refuses (a negative value needs root).

    With ``/proc/sys/kernel/sched_autogroup_enabled`` = 1 the kernel shares the CPU between
    sessions first, each session's group with the same weight whatever its threads'
    niceness; a thread's niceness then ranks it only within its own session. Every process
    here starts a session of its own, so a niceness alone does nothing against the other
    sessions (the Ray pods are in the kubelet's cgroups, outside these groups). Writing the
    niceness to ``/proc/PID/autogroup`` sets the group's weight (niceness -10: 9,548 against
    1,024 for 0)."""
    with contextlib.suppress(OSError):
        Path(f"/proc/{pid}/autogroup").write_text(f"{niceness}\n")


def group_niceness(pid: int) -> int | None:
    """The niceness of `pid`'s scheduling group (``/autogroup-123 nice -10``); None when the
    kernel has no such groups."""
    try:
        return int(Path(f"/proc/{pid}/autogroup").read_text().split()[-1])
    except (OSError, ValueError, IndexError):
        return None


def stop_session(pid: int, started: int | None, grace: float = 10.0) -> None:
    """SIGTERM the recorded leader, wait up to `grace`, then SIGKILL what is left in its session.

    `started` guards against PID reuse: if a process with that PID but another start time is
    running, it is not ours and nothing is signalled. (While any member of a session lives, Linux
    does not hand out its session id as a new PID, so the members of a gone leader are ours.)
    """
    if start_time(pid) is not None and not alive(pid, started) and session_of(pid) is not None:
        return  # PID reused by a process that is not ours
    first = [pid] if alive(pid, started) else session_members(pid)
    for target in first:
        with contextlib.suppress(ProcessLookupError):
            os.kill(target, signal.SIGTERM)
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline and session_members(pid):
        _reap(pid)
        time.sleep(0.2)
    for member in session_members(pid):
        with contextlib.suppress(ProcessLookupError):
            os.kill(member, signal.SIGKILL)
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and session_members(pid):
        _reap(pid)
        time.sleep(0.1)
    _reap(pid)


def _reap(pid: int) -> None:
    with contextlib.suppress(ChildProcessError, OSError):
        os.waitpid(pid, os.WNOHANG)


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def _decode(hex_ip: str) -> str:
    raw = bytes.fromhex(hex_ip)
    if len(raw) == 4:
        return socket.inet_ntoa(raw[::-1])
    # /proc/net/tcp6: four little-endian 32-bit words
    words = b"".join(raw[i : i + 4][::-1] for i in range(0, 16, 4))
    addr = ipaddress.IPv6Address(words)
    if addr.ipv4_mapped is not None:
        return str(addr.ipv4_mapped)
    return "0.0.0.0" if addr.is_unspecified else str(addr)


def listening_sockets() -> list[tuple[str, int]]:
    """(ip, port) of every TCP socket in LISTEN state (IPv6 any/mapped shown as IPv4)."""
    out: list[tuple[str, int]] = []
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            parts = line.split()
            if len(parts) < 4 or parts[3] != "0A":
                continue
            hex_ip, hex_port = parts[1].split(":")
            out.append((_decode(hex_ip), int(hex_port, 16)))
    return out


def leftover_listeners(
    ports: Iterable[int], networks: Iterable[str] = ("127.1.0.0/16",)
) -> list[tuple[str, int]]:
    """Listening sockets on one of `ports` (127.0.0.1/0.0.0.0) or on an address in `networks`."""
    wanted = set(ports)
    nets = [ipaddress.ip_network(n) for n in networks]
    found = []
    for ip, port in listening_sockets():
        addr = ipaddress.ip_address(ip)
        if (port in wanted and ip in ("127.0.0.1", "0.0.0.0")) or any(addr in n for n in nets):
            found.append((ip, port))
    return found


CLAIMS = Path(os.environ.get("GITRAY_TESTENV_CLAIMS", "/tmp/gitray-testenv-claims"))


def claim(kind: str, candidates: Iterable[int], owner: dict[str, object],
          is_stale: Callable[[dict[str, object]], bool]) -> int:
    """Atomically claim the first free value among `candidates` for `owner` (machine-wide).

    Several environments may run at once on one machine (developers, CI, a dedicated up/down
    test), so pod networks and Ray port blocks are handed out through O_EXCL files in
    ``/tmp/gitray-testenv-claims/<kind>/<value>.json``; a claim whose owner is gone is reused.
    """
    folder = CLAIMS / kind
    folder.mkdir(parents=True, exist_ok=True)
    for value in candidates:
        path = folder / f"{value}.json"
        for _attempt in range(2):
            try:
                fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
            except FileExistsError:
                try:
                    data = json.loads(path.read_text())
                    age = time.time() - path.stat().st_mtime
                except (OSError, ValueError):
                    break
                if age > 30 and is_stale(data):
                    path.unlink(missing_ok=True)
                    continue
                break
            with os.fdopen(fd, "w") as fh:
                json.dump(owner, fh)
            return value
    raise RuntimeError(f"no free {kind} claim left in {CLAIMS / kind}")


def release(kind: str, value: int) -> None:
    (CLAIMS / kind / f"{value}.json").unlink(missing_ok=True)


def owner_gone(data: dict[str, object]) -> bool:
    """Staleness test for claims owned by a process: {"pid": ..., "started": ...}."""
    pid, started = data.get("pid"), data.get("started")
    return not (isinstance(pid, int) and alive(pid, started if isinstance(started, int) else None))
