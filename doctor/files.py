"""Looking at executables without trusting them: PATH matches, digests, shebangs, ELF headers.

Also ``bounded_run``: a trivial invocation of a program that may hang, flood its
output or wait on stdin, which must cost no more than its timeout and a fixed
amount of memory. Stdlib-only (blake3 and pyelftools are used when importable)
because this module is shipped to remote hosts.
"""

from __future__ import annotations

import os
import re
import struct
import threading
from dataclasses import dataclass, field

from execsys import proc

_READ_CHUNK = 1 << 20

# e_machine values (ELF spec) and the names uname reports for them.
ELF_MACHINES = {
    3: "x86", 8: "mips", 20: "ppc", 21: "ppc64", 22: "s390x", 40: "arm", 50: "ia64",
    62: "x86_64", 183: "aarch64", 243: "riscv64", 258: "loongarch64",
}
_UNAME_TO_MACHINE = {
    "x86_64": 62, "amd64": 62, "i386": 3, "i686": 3, "aarch64": 183, "arm64": 183,
    "armv7l": 40, "armv6l": 40, "ppc64le": 21, "ppc64": 21, "s390x": 22, "riscv64": 243,
    "loongarch64": 258, "mips": 8, "mips64": 8,
}


def host_elf_machine() -> int | None:
    return _UNAME_TO_MACHINE.get(os.uname().machine.lower())  # platform.machine()'s answer on POSIX


def which_all(name: str, path: str | None = None) -> list[str]:
    """Every executable file called ``name`` on PATH, in PATH order, duplicates (same dir) removed."""
    if os.sep in name:
        return [name] if os.path.isfile(name) and os.access(name, os.X_OK) else []
    seen: set[str] = set()
    found: list[str] = []
    for directory in (path if path is not None else os.environ.get("PATH", "")).split(os.pathsep):
        directory = directory or "."
        candidate = os.path.join(directory, name)
        key = os.path.normpath(os.path.abspath(candidate))
        if key in seen:
            continue
        seen.add(key)
        if os.path.isfile(candidate) and os.access(candidate, os.X_OK):
            found.append(candidate)
    return found


_digest_cache: dict[tuple, str] = {}
_digest_lock = threading.Lock()


def digest(path: str) -> str:
    """``blake3:<hex>`` of the file content (``sha256:<hex>`` where blake3 is not installed)."""
    st = os.stat(path)
    key = (os.path.realpath(path), st.st_size, st.st_mtime_ns)
    with _digest_lock:
        if key in _digest_cache:
            return _digest_cache[key]
    # imported here: a node check hashes nothing unless a name is shadowed or a digest pinned.
    # Remote hosts without blake3 fall back to sha256, labelled as such
    try:
        from blake3 import blake3 as hasher_type
        algorithm = "blake3"
    except ImportError:  # pragma: no cover - depends on the remote host
        from hashlib import sha256 as hasher_type  # only without blake3: importing it loads OpenSSL
        algorithm = "sha256"
    hasher = hasher_type()
    with open(path, "rb") as fh:
        while True:
            chunk = fh.read(_READ_CHUNK)
            if not chunk:
                break
            hasher.update(chunk)
    value = f"{algorithm}:{hasher.hexdigest()}"
    with _digest_lock:
        _digest_cache[key] = value
    return value


def read_head(path: str, size: int = 512) -> bytes:
    try:
        with open(path, "rb") as fh:
            return fh.read(size)
    except OSError:
        return b""


@dataclass
class Shebang:
    interpreter: str
    args: list[str] = field(default_factory=list)

    @property
    def program(self) -> str:
        """What actually gets looked up: ``python3`` for ``#!/usr/bin/env python3``."""
        if os.path.basename(self.interpreter) == "env":
            rest = [a for a in self.args if not a.startswith("-") and "=" not in a]
            return rest[0] if rest else self.interpreter
        return self.interpreter

    def text(self) -> str:
        return " ".join([self.interpreter, *self.args])


def shebang(head: bytes) -> Shebang | None:
    if not head.startswith(b"#!"):
        return None
    line = head[2:].split(b"\n", 1)[0].decode("utf-8", "replace").strip()
    if not line:
        return Shebang("")
    parts = line.split()
    return Shebang(parts[0], parts[1:])


def shebang_missing(sb: Shebang) -> str | None:
    """Why this shebang cannot start anything, or None when its interpreter is there."""
    if not sb.interpreter:
        return "empty shebang line"
    if not os.path.isabs(sb.interpreter):
        return f"interpreter {sb.interpreter!r} is not an absolute path"
    if not os.path.exists(sb.interpreter):
        return f"interpreter {sb.interpreter} does not exist"
    if not os.access(sb.interpreter, os.X_OK):
        return f"interpreter {sb.interpreter} is not executable"
    program = sb.program
    if program != sb.interpreter and not which_all(program):
        return f"{sb.interpreter} {program}: {program!r} is not on PATH"
    return None


@dataclass
class ElfInfo:
    bits: int
    machine: int
    interpreter: str | None = None
    rpath: list[str] = field(default_factory=list)
    runpath: list[str] = field(default_factory=list)
    dynamic_read: bool = False  # False when pyelftools is not available to read the dynamic section

    @property
    def machine_name(self) -> str:
        return ELF_MACHINES.get(self.machine, f"e_machine {self.machine}")


def is_elf(head: bytes) -> bool:
    return head[:4] == b"\x7fELF"


def elf_header(head: bytes) -> ElfInfo | None:
    """Class and machine from the first 20 bytes; enough to spot a binary for another architecture."""
    if len(head) < 20 or not is_elf(head):
        return None
    bits = 64 if head[4] == 2 else 32
    endian = "<" if head[5] != 2 else ">"
    (machine,) = struct.unpack(endian + "H", head[18:20])
    return ElfInfo(bits, machine)


def elf_info(path: str) -> ElfInfo | None:
    """Header plus PT_INTERP and DT_RPATH/DT_RUNPATH (read with pyelftools when installed)."""
    info = elf_header(read_head(path, 64))
    if info is None:
        return None
    try:
        from elftools.common.exceptions import ELFError
        from elftools.elf.dynamic import DynamicSection
        from elftools.elf.elffile import ELFFile
        from elftools.elf.segments import InterpSegment
    except ImportError:  # remote hosts without pyelftools
        return elf_info_stdlib(path, info)
    try:
        with open(path, "rb") as fh:
            elf = ELFFile(fh)
            for segment in elf.iter_segments():
                if isinstance(segment, InterpSegment):
                    info.interpreter = segment.get_interp_name()
            for section in elf.iter_sections():
                if isinstance(section, DynamicSection):
                    for tag in section.iter_tags():
                        # pyelftools sets .rpath/.runpath on these tags only, so ask for them by name
                        if tag.entry.d_tag == "DT_RPATH":
                            info.rpath += [p for p in getattr(tag, "rpath", "").split(":") if p]
                        elif tag.entry.d_tag == "DT_RUNPATH":
                            info.runpath += [p for p in getattr(tag, "runpath", "").split(":") if p]
        info.dynamic_read = True
    except (ELFError, OSError, ValueError, struct.error):
        pass
    return info


@dataclass
class EntryPoint:
    """A console script written by pip/installer: ``#!python`` + ``from MOD import FUNC; sys.exit(FUNC())``."""

    interpreter: str
    module: str
    function: str


_ENTRY_IMPORT = re.compile(r"^from ([\w.]+) import (\w+)\s*$", re.MULTILINE)


def entry_point(path: str) -> EntryPoint | None:
    head = read_head(path, 2048)
    sb = shebang(head)
    if sb is None or sb.args or not os.path.isabs(sb.interpreter) or "python" not in os.path.basename(sb.interpreter):
        return None
    text = head.decode("utf-8", "replace")
    match = _ENTRY_IMPORT.search(text)
    if not match or f"sys.exit({match.group(2)}())" not in text:
        return None
    return EntryPoint(sb.interpreter, match.group(1), match.group(2))


# Where a console script's entry module is, asked of the script's own interpreter: found on that
# interpreter's path without running it (importing even pip's top package costs a node check more CPU
# than the rest of the hazard), in ``pip --version``'s format. The version comes from the
# distribution's ``.dist-info`` name beside the package, else its ``__version__ = ...`` line.
# The programs below run in every interpreter a check asks, at each node check: they import
# neither re nor json (together about 12 ms of CPU on Debian's python3, a third of the probe) and
# print their answer as a Python literal.
_LOCATE = r"""
import os, sys
from importlib.machinery import PathFinder
def _norm(name, sep='_'):
    out = []
    for ch in name.lower():
        if ch not in '-_.':
            out.append(ch)
        elif not out or out[-1] != sep:
            out.append(sep)
    return ''.join(out)
def locate(module):
    parts = module.split('.')
    search, top = None, None
    for depth in range(1, len(parts) + 1):
        name = '.'.join(parts[:depth])
        spec = PathFinder.find_spec(name, search) if depth == 1 or search else None
        if spec is None:
            return 1, 'No module named ' + repr(name)
        top = top or spec
        search = spec.submodule_search_locations
    package = bool(top.submodule_search_locations)
    where = list(top.submodule_search_locations)[0] if package else os.path.dirname(top.origin or '?')
    version = '?'
    try:
        for entry in os.listdir(os.path.dirname(where) if package else where):
            stem, _, kind = entry.rpartition('.')
            if kind == 'dist-info' and '-' in stem and _norm(stem.split('-')[0]) == _norm(parts[0]):
                version = stem.split('-')[1]
                break
        else:
            import re
            with open(os.path.join(where, '__init__.py') if package else top.origin, errors='replace') as fh:
                found = re.search(r"^__version__\s*=\s*['\"]([^'\"]+)", fh.read(65536), re.M)
            version = found.group(1) if found else '?'
    except (OSError, TypeError):
        pass
    return 0, '%s %s from %s (python %d.%d)' % (parts[0], version, where, sys.version_info[0], sys.version_info[1])
"""

ENTRY_CHECK = _LOCATE + """
code, said = locate(sys.argv[1])
print(said) if code == 0 else sys.exit(said)
"""

# Everything the hazards ask one Python, in one start of it (a node check runs every 30-60 s: one
# interpreter start is a tenth of its budget): its prefixes, sys.path and the distributions on each
# entry (package-prefixes), and ``locate`` for each console-script module named on argv (their
# ``--version``). One line: a Python literal (read by :func:`described`).
PYTHON_PROBE = _LOCATE + r"""
import site
def dists(entry):
    out = {}
    try:
        names = os.listdir(entry)
    except OSError:
        return out
    for n in names:
        if n.endswith('.dist-info') or n.endswith('.egg-info'):
            stem = n.rsplit('.', 1)[0]
            parts = stem.split('-')
            name = _norm(parts[0], '-')
            out[name] = parts[1] if len(parts) > 1 else '?'
    return out
usersite = site.getusersitepackages() if hasattr(site, 'getusersitepackages') else None
print(repr({
    'executable': sys.executable, 'prefix': sys.prefix, 'base_prefix': getattr(sys, 'base_prefix', sys.prefix),
    'version': '%d.%d.%d' % sys.version_info[:3], 'path': [p for p in sys.path if p],
    'usersite': usersite, 'user_enabled': bool(site.ENABLE_USER_SITE),
    'dists': {p: dists(p) for p in sys.path if p and os.path.isdir(p)},
    'entries': {m: locate(m) for m in sys.argv[1:]},
}))
"""


def python_facts(interpreter: str, modules: list[str], timeout: float) -> Invocation:
    """One run of :data:`PYTHON_PROBE` by ``interpreter``, locating ``modules``."""
    return bounded_run([interpreter, "-c", PYTHON_PROBE, *modules], timeout, keep=4 << 20)


def described(facts: Invocation) -> dict | None:
    """The literal a :func:`python_facts` run printed (its last line), or None when it printed none."""
    import ast  # loaded already: dataclasses imports inspect, which imports ast

    try:
        info = ast.literal_eval(facts.output.strip().splitlines()[-1])
    except (ValueError, SyntaxError, IndexError, MemoryError, RecursionError, TypeError):
        return None
    return info if isinstance(info, dict) else None


def _argv_of_entry(path: str, ep: EntryPoint) -> list[str]:
    return [f"{path} (entry point {ep.module}:{ep.function}, resolved by {ep.interpreter})"]


def entry_answer(facts: Invocation, ep: EntryPoint, path: str) -> Invocation | None:
    """A console script's ``--version``, from a :func:`python_facts` run of its interpreter that
    located its entry module; None when that run did not (the entry check then runs on its own)."""
    info = described(facts) if facts.ok else None
    answer = (info or {}).get("entries", {}).get(ep.module)
    if not (isinstance(answer, (list, tuple)) and len(answer) == 2):
        return None
    code, said = answer
    return Invocation(_argv_of_entry(path, ep), returncode=int(code), output=f"{said}\n",
                      duration_s=facts.duration_s)


def version_invocation(path: str, timeout: float) -> Invocation:
    """``PATH --version``, except for pip-style console scripts: their interpreter resolves the entry module.

    Starting a console script fully (``pip --version`` imports all of pip: ~0.6 s) tells no more about
    whether it can run than its interpreter finding the entry module does; the evidence says which was done.
    """
    ep = entry_point(path)
    if ep is None or not os.path.exists(ep.interpreter):
        return bounded_run([path, "--version"], timeout)
    inv = bounded_run([ep.interpreter, "-c", ENTRY_CHECK, ep.module], timeout)
    inv.argv = _argv_of_entry(path, ep)
    return inv


_PT_LOAD, _PT_DYNAMIC, _PT_INTERP = 1, 2, 3
_DT_NULL, _DT_STRTAB, _DT_RPATH, _DT_RUNPATH = 0, 5, 15, 29


def elf_info_stdlib(path: str, info: ElfInfo | None = None) -> ElfInfo | None:
    """PT_INTERP and DT_RPATH/DT_RUNPATH with ``struct`` alone, for hosts without pyelftools.

    Reads the program headers only (what the dynamic loader itself reads): the dynamic
    string table's address is mapped to a file offset through the PT_LOAD segments.
    """
    info = info or elf_header(read_head(path, 64))
    if info is None:
        return None
    try:
        with open(path, "rb") as fh:
            ident = fh.read(64)
            end = ">" if ident[5] == 2 else "<"
            if info.bits == 64:
                phoff, = struct.unpack(end + "Q", ident[32:40])
                phentsize, phnum = struct.unpack(end + "HH", ident[54:58])
                ph_fmt, dyn_fmt = end + "IIQQQQQQ", end + "qQ"
            else:
                phoff, = struct.unpack(end + "I", ident[28:32])
                phentsize, phnum = struct.unpack(end + "HH", ident[42:46])
                ph_fmt, dyn_fmt = end + "IIIIIIII", end + "iI"
            loads: list[tuple[int, int, int]] = []  # (vaddr, offset, filesz)
            dynamic: tuple[int, int] | None = None
            for index in range(min(phnum, 256)):
                fh.seek(phoff + index * phentsize)
                raw = fh.read(struct.calcsize(ph_fmt))
                if info.bits == 64:
                    p_type, _flags, p_offset, p_vaddr, _paddr, p_filesz, _memsz, _align = struct.unpack(ph_fmt, raw)
                else:
                    p_type, p_offset, p_vaddr, _paddr, p_filesz, _memsz, _flags, _align = struct.unpack(ph_fmt, raw)
                if p_type == _PT_INTERP:
                    fh.seek(p_offset)
                    info.interpreter = fh.read(min(p_filesz, 4096)).split(b"\0", 1)[0].decode("utf-8", "replace")
                elif p_type == _PT_LOAD:
                    loads.append((p_vaddr, p_offset, p_filesz))
                elif p_type == _PT_DYNAMIC:
                    dynamic = (p_offset, p_filesz)
            if dynamic is not None:
                fh.seek(dynamic[0])
                data = fh.read(min(dynamic[1], 1 << 20))
                size = struct.calcsize(dyn_fmt)
                strtab = None
                wanted: list[tuple[int, int]] = []
                for pos in range(0, len(data) - size + 1, size):
                    tag, value = struct.unpack(dyn_fmt, data[pos:pos + size])
                    if tag == _DT_NULL:
                        break
                    if tag == _DT_STRTAB:
                        strtab = value
                    elif tag in (_DT_RPATH, _DT_RUNPATH):
                        wanted.append((tag, value))
                if strtab is not None:
                    base = next((off + strtab - va for va, off, sz in loads if va <= strtab < va + sz), None)
                    for tag, value in wanted if base is not None else []:
                        assert base is not None
                        fh.seek(base + value)
                        text = fh.read(4096).split(b"\0", 1)[0].decode("utf-8", "replace")
                        target = info.runpath if tag == _DT_RUNPATH else info.rpath
                        target += [p for p in text.split(":") if p]
        info.dynamic_read = True
    except (OSError, struct.error, ValueError):
        pass
    return info


def expand_origin(entry: str, binary: str) -> str:
    origin = os.path.dirname(os.path.realpath(binary))
    return entry.replace("${ORIGIN}", origin).replace("$ORIGIN", origin)


@dataclass
class Invocation:
    """What one bounded run of a program did."""

    argv: list[str]
    returncode: int | None = None
    output: str = ""  # first part of stdout+stderr
    timed_out: bool = False
    flooded: bool = False
    error: str | None = None
    duration_s: float = 0.0
    timeout_s: float | None = None  # the limit it ran under: what a timed-out run is said to have exceeded
    attempts: int = 1  # a timed-out interpreter probe is tried once more (see Context.python_facts)

    @property
    def ok(self) -> bool:
        return self.returncode == 0 and not (self.timed_out or self.flooded or self.error)

    def first_line(self) -> str:
        for line in self.output.splitlines():
            if line.strip():
                return line.strip()[:200]
        return ""

    def describe(self, program: str | None = None) -> str:
        """One line; ``program`` names the caller's path when the run was shared with another name."""
        cmd = " ".join(_shown(self.argv))
        if program is not None and self.argv and not self.argv[0].startswith(program):
            cmd = f"{program} (same program as {self.argv[0].split(' ')[0]})"
        if self.error:
            return f"{cmd}: could not run ({self.error})"
        if self.timed_out:
            tries = f" on each of {self.attempts} tries" if self.attempts > 1 else ""
            # the limit, not the measured time: a loaded host overruns the kill by a few tens of ms
            limit = self.timeout_s if self.timeout_s is not None else self.duration_s
            return f"{cmd}: no answer within {limit:.1f}s{tries} (killed)"
        if self.flooded:
            return f"{cmd}: flooded its output (killed after {self.duration_s:.1f}s)"
        line = self.first_line()
        return f"{cmd}: exit {self.returncode}" + (f": {line}" if line else "")


def _shown(argv: list[str]) -> list[str]:
    """``argv`` as a line names it: the code of ``python -c CODE`` (the doctor's probes run pages of
    it) becomes ``<code>``, so a message about the run stays one readable line."""
    shown = list(argv)
    for i, arg in enumerate(shown[:-1]):
        if arg == "-c" and "\n" in shown[i + 1]:
            shown[i + 1] = "<code>"
    return shown


def bounded_run(argv: list[str], timeout: float, *, keep: int = 8192, max_output: int = 4 << 20,
                env: dict[str, str] | None = None, input: bytes | None = None) -> Invocation:
    """Run ``argv`` with stdin closed (or fed ``input``), at most ``timeout`` seconds and ``max_output`` bytes.

    The whole process group is killed on timeout or flood, so neither a hanging child nor
    a grandchild holding the pipe can keep the doctor waiting: :func:`execsys.proc.run`, with
    stdout and stderr as one stream, the first ``keep`` bytes kept, and one second's grace for
    a pipe held after the program exits.
    """
    result = proc.run(argv, timeout=timeout, input=input, env=env, max_output=keep, merge_stderr=True,
                      read_limit=max_output, linger_s=1.0)
    return Invocation(list(argv), returncode=result.returncode, output=result.text(),
                      timed_out=result.timed_out, flooded=result.flooded, error=result.error,
                      duration_s=result.duration_s, timeout_s=timeout)
