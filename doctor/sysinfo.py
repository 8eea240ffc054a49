"""Read-only facts about the host: processes, listening sockets, mounts, OS identity.

psutil is used when installed; on Linux the same facts come from ``/proc`` so the
module also works on a remote host that has nothing but python3 (it is shipped
there). Nothing here writes anything; where the doctor cannot see something (the
environment or sockets of another user's process), it says so instead of guessing.
"""

from __future__ import annotations

import contextlib
import ipaddress
import os
import sys
from dataclasses import dataclass, field

_PSUTIL: list = []  # [psutil or None], once looked up


def _psutil():
    """psutil when installed, imported on first use: on Linux every fact here is read from ``/proc``
    and psutil is never needed (importing it is a tenth of a node check's CPU budget)."""
    if not _PSUTIL:
        try:
            import psutil
        except ImportError:  # pragma: no cover - remote hosts without psutil
            psutil = None
        _PSUTIL.append(psutil)
    return _PSUTIL[0]


def _psutil_installed() -> bool:
    """Whether psutil could be imported, without importing it."""
    if _PSUTIL:
        return _PSUTIL[0] is not None
    import importlib.util

    try:
        return importlib.util.find_spec("psutil") is not None
    except (ImportError, ValueError):
        return False


def _has_proc() -> bool:
    return os.path.isdir("/proc/self")

ENGINE_COMMANDS = ("vllm", "sglang", "llama-server", "ollama", "text-generation-launcher")
# Tokens that identify an engine in a process's command line (``python -m vllm.entrypoints...``).
ENGINE_TOKENS = {
    "vllm": ("vllm",),
    "sglang": ("sglang",),
    "llama.cpp": ("llama-server", "llama_cpp.server", "llama-cpp", "llama_server"),
    "llama-server": ("llama-server", "llama_cpp.server"),
    "llama-cpp-python": ("llama_cpp.server",),
    "ollama": ("ollama",),
    "tgi": ("text-generation-launcher", "text-generation-router", "text_generation_server"),
    "text-generation-inference": ("text-generation-launcher", "text-generation-router", "text_generation_server"),
}


def engine_tokens(engine: str) -> tuple[str, ...]:
    key = engine.strip().lower()
    return ENGINE_TOKENS.get(key, (key,))


@dataclass
class ProcessInfo:
    pid: int
    name: str = ""
    cmdline: list[str] = field(default_factory=list)
    create_time: float | None = None
    username: str | None = None
    error: str | None = None

    def matches(self, tokens: tuple[str, ...]) -> bool:
        hay = " ".join([self.name, *self.cmdline[:3]]).lower()
        return any(t.lower() in hay for t in tokens)


_CLK_TCK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def _boot_time() -> float:
    try:
        with open("/proc/stat") as fh:
            for line in fh:
                if line.startswith("btime "):
                    return float(line.split()[1])
    except OSError:
        pass
    return 0.0


def _read_cmdline(pid: int) -> list[str]:
    """``/proc/PID/cmdline`` split as psutil splits it: NUL-separated, or by spaces for a process that
    rewrote its title (setproctitle); ``[]`` for a zombie or a kernel thread."""
    with open(f"/proc/{pid}/cmdline", "rb") as fh:
        data = os.fsdecode(fh.read())
    if not data:
        return []
    sep = "\x00" if data.endswith("\x00") else " "
    if data.endswith(sep):
        data = data[:-1]
    argv = data.split(sep)
    if sep == "\x00" and len(argv) == 1 and " " in data:
        argv = data.split(" ")
    return argv


def _username(uid: int) -> str:
    import pwd

    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:  # a uid without a passwd entry (a container's), as psutil reports it
        return str(uid)


def _proc_process(pid: int) -> ProcessInfo:
    """What psutil's ``Process(pid)`` gives (name, cmdline, create_time, username), read from
    ``/proc`` directly: a node check looks at every process each minute, and psutil's import and
    per-process objects cost more than the reads themselves.

    Same rules as psutil: the name is ``comm``, extended to the basename of ``argv[0]`` when ``comm``
    is cut at 15 characters; the owner is the *real* uid; the start time is boot time plus the
    ``starttime`` clock ticks."""
    base = f"/proc/{pid}"
    try:
        with open(f"{base}/stat", "rb") as fh:
            stat = fh.read()
    except (FileNotFoundError, ProcessLookupError):
        return ProcessInfo(pid, error="no such process")
    except PermissionError:
        return ProcessInfo(pid, error="access denied")
    except OSError as exc:
        return ProcessInfo(pid, error=exc.strerror or str(exc))
    rpar = stat.rfind(b")")
    name = os.fsdecode(stat[stat.find(b"(") + 1:rpar])
    fields = stat[rpar + 2:].split()
    try:
        create_time = int(fields[19]) / _CLK_TCK + _boot_time()
    except (IndexError, ValueError):
        return ProcessInfo(pid, error="no such process")
    info = ProcessInfo(pid, name, [], create_time)
    try:
        info.cmdline = _read_cmdline(pid)
    except (FileNotFoundError, ProcessLookupError):
        return ProcessInfo(pid, error="no such process")
    except PermissionError:
        info.error = "command line not readable"
    except OSError as exc:
        info.error = exc.strerror or str(exc)
    if not info.cmdline and info.error is None and fields[0] == b"Z":
        return ProcessInfo(pid, error="no such process")  # a zombie: psutil raises ZombieProcess here
    if len(name) >= 15 and info.cmdline:
        extended = os.path.basename(info.cmdline[0])
        if extended.startswith(name):
            info.name = extended
    try:
        with open(f"{base}/status", "rb") as fh:
            for line in fh:
                if line.startswith(b"Uid:"):
                    info.username = _username(int(line.split()[1]))
                    break
    except (OSError, IndexError, ValueError):
        pass  # psutil leaves the owner unset too when it cannot be read
    return info


def process(pid: int) -> ProcessInfo:
    """Name, argv, start time and owner of ``pid``; ``error`` says what could not be read.

    On Linux from ``/proc`` with psutil's own rules (:func:`_proc_process`); elsewhere through psutil."""
    if _has_proc():
        return _proc_process(pid)
    psutil = _psutil()
    if psutil is None:
        return ProcessInfo(pid, error="no such process")  # no /proc and no psutil: no process table to read
    try:
        p = psutil.Process(pid)
        with p.oneshot():
            info = ProcessInfo(pid, p.name(), [], p.create_time())
            try:
                info.cmdline = p.cmdline()
            except psutil.AccessDenied:
                info.error = "command line not readable"
            with contextlib.suppress(psutil.AccessDenied, KeyError):
                info.username = p.username()
        return info
    except psutil.NoSuchProcess:
        return ProcessInfo(pid, error="no such process")
    except psutil.AccessDenied:
        return ProcessInfo(pid, error="access denied")


def process_environ(pid: int) -> dict[str, str]:
    """The live environment of ``pid`` (raises PermissionError / ProcessLookupError)."""
    psutil = _psutil()
    if psutil is not None:
        try:
            return dict(psutil.Process(pid).environ())
        except psutil.AccessDenied as exc:
            raise PermissionError(f"environment of pid {pid} not readable (another user's process)") from exc
        except psutil.NoSuchProcess as exc:
            raise ProcessLookupError(f"pid {pid} is gone") from exc
    try:
        with open(f"/proc/{pid}/environ", "rb") as fh:
            raw = fh.read()
    except FileNotFoundError as exc:
        raise ProcessLookupError(f"pid {pid} is gone") from exc
    return parse_environ(raw)


def parse_environ(raw: bytes) -> dict[str, str]:
    """A NUL-separated ``KEY=VALUE`` block, as ``/proc/N/environ`` holds it."""
    env: dict[str, str] = {}
    for item in raw.split(b"\0"):
        if b"=" in item:
            key, value = item.split(b"=", 1)
            env[key.decode("utf-8", "replace")] = value.decode("utf-8", "replace")
    return env


def all_pids() -> list[int]:
    psutil = None if _has_proc() else _psutil()
    if psutil is not None:
        return psutil.pids()
    return sorted(int(d) for d in os.listdir("/proc") if d.isdigit())


def find_processes(name: str) -> list[ProcessInfo]:
    """Processes whose name or executable basename is ``name`` (or whose argv mentions it), oldest first."""
    me = os.getpid()
    exact: list[ProcessInfo] = []
    loose: list[ProcessInfo] = []
    for pid in all_pids():
        if pid == me:
            continue
        info = process(pid)
        if info.error == "no such process":
            continue
        base = os.path.basename(info.cmdline[0]) if info.cmdline else ""
        if name in (info.name, base):
            exact.append(info)
        elif len(name) > 2 and any(name in a for a in info.cmdline[:4]) and "doctor" not in " ".join(info.cmdline[:4]):
            loose.append(info)
    found = exact or loose
    return sorted(found, key=lambda p: p.create_time or 0)


def _may_match(pid: int, tokens: tuple[str, ...]) -> bool:
    """A cheap first look (``comm`` and argv alone) that is never false for a process
    :meth:`ProcessInfo.matches` would accept: its name is ``comm`` or a basename of ``argv[0]``."""
    try:
        argv = _read_cmdline(pid)
        if not argv:
            return False
        with open(f"/proc/{pid}/comm", "rb") as fh:
            comm = os.fsdecode(fh.read()).rstrip("\n")
    except OSError:
        return True  # let the full read say what went wrong
    hay = " ".join([comm, *argv[:3]]).lower()
    return any(t.lower() in hay for t in tokens)


def engine_processes() -> list[ProcessInfo]:
    tokens = tuple(t for ts in ENGINE_TOKENS.values() for t in ts)
    proc = _has_proc()
    out = []
    for pid in all_pids():
        if proc and not _may_match(pid, tokens):
            continue
        info = process(pid)
        if info.cmdline and info.matches(tokens):
            out.append(info)
    return out


@dataclass
class Listener:
    """One listening TCP socket."""

    family: str  # "IPv4" / "IPv6"
    address: str
    port: int
    inode: int
    uid: int | None
    pids: list[int] = field(default_factory=list)
    v6only: bool | None = None

    def where(self) -> str:
        return f"[{self.address}]:{self.port}" if self.family == "IPv6" else f"{self.address}:{self.port}"


def _hex_to_addr(hexaddr: str, family: str) -> str:
    raw = bytes.fromhex(hexaddr)
    if family == "IPv4":
        return str(ipaddress.IPv4Address(raw[::-1]))
    packed = b"".join(raw[i:i + 4][::-1] for i in range(0, 16, 4))
    # written as inet_ntop writes it: ipaddress (which spares a node check importing socket) writes
    # IPv4-mapped and IPv4-compatible addresses in hex
    if packed[:10] == bytes(10) and packed[10:12] == b"\xff\xff":
        return f"::ffff:{ipaddress.IPv4Address(packed[12:])}"
    if packed[:12] == bytes(12) and packed[12:14] != bytes(2):
        return f"::{ipaddress.IPv4Address(packed[12:])}"
    return str(ipaddress.IPv6Address(packed))


def _socket_owners() -> tuple[dict[int, list[int]], int]:
    """Map socket inode -> pids from /proc/*/fd; also how many processes' fds were unreadable."""
    owners: dict[int, list[int]] = {}
    hidden = 0
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        fd_dir = f"/proc/{entry}/fd"
        try:
            fds = os.listdir(fd_dir)
        except PermissionError:
            hidden += 1
            continue
        except OSError:
            continue
        for fd in fds:
            try:
                target = os.readlink(f"{fd_dir}/{fd}")
            except OSError:
                continue
            if target.startswith("socket:["):
                owners.setdefault(int(target[8:-1]), []).append(int(entry))
    return owners, hidden


def listeners(ports: list[int] | None = None) -> tuple[list[Listener], int]:
    """Listening TCP sockets (all, or on ``ports``) with owning pids; plus a count of unreadable processes."""
    found: list[Listener] = []
    if os.path.exists("/proc/net/tcp"):
        for family, path in (("IPv4", "/proc/net/tcp"), ("IPv6", "/proc/net/tcp6")):
            try:
                with open(path) as fh:
                    next(fh, None)
                    for line in fh:
                        parts = line.split()
                        if len(parts) < 10 or parts[3] != "0A":  # 0A = TCP_LISTEN
                            continue
                        hexaddr, hexport = parts[1].split(":")
                        port = int(hexport, 16)
                        if ports is not None and port not in ports:
                            continue
                        found.append(Listener(family, _hex_to_addr(hexaddr, family), port, int(parts[9]),
                                              int(parts[7])))
            except OSError:
                continue
        if not found:
            return found, 0
        owners, hidden = _socket_owners()
        for item in found:
            item.pids = sorted(set(owners.get(item.inode, [])))
        return found, hidden
    psutil = _psutil()
    if psutil is not None:  # macOS and others: psutil's view (may need privileges)
        hidden = 0
        try:
            conns = psutil.net_connections(kind="tcp")
        except psutil.AccessDenied:
            return [], 1
        for c in conns:
            if c.status != psutil.CONN_LISTEN or not c.laddr:
                continue
            if ports is not None and c.laddr.port not in ports:
                continue
            fam = "IPv6" if c.family.name == "AF_INET6" else "IPv4"
            found.append(Listener(fam, c.laddr.ip, c.laddr.port, 0, None, [c.pid] if c.pid else []))
            hidden += 0 if c.pid else 1
        return found, hidden
    return [], 0


def mount_fstype(path: str) -> tuple[str, str] | None:
    """(filesystem type, mount point) holding ``path``, from /proc/self/mountinfo."""
    try:
        real = os.path.realpath(path)
        best: tuple[str, str] | None = None
        with open("/proc/self/mountinfo") as fh:
            for line in fh:
                left, _, right = line.partition(" - ")
                mount_point = left.split()[4].replace("\\040", " ")
                fstype = right.split()[0]
                if (real == mount_point or real.startswith(mount_point.rstrip("/") + "/")) and (
                        best is None or len(mount_point) >= len(best[1])):
                    best = (fstype, mount_point)
        return best
    except (OSError, IndexError):
        return None


def virtualization() -> list[str]:
    """What this host runs inside, best effort and cheap: hypervisor, container, WSL."""
    found: list[str] = []
    try:
        with open("/proc/cpuinfo") as fh:
            if any(line.startswith("flags") and " hypervisor" in line for line in fh):
                found.append("hypervisor")
    except OSError:
        pass
    for name in ("sys_vendor", "product_name"):
        try:
            with open(f"/sys/class/dmi/id/{name}") as fh:
                value = fh.read().strip()
            if value and any(k in value.lower() for k in ("kvm", "qemu", "vmware", "virtualbox", "xen", "microsoft",
                                                           "amazon", "google", "openstack", "hvm")):
                found.append(value)
        except OSError:
            pass
    if os.path.exists("/.dockerenv"):
        found.append("docker container")
    elif os.path.exists("/run/.containerenv"):
        found.append("podman container")
    if is_wsl():
        found.append("WSL")
    return found


def is_wsl() -> bool:
    if os.path.exists("/proc/sys/fs/binfmt_misc/WSLInterop"):
        return True
    try:
        with open("/proc/sys/kernel/osrelease") as fh:
            return "microsoft" in fh.read().lower()
    except OSError:
        return False


def os_name() -> str:
    """os-release's ``PRETTY_NAME`` (what ``distro.name(pretty=True)`` answers where it is set, without
    importing distro), else distro's guess from the other release files, else the kernel's name."""
    try:
        with open("/etc/os-release") as fh:
            for line in fh:
                if line.startswith("PRETTY_NAME="):
                    pretty = line.split("=", 1)[1].strip()
                    if len(pretty) > 1 and pretty[0] == pretty[-1] and pretty[0] in "'\"":
                        pretty = pretty[1:-1]
                    if pretty:
                        return pretty
    except OSError:
        pass
    try:
        import distro

        name = distro.name(pretty=True)
        if name:
            return name
    except ImportError:
        pass
    return " ".join(_uname()[:2])


def node_name() -> str:
    """This machine's name, as ``socket.gethostname()`` answers it (both read uname's nodename on
    POSIX), without importing socket: a node check imports nothing it does not use."""
    if hasattr(os, "uname"):
        return os.uname().nodename
    import socket

    return socket.gethostname()


def _uname() -> tuple[str, str, str]:
    """(system, release, machine) from ``os.uname()`` (what ``platform`` answers on POSIX, without
    importing it), else from platform."""
    if hasattr(os, "uname"):
        name = os.uname()
        return name.sysname, name.release, name.machine
    import platform

    return platform.system(), platform.release(), platform.machine()


def _user_name() -> str:
    """What ``getpass.getuser()`` answers (the login variables, else the password database), without
    the terminal modules getpass imports."""
    for name in ("LOGNAME", "USER", "LNAME", "USERNAME"):
        if os.environ.get(name):
            return os.environ[name]
    try:
        import pwd

        return pwd.getpwuid(os.getuid()).pw_name
    except (ImportError, KeyError, OSError):
        return str(os.getuid()) if hasattr(os, "getuid") else ""


def host_facts() -> dict:
    """The ``host`` object of a report."""
    user = _user_name()
    return {
        "hostname": node_name(),
        "os": os_name(),
        "kernel": _uname()[1],
        "arch": _uname()[2],
        "python": sys.version.split()[0],  # what platform.python_version() answers
        "python_executable": sys.executable,
        "user": user,
        "virtualization": virtualization(),
        "psutil": _psutil_installed(),
    }
