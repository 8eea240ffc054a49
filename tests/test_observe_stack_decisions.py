"""The serving stack as decision tables: which distributions count, how torch's build is read from its
``version.py``, the container verdict from each combination of signs (a container id in the cgroup, an
overlay root, a container marker, a runtime CLI that answers or not), the GPU topology from NVML (a fake
``pynvml`` module: this machine has none), and which interpreter the stack is read from.

``/proc`` is planted under tmp_path (the module's ``Path`` is pointed there); container runtimes are stub
scripts on a PATH of their own. In-process, milliseconds.
"""

from __future__ import annotations

import os
import sys
import types
from pathlib import Path
from typing import Any

import pytest

from execsys.observe import hardware, stack

CID = "0123456789abcdef" * 4


@pytest.mark.parametrize(("entry", "kept"), [
    ("torch==2.5.1", True), ("numpy==2.1.0", True), ("nvidia-cudnn-cu12==9.1", True), ("vllm-flash-attn==2.6", True),
    ("vllm==0.6.3", True), ("requests==2.32", False), ("nvidia==1", False), ("xvllm-a==1", False),
    ("Torch==2.5", False),
])
def test_which_distributions_belong_to_the_serving_stack(entry: str, kept: bool) -> None:
    name, _, version = entry.partition("==")
    assert stack.stack_distributions([entry]) == ({name: version} if kept else {})


def test_the_stack_s_distributions_are_sorted_by_name_and_a_bare_name_has_no_version() -> None:
    chosen = stack.stack_distributions(["vllm==1", "torch", "nvidia-nccl-cu12==2", "accelerate==3"])
    assert chosen == {"accelerate": "3", "nvidia-nccl-cu12": "2", "torch": "", "vllm": "1"}
    assert list(chosen) == ["accelerate", "nvidia-nccl-cu12", "torch", "vllm"]


def _torch(directory: Path, text: str) -> None:
    (directory / "torch").mkdir(parents=True)
    (directory / "torch" / "version.py").write_text(text)


def test_torch_s_build_from_the_first_directory_that_has_it(tmp_path: Path) -> None:
    _torch(tmp_path / "a", "__version__ = '2.4.0'\ncuda = '12.1'\nhip = None\n")
    _torch(tmp_path / "b", "__version__ = '9.9'\n")
    facts = stack.torch_build([str(tmp_path / "none"), str(tmp_path / "a"), str(tmp_path / "b")])
    assert facts == {"file": str(tmp_path / "a" / "torch" / "version.py"), "version": "2.4.0", "cuda": "12.1",
                     "hip": None, "git_version": None, "arch_list": None}
    assert stack.torch_build([str(tmp_path / "none")]) is None
    assert stack.torch_build([]) is None


def test_torch_s_version_py_in_each_spelling(tmp_path: Path) -> None:
    _torch(tmp_path, 'hip: Optional[str] = "6.2.41133"\n  cuda = "indented, not read"\n'
                     "__version__='2.5.0+rocm6.2'\ngit_version = 'abc'\nxcuda = '1'\n")
    facts = stack.torch_build([str(tmp_path)])
    assert facts is not None
    assert (facts["version"], facts["hip"], facts["cuda"], facts["git_version"]) == (
        "2.5.0+rocm6.2", "6.2.41133", None, "abc")


# -- the container ----------------------------------------------------------------------------------------


@pytest.fixture
def proc(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """A /proc under tmp_path for pid 4242, a container marker (or none), and an empty PATH."""
    real = Path

    def planted(*parts: Any) -> Path:
        first = str(parts[0])
        if first.startswith("/proc/"):
            return real(str(tmp_path) + first, *parts[1:])
        return real(*parts)

    monkeypatch.setattr(stack, "Path", planted)
    kind: dict[str, Any] = {"value": None}
    # the marker of pid 4242's own root, never of this process's
    monkeypatch.setattr(hardware, "container_kind",
                        lambda pid=None: kind["value"] if pid == 4242 else ("observer's", "not the pid asked"))
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    monkeypatch.setenv("PATH", str(bin_dir))
    (tmp_path / "proc" / "4242").mkdir(parents=True)

    class Planted:
        def cgroup(self, text: str) -> None:
            (tmp_path / "proc" / "4242" / "cgroup").write_text(text)

        def mountinfo(self, text: str) -> None:
            (tmp_path / "proc" / "4242" / "mountinfo").write_text(text)

        def kind(self, value: tuple[str, str] | None) -> None:
            kind["value"] = value

        def cli(self, name: str, script: str) -> None:
            path = bin_dir / name
            path.write_text("#!/bin/sh\n" + script + "\n")
            path.chmod(0o755)

    return Planted()


ROOT_OVERLAY = ("22 1 0:21 / / rw,relatime - overlay overlay rw,lowerdir=/l1:/l2,upperdir=/var/lib/docker/overlay2/"
                "abc/diff,workdir=/w\n")


def test_a_process_outside_any_container(proc) -> None:
    proc.cgroup("0::/user.slice/user-1000.slice\n")
    proc.mountinfo("27 1 254:0 / / rw,relatime - ext4 /dev/vda rw\n")
    assert stack.container_of(4242) == {"verdict": "not in a container"}


def test_an_unreadable_cgroup_is_unverifiable_with_its_reason(proc) -> None:
    assert stack.container_of(4242) == {
        "verdict": "unverifiable", "reason": "/proc/4242/cgroup is not readable (No such file or directory)"}


def test_a_container_marker_without_an_id_or_overlay(proc) -> None:
    proc.cgroup("0::/\n")
    proc.kind(("podman", "/run/.containerenv"))
    assert stack.container_of(4242) == {
        "verdict": "unverifiable", "container": "podman", "identifier": "/run/.containerenv",
        "reason": "a podman container without a container id in its cgroup or an overlay root, "
                  "so its image digest is unknown"}


@pytest.mark.parametrize("prefix", ["docker-", "docker/", "libpod-", "containerd-", "containerd/", "crio-",
                                    "cri-containerd-"])
def test_a_container_id_in_the_cgroup_without_a_runtime_cli(proc, prefix: str) -> None:
    proc.cgroup(f"0::/system.slice/{prefix}{CID}.scope\n")
    assert stack.container_of(4242) == {
        "verdict": "unverifiable", "identifier": f"cgroup container {CID[:12]}",
        "reason": "no container runtime CLI (docker, podman) answers here, so its image digest is unknown"}


@pytest.mark.parametrize("cgroup", [f"0::/x/{CID[:63]}\n", f"0::/kubepods/pod1/{CID}\n",
                                    f"0::/docker-{CID[:63]}g\n"])
def test_what_is_not_a_container_id(proc, cgroup: str) -> None:
    proc.cgroup(cgroup)
    assert stack.container_of(4242) == {"verdict": "not in a container"}


def test_the_image_digest_comes_from_the_first_runtime_cli_that_answers(proc) -> None:
    proc.cgroup(f"0::/docker/{CID}\n")
    proc.kind(("docker", "/.dockerenv"))
    proc.cli("docker", f'[ "$*" = "inspect --format {{{{.Image}}}} {CID}" ] || exit 9\n'
                       "echo '  sha256:feed  '")
    proc.cli("podman", "echo sha256:podman")
    assert stack.container_of(4242) == {"verdict": "image", "runtime": "docker", "image": "sha256:feed",
                                        "container": "docker"}


@pytest.mark.parametrize("docker", ["exit 1", "echo sha256:fails; exit 1", "echo '   '"])
def test_a_runtime_cli_that_fails_or_says_nothing_passes_to_the_next(proc, docker: str) -> None:
    proc.cgroup(f"0::/libpod-{CID}.scope\n")
    proc.cli("docker", docker)
    proc.cli("podman", "echo sha256:podman")
    assert stack.container_of(4242) == {"verdict": "image", "runtime": "podman", "image": "sha256:podman"}


def test_no_runtime_cli_that_answers_keeps_the_container_kind(proc) -> None:
    proc.cgroup(f"0::/docker-{CID}.scope\n")
    proc.kind(("docker", "/.dockerenv"))
    proc.cli("docker", "exit 1")
    assert stack.container_of(4242) == {
        "verdict": "unverifiable", "container": "docker", "identifier": f"cgroup container {CID[:12]}",
        "reason": "no container runtime CLI (docker, podman) answers here, so its image digest is unknown"}


def test_an_overlay_root_without_a_container_id(proc) -> None:
    proc.cgroup("0::/\n")
    proc.mountinfo("27 1 254:0 / /data rw - ext4 /dev/vda rw\n" + ROOT_OVERLAY)
    assert stack.container_of(4242) == {
        "verdict": "unverifiable", "identifier": "overlay root (/var/lib/docker/overlay2/abc/diff)",
        "reason": "an overlay root filesystem without a container id in its cgroup"}
    proc.kind(("lxc", "the cgroup of its pid 1"))
    assert stack.container_of(4242)["container"] == "lxc"


def test_an_overlay_root_without_an_upper_dir_is_named_by_its_source(proc) -> None:
    proc.cgroup("0::/\n")
    proc.mountinfo("22 1 0:21 / / ro - overlay fuse-root ro,lowerdir=/l\n")
    assert stack.container_of(4242)["identifier"] == "overlay root (fuse-root)"


@pytest.mark.parametrize("mountinfo", [
    "22 1 0:21 / /mnt rw - overlay overlay rw,upperdir=/u\n",          # an overlay, but not the root
    "22 1 0:21 / / rw - ext4 overlay rw,upperdir=/u\n",                 # the root, not an overlay
    "22 1 0:21 / / rw overlay overlay rw,upperdir=/u\n",                # no " - " separator
])
def test_what_is_not_an_overlay_root(proc, mountinfo: str) -> None:
    proc.cgroup("0::/\n")
    proc.mountinfo(mountinfo)
    assert stack.container_of(4242) == {"verdict": "not in a container"}


def test_the_first_overlay_root_is_the_one_named(proc) -> None:
    proc.cgroup("0::/\n")
    proc.mountinfo(ROOT_OVERLAY + ROOT_OVERLAY.replace("abc", "second"))
    assert "abc" in stack.container_of(4242)["identifier"]


# -- the GPU topology ---------------------------------------------------------------------------------------


class NVMLError(Exception):
    pass


def fake_nvml(count: int, links: dict[int, int], *, p2p_ok: set[tuple[int, int]] = frozenset(),
              fail: str | None = None) -> types.ModuleType:
    module = types.ModuleType("pynvml")
    module.NVMLError = NVMLError
    module.NVML_FEATURE_ENABLED = 1
    module.NVML_P2P_CAPS_INDEX_READ = 7
    module.NVML_P2P_STATUS_OK = 0
    module.NVML_NVLINK_MAX_LINKS = 6
    module.shutdowns = 0

    def init() -> None:
        if fail == "init":
            raise NVMLError("Driver Not Loaded")

    def count_() -> int:
        if fail == "count":
            raise NVMLError("Unknown Error")
        return count

    def state(handle: int, link: int) -> int:
        if link >= 4 and fail != "no-link-limit":
            raise NVMLError("Not Supported")
        return 1 if link < links.get(handle, 0) else 0

    def ancestor(a: int, b: int) -> int:
        if (a, b) == (0, 2):
            raise NVMLError("Not Supported")
        return 10 * a + b

    def p2p(a: int, b: int, index: int) -> int:
        if (a, b) == (1, 2):
            raise NVMLError("Not Supported")
        if index != 7:  # another capability than reading is not what was asked
            return 0 if (a, b) not in p2p_ok else 2
        return 0 if (a, b) in p2p_ok else 2

    def shutdown() -> None:
        module.shutdowns += 1
        if fail == "shutdown":
            raise NVMLError("Uninitialized")

    module.nvmlInit = init
    module.nvmlDeviceGetCount = count_
    module.nvmlDeviceGetHandleByIndex = lambda i: i
    module.nvmlDeviceGetNvLinkState = state
    module.nvmlDeviceGetTopologyCommonAncestor = ancestor
    module.nvmlDeviceGetP2PStatus = p2p
    module.nvmlShutdown = shutdown
    return module


def test_the_topology_is_each_gpu_s_active_links_and_each_pair_s_p2p(monkeypatch: pytest.MonkeyPatch) -> None:
    nvml = fake_nvml(3, {0: 2, 1: 4, 2: 0}, p2p_ok={(0, 1), (0, 2)})
    monkeypatch.setitem(sys.modules, "pynvml", nvml)
    assert stack.gpu_topology() == {
        "gpus": [{"index": 0, "nvlink_active_links": 2}, {"index": 1, "nvlink_active_links": 4},
                 {"index": 2, "nvlink_active_links": 0}],
        "pairs": [{"gpus": [0, 1], "common_ancestor": 1, "p2p_read": True},
                  {"gpus": [0, 2], "p2p_read": True},
                  {"gpus": [1, 2], "common_ancestor": 12}],
        "peers": 2}
    assert nvml.shutdowns == 1


def test_the_topology_counts_links_up_to_the_library_s_maximum(monkeypatch: pytest.MonkeyPatch) -> None:
    nvml = fake_nvml(1, {0: 4})
    nvml.NVML_NVLINK_MAX_LINKS = 3
    monkeypatch.setitem(sys.modules, "pynvml", nvml)
    assert stack.gpu_topology()["gpus"] == [{"index": 0, "nvlink_active_links": 3}]
    del nvml.NVML_NVLINK_MAX_LINKS  # an older library without the constant: 18, past which NVML refuses
    assert stack.gpu_topology()["gpus"] == [{"index": 0, "nvlink_active_links": 4}]


def test_one_gpu_or_none_has_no_peers(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", fake_nvml(1, {}))
    assert stack.gpu_topology() == {"gpus": [{"index": 0, "nvlink_active_links": 0}], "pairs": [], "peers": 0}
    monkeypatch.setitem(sys.modules, "pynvml", fake_nvml(0, {}))
    assert stack.gpu_topology() == {"gpus": [], "pairs": [], "peers": 0}


def test_nvml_that_cannot_start_or_count_is_unverifiable_with_its_words(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", fake_nvml(2, {}, fail="init"))
    assert stack.gpu_topology() == {"verdict": "unverifiable", "reason": "NVML: Driver Not Loaded"}
    failing = fake_nvml(2, {}, fail="count")
    monkeypatch.setitem(sys.modules, "pynvml", failing)
    assert stack.gpu_topology() == {"verdict": "unverifiable", "reason": "NVML: Unknown Error"}
    assert failing.shutdowns == 1


def test_without_the_nvml_library_the_topology_is_unverifiable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", None)
    assert stack.gpu_topology() == {"verdict": "unverifiable", "reason": "nvidia-ml-py (pynvml) not installed"}


# -- which interpreter ----------------------------------------------------------------------------------------


@pytest.fixture
def no_gpu(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", None)


def test_no_process_is_no_interpreter(no_gpu) -> None:
    expected = {"interpreter": {"verdict": "unverifiable", "reason": "no serving process visible from here"},
                "gpu_topology": {"verdict": "unverifiable", "reason": "nvidia-ml-py (pynvml) not installed"}}
    assert stack.observe_stack(None) == expected
    assert stack.observe_stack({"exe": ""}) == expected


def test_a_binary_engine_is_not_python(no_gpu, tmp_path: Path) -> None:
    binary = tmp_path / "llama-server"
    binary.write_text("")
    seen = stack.observe_stack({"exe": str(binary)})
    assert seen["interpreter"] == {"verdict": "not python", "executable": str(binary)}
    assert "distributions" not in seen and "container" not in seen


def test_a_python_process_s_stack_is_read_in_its_own_interpreter(no_gpu, monkeypatch: pytest.MonkeyPatch,
                                                                 tmp_path: Path) -> None:
    from execsys.observe import harness

    site = tmp_path / "site"
    _torch(site, "__version__ = '2.5.1'\ncuda = '12.4'\n")
    asked: list[str] = []

    def facts(exe: str) -> tuple[dict[str, Any], list[str], None]:
        asked.append(exe)
        return ({"path": [str(site)], "version": "3.12.1", "prefix": "/venv"},
                ["torch==2.5.1", "requests==1", "vllm==0.6.3"], None)

    monkeypatch.setattr(harness, "interpreter_facts", facts)
    seen = stack.observe_stack({"interpreter": sys.executable, "exe": "/usr/bin/other"})
    assert asked == [sys.executable]
    assert seen["interpreter"] == {"executable": os.path.realpath(sys.executable), "version": "3.12.1",
                                   "prefix": "/venv"}
    assert seen["distributions"] == {"torch": "2.5.1", "vllm": "0.6.3"}
    assert seen["torch"]["version"] == "2.5.1" and seen["torch"]["cuda"] == "12.4"
    # the exe, when no interpreter is named
    stack.observe_stack({"exe": sys.executable})
    assert asked[-1] == sys.executable


def test_a_python_without_torch_or_that_does_not_describe_itself(no_gpu, monkeypatch: pytest.MonkeyPatch) -> None:
    from execsys.observe import harness

    monkeypatch.setattr(harness, "interpreter_facts", lambda exe: ({"path": None}, [], None))
    seen = stack.observe_stack({"exe": sys.executable})
    assert seen["torch"] == {"verdict": "not installed in the serving interpreter"}
    assert seen["distributions"] == {}
    assert seen["interpreter"] == {"executable": os.path.realpath(sys.executable), "version": None, "prefix": None}
    monkeypatch.setattr(harness, "interpreter_facts", lambda exe: (None, [], "timed out after 10s"))
    assert stack.observe_stack({"exe": sys.executable})["interpreter"] == {"verdict": "unverifiable",
                                                                           "reason": "timed out after 10s"}


def test_with_a_pid_the_interpreter_is_the_path_that_started_it_and_the_container_is_read(
        no_gpu, monkeypatch: pytest.MonkeyPatch) -> None:
    from execsys.observe import harness

    started: list[tuple] = []

    def interpreter(pid: int, argv: Any, exe: Any) -> str:
        started.append((pid, argv, exe))
        return "/bin/sh"

    monkeypatch.setattr(harness, "process_interpreter", interpreter)
    monkeypatch.setattr(stack, "container_of", lambda pid: {"verdict": f"container of {pid}"})
    seen = stack.observe_stack({"argv": ["a", "b"], "exe": "/usr/bin/python3"}, 77)
    assert started == [(77, ["a", "b"], "/usr/bin/python3")]
    assert seen["interpreter"]["verdict"] == "not python"
    assert seen["container"] == {"verdict": "container of 77"}
    stack.observe_stack({"argv": "a b", "exe": "/usr/bin/python3"}, 78)
    assert started[-1] == (78, None, "/usr/bin/python3")
    # a named interpreter is not looked for again
    stack.observe_stack({"interpreter": "/bin/sh"}, 79)
    assert len(started) == 2


def test_without_the_library_s_link_maximum_eighteen_links_are_asked(monkeypatch: pytest.MonkeyPatch) -> None:
    nvml = fake_nvml(1, {0: 30}, fail="no-link-limit")
    del nvml.NVML_NVLINK_MAX_LINKS
    monkeypatch.setitem(sys.modules, "pynvml", nvml)
    assert stack.gpu_topology()["gpus"] == [{"index": 0, "nvlink_active_links": 18}]


def test_an_nvml_that_fails_to_shut_down_still_gives_its_topology(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", fake_nvml(1, {0: 1}, fail="shutdown"))
    assert stack.gpu_topology() == {"gpus": [{"index": 0, "nvlink_active_links": 1}], "pairs": [], "peers": 0}


def test_bytes_that_are_not_utf8_in_proc_or_version_py_are_read_past(proc, tmp_path: Path) -> None:
    (tmp_path / "proc" / "4242" / "cgroup").write_bytes(b"0::/\xff/docker-" + CID.encode() + b".scope\n")
    (tmp_path / "proc" / "4242" / "mountinfo").write_bytes(b"1 0 0:1 / /\xff rw - ext4 /dev/x rw\n" +
                                                          ROOT_OVERLAY.encode())
    assert stack.container_of(4242)["identifier"] == f"cgroup container {CID[:12]}"
    (tmp_path / "proc" / "4242" / "cgroup").write_bytes(b"0::/\xff\n")
    assert stack.container_of(4242)["identifier"] == "overlay root (/var/lib/docker/overlay2/abc/diff)"
    site = tmp_path / "site"
    (site / "torch").mkdir(parents=True)
    (site / "torch" / "version.py").write_bytes(b"# \xff\n__version__ = '2.5.1'\n")
    assert stack.torch_build([str(site)])["version"] == "2.5.1"


def test_podman_alone_names_the_image(proc) -> None:
    proc.cgroup(f"0::/libpod-{CID}.scope\n")
    proc.cli("podman", "echo sha256:only-podman")
    assert stack.container_of(4242) == {"verdict": "image", "runtime": "podman", "image": "sha256:only-podman"}
