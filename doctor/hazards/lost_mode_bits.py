"""lost-mode-bits: the execute bit git records is not the one on disk.

A checkout on a filesystem that does not keep modes (9p, drvfs, SMB, FAT, NTFS,
some FUSE), a copy through a tool that drops them, or ``core.fileMode=false``
(which makes git stop reporting exactly this) leaves the harness's scripts
non-executable -- or everything executable. The run script then fails with
"Permission denied" on one host and works on another. In each harness repository
this compares index modes (``git ls-files -s``) with the working tree, reads
``core.fileMode``, looks up the filesystem type of the repository and declared
paths, and lists scripts that have a shebang but no execute bit. Uses the git
command line (read-only plumbing), which every host with a checkout has.
"""

from __future__ import annotations

import os
import stat

from execsys.doctor import files, sysinfo
from execsys.doctor.model import Finding, HazardResult, fold, headline

ID = "lost-mode-bits"
TITLE = "Execute bits lost in the tree"
FINDINGS = ("not-a-repository", "core-filemode-false", "ls-files-failed", "execute-bit-lost", "execute-bit-gained",
            "script-without-execute-bit", "modeless-filesystem")

FIX = ("Restore the bits (`chmod +x FILE`, or `git checkout -- FILE` with core.fileMode=true), keep "
       "core.fileMode=true, and keep checkouts on a filesystem that stores modes (ext4/xfs/btrfs, not "
       "9p/drvfs/SMB/FAT); run scripts via their interpreter (`bash run.sh`) where bits cannot be kept.")

MODELESS_FS = {"9p", "drvfs", "cifs", "smb3", "smbfs", "vfat", "msdos", "exfat", "ntfs", "ntfs3", "fuseblk",
               "fuse.sshfs", "virtiofs", "vboxsf", "fuse.vmhgfs-fuse", "fuse.rclone", "v9fs", "prl_fs"}
SCRIPT_SUFFIXES = (".sh", ".bash", ".zsh", ".ksh")
MAX_SHEBANG_READS = 5000


def _looks_like_script(path: str) -> bool:
    base = os.path.basename(path)
    parent = os.path.basename(os.path.dirname(path))
    return base.endswith(SCRIPT_SUFFIXES) or "." not in base or parent in ("bin", "scripts")


def check_repo(repo: str, timeout: float) -> tuple[list[Finding], list[str]]:
    """(findings, evidence) for one repository."""
    findings: list[Finding] = []
    evidence: list[str] = []
    top = files.bounded_run(["git", "-C", repo, "rev-parse", "--show-toplevel"], timeout)
    if not top.ok:
        return [Finding("fail", f"{repo}: not a git repository ({top.first_line()})", f"{ID}/not-a-repository")], []
    root = top.output.strip()
    mode_cfg = files.bounded_run(["git", "-C", root, "config", "--get", "core.fileMode"], timeout)
    if mode_cfg.output.strip().lower() == "false":
        findings.append(Finding("warn", f"{root}: core.fileMode=false -- git will not show execute bits that are lost",
                                f"{ID}/core-filemode-false"))
    listing = files.bounded_run(["git", "-C", root, "ls-files", "-s", "-z"], max(timeout, 10.0),
                                keep=64 << 20, max_output=256 << 20)
    if not listing.ok:
        findings.append(Finding("fail", f"{root}: git ls-files failed ({listing.describe()})", f"{ID}/ls-files-failed"))
        return findings, evidence
    lost: list[str] = []
    gained: list[str] = []
    unbit: list[str] = []
    tracked = 0
    reads = 0
    for record in listing.output.split("\0"):
        if not record or "\t" not in record:
            continue
        meta, path = record.split("\t", 1)
        mode = meta.split(" ", 1)[0]
        if mode not in ("100755", "100644"):
            continue
        tracked += 1
        full = os.path.join(root, path)
        try:
            st = os.lstat(full)
        except OSError:
            continue
        if not stat.S_ISREG(st.st_mode):
            continue
        executable = bool(st.st_mode & 0o111)
        if mode == "100755" and not executable:
            lost.append(path)
        elif mode == "100644" and executable:
            gained.append(path)
        elif mode == "100644" and reads < MAX_SHEBANG_READS and _looks_like_script(path):
            reads += 1
            if files.read_head(full, 2) == b"#!":
                unbit.append(path)
    evidence.append(f"{root}: {tracked} tracked files compared with the index")
    if lost:
        findings.append(Finding("fail", f"{root}: {len(lost)} file(s) are 100755 in git but not executable here: "
                                + ", ".join(lost[:8]) + (" ..." if len(lost) > 8 else ""), f"{ID}/execute-bit-lost"))
    if gained:
        findings.append(Finding("warn", f"{root}: {len(gained)} file(s) are 100644 in git but executable here: "
                                + ", ".join(gained[:8]) + (" ..." if len(gained) > 8 else ""),
                                f"{ID}/execute-bit-gained"))
    if unbit:
        findings.append(Finding("warn", f"{root}: {len(unbit)} script(s) with a shebang and no execute bit: "
                                + ", ".join(unbit[:8]) + (" ..." if len(unbit) > 8 else ""),
                                f"{ID}/script-without-execute-bit"))
    fs = sysinfo.mount_fstype(root)
    if fs:
        evidence.append(f"{root}: on {fs[0]} (mounted at {fs[1]})")
        if fs[0] in MODELESS_FS:
            findings.append(Finding("warn", f"{root}: on {fs[0]}, which does not keep execute bits",
                                    f"{ID}/modeless-filesystem"))
    return findings, evidence


def check(ctx) -> HazardResult:
    repos = ctx.repos()
    paths = ctx.paths()
    if not repos and not paths:
        return HazardResult(ID, "skip", "not in a git repository and no --repo/--path given", [], "")
    findings: list[Finding] = []
    evidence: list[str] = []
    for repo in repos:
        found, seen = check_repo(repo, ctx.timeout)
        findings += found
        evidence += seen
    for path in paths:
        fs = sysinfo.mount_fstype(path)
        if fs and fs[0] in MODELESS_FS:
            findings.append(Finding("warn", f"{path}: on {fs[0]}, which does not keep execute bits",
                                    f"{ID}/modeless-filesystem"))
        elif fs:
            evidence.append(f"{path}: on {fs[0]}")
    def summary(top: list[Finding]) -> str:
        return top[0].text if top[0].level == "fail" else headline([f.text for f in top])

    return fold(ID, findings, ok=f"{len(repos)} repositor{'ies' if len(repos) != 1 else 'y'}: execute bits match git",
                fix=FIX, evidence=evidence, accept=ctx.accept, summary=summary)
