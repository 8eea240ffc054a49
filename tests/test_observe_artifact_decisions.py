"""The artifact observer as decision tables (issue 26): the GGUF header reader on hand-built headers
(every version, value type, truncation and bound), the format and quantization the files say, and the
declared-versus-seen quantization match -- on real files in tmp_path, in milliseconds."""

from __future__ import annotations

import json
import os
import struct
from pathlib import Path
from typing import Any

import pytest

from execsys.errors import InputError
from execsys.observe.artifact import (
    GGUF_FILE_TYPES,
    GGUFError,
    _norm,
    detect_format,
    file_quantization,
    observe_artifact,
    read_gguf_metadata,
    resolve,
)

# -- a GGUF header written by hand, so every field and bound is the test's own ----------------------


def _s(text: str | bytes, lf: str = "<Q") -> bytes:
    raw = text.encode() if isinstance(text, str) else text
    return struct.pack(lf, len(raw)) + raw


def kv(key: str, vtype: int, payload: bytes, lf: str = "<Q") -> bytes:
    return _s(key, lf) + struct.pack("<I", vtype) + payload


def u32(key: str, value: int, lf: str = "<Q") -> bytes:
    return kv(key, 4, struct.pack("<I", value), lf)


def string(key: str, value: str, lf: str = "<Q") -> bytes:
    return kv(key, 8, _s(value, lf), lf)


def array(key: str, item_type: int, items: list[bytes], lf: str = "<Q") -> bytes:
    return kv(key, 9, struct.pack("<I", item_type) + struct.pack(lf, len(items)) + b"".join(items), lf)


def header(*kvs: bytes, version: int = 3, count: int | None = None) -> bytes:
    n = len(kvs) if count is None else count
    if version == 1:
        head = struct.pack("<III", 1, 0, n)
    else:
        head = struct.pack("<I", version) + struct.pack("<QQ", 0, n)
    return b"GGUF" + head + b"".join(kvs)


def write(path: Path, data: bytes) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return path


# -- read_gguf_metadata -----------------------------------------------------------------------------


@pytest.mark.parametrize("version", [2, 3])
def test_v2_and_v3_headers_give_the_wanted_scalar_and_string_keys(tmp_path: Path, version: int) -> None:
    f = write(tmp_path / "m.gguf", header(
        string("general.architecture", "llama"), u32("general.file_type", 15), string("general.name", "tiny"),
        u32("llama.block_count", 2), version=version))
    assert read_gguf_metadata(f) == {"gguf_version": version, "general.architecture": "llama",
                                     "general.file_type": 15, "general.name": "tiny"}


def test_a_v1_header_uses_32_bit_counts_and_lengths(tmp_path: Path) -> None:
    lf = "<I"
    f = write(tmp_path / "m.gguf", header(string("general.name", "old", lf), u32("general.file_type", 7, lf),
                                          version=1))
    assert read_gguf_metadata(f) == {"gguf_version": 1, "general.name": "old", "general.file_type": 7}


@pytest.mark.parametrize("version", [0, 4, 99])
def test_an_unknown_version_is_refused_by_number(tmp_path: Path, version: int) -> None:
    f = write(tmp_path / "m.gguf", b"GGUF" + struct.pack("<I", version) + b"\0" * 16)
    with pytest.raises(GGUFError, match=f"^GGUF version {version} is not understood$"):
        read_gguf_metadata(f)


@pytest.mark.parametrize("magic", [b"GGUG", b"ggu", b"", b"\0GGU", b"gguf"])
def test_a_file_without_the_magic_is_not_gguf(tmp_path: Path, magic: bytes) -> None:
    f = write(tmp_path / "m.gguf", magic + header(u32("general.file_type", 1))[4:])
    with pytest.raises(GGUFError, match=r"^not a GGUF file \(bad magic\)$"):
        read_gguf_metadata(f)


@pytest.mark.parametrize("cut", [5, 8, 12, 20, 30, -1])
def test_a_header_cut_anywhere_is_truncated(tmp_path: Path, cut: int) -> None:
    data = header(string("general.name", "tiny"), u32("general.file_type", 1))
    f = write(tmp_path / "m.gguf", data[:cut])
    with pytest.raises(GGUFError, match="^truncated GGUF header$"):
        read_gguf_metadata(f)


def test_a_header_claiming_more_keys_than_it_has_is_truncated(tmp_path: Path) -> None:
    f = write(tmp_path / "m.gguf", header(u32("general.file_type", 1), count=2))
    with pytest.raises(GGUFError, match="^truncated GGUF header$"):
        read_gguf_metadata(f, {"general.file_type", "general.name"})


def test_a_string_of_exactly_16_mib_is_read_and_one_byte_more_is_implausible(tmp_path: Path) -> None:
    limit = 1 << 24
    ok = write(tmp_path / "ok.gguf", header(kv("general.name", 8, struct.pack("<Q", limit) + b"a" * limit)))
    assert read_gguf_metadata(ok)["general.name"] == "a" * limit
    bad = write(tmp_path / "bad.gguf", header(kv("general.name", 8, struct.pack("<Q", limit + 1) + b"a" * 8)))
    with pytest.raises(GGUFError, match="^implausible string length in GGUF header$"):
        read_gguf_metadata(bad)


def test_an_implausible_key_length_is_refused_too(tmp_path: Path) -> None:
    f = write(tmp_path / "m.gguf", b"GGUF" + struct.pack("<IQQ", 3, 0, 1) + struct.pack("<Q", (1 << 24) + 1))
    with pytest.raises(GGUFError, match="^implausible string length"):
        read_gguf_metadata(f)


def test_a_non_utf8_string_is_read_with_replacement(tmp_path: Path) -> None:
    f = write(tmp_path / "m.gguf", header(kv("general.name", 8, _s(b"a\xffb"))))
    assert read_gguf_metadata(f)["general.name"] == "a\ufffdb"


# every scalar type, by its format, read where it is wanted
SCALARS = [(0, "<B", 200), (1, "<b", -3), (2, "<H", 60000), (3, "<h", -30000), (4, "<I", 4_000_000_000),
           (5, "<i", -2_000_000_000), (6, "<f", 1.5), (7, "<?", True), (10, "<Q", 1 << 40),
           (11, "<q", -(1 << 40)), (12, "<d", 2.25)]


@pytest.mark.parametrize(("vtype", "fmt", "value"), SCALARS)
def test_each_scalar_type_is_read_at_its_own_width(tmp_path: Path, vtype: int, fmt: str, value: Any) -> None:
    f = write(tmp_path / "m.gguf", header(kv("x.value", vtype, struct.pack(fmt, value)),
                                          string("general.name", "after")))
    assert read_gguf_metadata(f, {"x.value", "general.name"}) == {"gguf_version": 3, "x.value": value,
                                                                  "general.name": "after"}


@pytest.mark.parametrize(("vtype", "fmt", "value"), SCALARS)
def test_each_scalar_type_is_skipped_at_its_own_width(tmp_path: Path, vtype: int, fmt: str, value: Any) -> None:
    # a value of the wrong width would misalign every key after it
    f = write(tmp_path / "m.gguf", header(kv("x.other", vtype, struct.pack(fmt, value)),
                                          string("general.name", "after")))
    assert read_gguf_metadata(f, {"general.name"}) == {"gguf_version": 3, "general.name": "after"}


def test_an_unwanted_scalar_array_is_skipped_and_the_keys_after_it_are_read(tmp_path: Path) -> None:
    scores = [struct.pack("<f", float(i)) for i in range(5)]
    f = write(tmp_path / "m.gguf", header(array("tokenizer.scores", 6, scores), u32("general.file_type", 2)))
    assert read_gguf_metadata(f) == {"gguf_version": 3, "general.file_type": 2}


def test_a_wanted_scalar_array_is_kept_in_order(tmp_path: Path) -> None:
    f = write(tmp_path / "m.gguf", header(array("x.ids", 5, [struct.pack("<i", v) for v in (3, -1, 7)])))
    assert read_gguf_metadata(f, {"x.ids"}) == {"gguf_version": 3, "x.ids": [3, -1, 7]}


def test_string_arrays_are_walked_item_by_item_kept_when_wanted(tmp_path: Path) -> None:
    tokens = [_s(t) for t in ("<s>", "a", "bc")]
    data = header(array("tokenizer.tokens", 8, tokens), string("general.name", "after"))
    f = write(tmp_path / "m.gguf", data)
    assert read_gguf_metadata(f, {"general.name"}) == {"gguf_version": 3, "general.name": "after"}
    assert read_gguf_metadata(f, {"tokenizer.tokens", "general.name"})["tokenizer.tokens"] == ["<s>", "a", "bc"]


def test_a_v1_array_count_is_32_bit(tmp_path: Path) -> None:
    lf = "<I"
    data = header(array("x.ids", 4, [struct.pack("<I", 9), struct.pack("<I", 8)], lf), string("general.name", "n", lf),
                  version=1)
    f = write(tmp_path / "m.gguf", data)
    assert read_gguf_metadata(f, {"x.ids", "general.name"}) == {"gguf_version": 1, "x.ids": [9, 8],
                                                                "general.name": "n"}


@pytest.mark.parametrize("vtype", [13, 99])
def test_an_unknown_value_type_is_refused_by_number(tmp_path: Path, vtype: int) -> None:
    f = write(tmp_path / "m.gguf", header(kv("x.odd", vtype, b"\0" * 8)))
    with pytest.raises(GGUFError, match=f"^unknown GGUF value type {vtype}$"):
        read_gguf_metadata(f)


def test_reading_stops_once_every_wanted_key_is_found(tmp_path: Path) -> None:
    # the garbage after the wanted keys is never read
    f = write(tmp_path / "m.gguf", header(u32("general.file_type", 1), string("general.name", "n"), count=5)
              + b"\xff" * 40)
    assert read_gguf_metadata(f, {"general.file_type", "general.name"}) == {
        "gguf_version": 3, "general.file_type": 1, "general.name": "n"}


def test_the_default_wanted_keys_are_the_general_ones(tmp_path: Path) -> None:
    keys = ["general.file_type", "general.name", "general.architecture", "general.basename",
            "general.size_label", "general.quantization_version"]
    kvs = [u32(k, i) if k in ("general.file_type", "general.quantization_version") else string(k, f"v{i}")
           for i, k in enumerate(keys)]
    f = write(tmp_path / "m.gguf", header(u32("llama.context_length", 64), *kvs, count=len(kvs) + 1) + b"\xff" * 9)
    found = read_gguf_metadata(f)
    assert found == {"gguf_version": 3, "general.file_type": 0, "general.name": "v1", "general.architecture": "v2",
                     "general.basename": "v3", "general.size_label": "v4", "general.quantization_version": 5}


# -- detect_format ----------------------------------------------------------------------------------


def tree(root: Path, files: dict[str, bytes]) -> Path:
    for name, data in files.items():
        write(root / name, data)
    return root


GG = header(u32("general.file_type", 1))


@pytest.mark.parametrize(("files", "expected"), [
    ({"model.gguf": GG}, "gguf"),
    ({"model.gguf": b"not gguf", "w.safetensors": b"x"}, "safetensors"),
    ({"weights": GG}, "gguf"),  # one file: its magic says, whatever its name
    ({"weights": GG, "other": b"x"}, "other"),  # several: only a .gguf name is opened
    ({"a/b.safetensors": b"x", "c.bin": b"x"}, "safetensors"),
    ({"pytorch_model.bin": b"x"}, "pytorch"),
    ({"m.pt": b"x", "m.onnx": b"x"}, "pytorch"),
    ({"m.pth": b"x"}, "pytorch"),
    ({"m.onnx": b"x"}, "onnx"),
    ({"README.md": b"x", "config.json": b"{}"}, "other"),
    ({"sub/deep/m.gguf": GG, "w.safetensors": b"x"}, "gguf"),
])
def test_the_format_comes_from_the_files(tmp_path: Path, files: dict[str, bytes], expected: str) -> None:
    assert detect_format(tree(tmp_path / "t", files)) == expected


def test_a_single_file_is_its_own_format(tmp_path: Path) -> None:
    assert detect_format(write(tmp_path / "blob", GG)) == "gguf"
    assert detect_format(write(tmp_path / "m.safetensors", b"x")) == "safetensors"
    assert detect_format(write(tmp_path / "m.gguf.txt", b"GGUX")) == "other"


def test_an_unreadable_gguf_is_not_gguf(tmp_path: Path) -> None:
    root = tree(tmp_path / "t", {"m.safetensors": b"x"})
    (root / "m.gguf").symlink_to(root / "missing")  # rglob lists it; opening it fails
    os.symlink(root / "missing", root / "x.gguf")
    assert detect_format(root) == "safetensors"


# -- file_quantization ------------------------------------------------------------------------------


def test_a_gguf_file_type_is_named_and_the_model_fields_kept(tmp_path: Path) -> None:
    f = write(tmp_path / "m.gguf", header(
        u32("general.file_type", 15), string("general.name", "Tiny"), string("general.architecture", "llama"),
        string("general.basename", "tiny-base"), string("general.size_label", "1B"),
        u32("general.quantization_version", 2)))
    assert file_quantization(f) == {
        "quantization": "Q4_K_M", "source": "gguf general.file_type",
        "model": {"name": "Tiny", "architecture": "llama", "basename": "tiny-base", "size_label": "1B"}}


@pytest.mark.parametrize(("code", "name"), [(0, "F32"), (1, "F16"), (7, "Q8_0"), (32, "BF16"), (40, "Q1_0")])
def test_file_type_codes_at_the_table_s_ends(tmp_path: Path, code: int, name: str) -> None:
    f = write(tmp_path / "m.gguf", header(u32("general.file_type", code)))
    assert file_quantization(f)["quantization"] == name == GGUF_FILE_TYPES[code]


def test_an_unlisted_file_type_is_shown_by_number(tmp_path: Path) -> None:
    f = write(tmp_path / "m.gguf", header(u32("general.file_type", 4)))
    assert file_quantization(f) == {"quantization": "file_type 4", "source": "gguf general.file_type",
                                    "model": {}}


def test_a_gguf_without_a_file_type_says_so(tmp_path: Path) -> None:
    f = write(tmp_path / "m.gguf", header(string("general.name", "n")))
    assert file_quantization(f) == {"quantization": None, "source": "gguf (no general.file_type)",
                                    "model": {"name": "n"}}


def test_an_unreadable_gguf_header_is_said_with_its_reason(tmp_path: Path) -> None:
    f = write(tmp_path / "m.gguf", header(u32("general.file_type", 1))[:-2])
    assert file_quantization(f) == {"quantization": None, "source": "GGUF header unreadable (truncated GGUF header)",
                                    "model": {}}


def test_the_first_gguf_of_a_tree_by_name_is_read(tmp_path: Path) -> None:
    root = tree(tmp_path / "t", {"b.gguf": header(u32("general.file_type", 2)),
                                 "a.gguf": header(u32("general.file_type", 7)),
                                 "0.gguf": b"not one", "config.json": b'{"quantization_config": {"bits": 4}}'})
    assert file_quantization(root)["quantization"] == "Q8_0"


def test_a_file_that_is_not_gguf_reads_the_config_beside_it(tmp_path: Path) -> None:
    tree(tmp_path / "t", {"config.json": json.dumps({"torch_dtype": "bfloat16"}).encode()})
    f = write(tmp_path / "t" / "model.safetensors", b"x")
    assert file_quantization(f) == {"quantization": "none (bfloat16)", "source": "config.json (no quantization_config)",
                                    "model": {"dtype": "bfloat16"}}


def test_no_gguf_and_no_config_says_nothing(tmp_path: Path) -> None:
    root = tree(tmp_path / "t", {"m.safetensors": b"x", "sub/config.json": b"{}"})
    assert file_quantization(root) == {"quantization": None, "source": None, "model": {}}


def test_an_unreadable_config_is_said_with_its_reason(tmp_path: Path) -> None:
    root = tree(tmp_path / "t", {"config.json": b"{not json"})
    got = file_quantization(root)
    assert got["quantization"] is None and got["model"] == {}
    assert got["source"].startswith("config.json unreadable (Expecting property name")


@pytest.mark.parametrize(("qconf", "label"), [
    ({"quant_method": "awq", "bits": 4, "group_size": 128}, "awq 4-bit"),
    ({"quant_method": "gptq", "w_bit": 8}, "gptq 8-bit"),
    ({"quant_type": "fp8"}, "fp8"),
    ({"quant_method": "bitsandbytes", "quant_type": "nf4", "bits": 4}, "bitsandbytes 4-bit"),  # the method first
    ({"quant_method": "", "quant_type": "nf4", "bits": 4}, "nf4 4-bit"),
    ({"bits": 3}, "unknown 3-bit"),
    ({"quant_method": "bnb", "bits": 0, "w_bit": 4}, "bnb 4-bit"),
    ({"quant_method": "bnb", "bits": None}, "bnb"),
    ({}, "unknown"),
])
def test_a_quantization_config_is_labelled_method_and_bits(tmp_path: Path, qconf: dict, label: str) -> None:
    config = {"model_type": "llama", "architectures": ["LlamaForCausalLM"], "_name_or_path": "org/m",
              "other": 1, "dtype": "float16", "quantization_config": qconf}
    root = tree(tmp_path / "t", {"config.json": json.dumps(config).encode()})
    assert file_quantization(root) == {
        "quantization": label, "source": "config.json quantization_config", "detail": qconf,
        "model": {"model_type": "llama", "architectures": ["LlamaForCausalLM"], "_name_or_path": "org/m",
                  "dtype": "float16"}}


@pytest.mark.parametrize(("config", "label", "model"), [
    ({}, "none", {}),
    ({"torch_dtype": "float32", "dtype": "bfloat16"}, "none (float32)", {"dtype": "float32"}),
    ({"torch_dtype": None, "dtype": "bfloat16"}, "none (bfloat16)", {"dtype": "bfloat16"}),
    ({"torch_dtype": "", "dtype": ""}, "none ()", {}),
    ({"quantization_config": "awq"}, "none", {}),  # not a table: not a quantization config
    ({"model_type": "gpt2"}, "none", {"model_type": "gpt2"}),
])
def test_without_a_quantization_config_the_dtype_is_said(tmp_path: Path, config: dict, label: str,
                                                          model: dict) -> None:
    root = tree(tmp_path / "t", {"config.json": json.dumps(config).encode()})
    assert file_quantization(root) == {"quantization": label, "source": "config.json (no quantization_config)",
                                       "model": model}


# -- resolve and _norm ------------------------------------------------------------------------------


def test_a_relative_path_is_the_declaration_s_directory_s(tmp_path: Path) -> None:
    assert resolve("models/../m.gguf", tmp_path) == tmp_path / "m.gguf"
    assert resolve("/abs/m.gguf", tmp_path) == Path("/abs/m.gguf")
    assert resolve("~/m.gguf", tmp_path) == Path(os.path.expanduser("~/m.gguf"))


def test_without_a_base_a_relative_path_is_the_cwd_s(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    assert resolve("m.gguf", None) == tmp_path / "m.gguf"


@pytest.mark.parametrize(("text", "normed"), [("Q4_K_M", "q4km"), ("AWQ 4-bit", "awq4bit"), (None, ""), ("", "")])
def test_norm_keeps_only_lowercase_letters_and_digits(text: str | None, normed: str) -> None:
    assert _norm(text) == normed


# -- observe_artifact -------------------------------------------------------------------------------


def test_no_declared_path_is_a_note(tmp_path: Path) -> None:
    assert observe_artifact({}) == ({"note": "no artifact declared ([artifact] path)"}, {})
    assert observe_artifact({"path": "", "quantization": "q4"}) == ({"note": "no artifact declared ([artifact] path)"},
                                                                     {})


def test_a_gguf_artifact_is_observed_whole(tmp_path: Path) -> None:
    from execsys.digest import digest_path

    f = write(tmp_path / "m.gguf", header(u32("general.file_type", 1), string("general.name", "tiny")))
    observed, model = observe_artifact({"path": "m.gguf"}, base_dir=tmp_path)
    d = digest_path(f)
    assert observed == {"path": str(f), "kind": "file", "digest": d.digest, "size_bytes": len(f.read_bytes()),
                        "files": 1, "format": "gguf", "quantization": "F16",
                        "quantization_source": "gguf general.file_type"}
    assert model == {"name": "tiny"}


@pytest.mark.parametrize(("declared", "matches"), [
    ("F16", True), ("f16", True), ("MOSTLY_F16", True), ("F", True), ("Q4_K_M", False), ("F32", False),
])
def test_declared_quantization_matches_either_way_round(tmp_path: Path, declared: str, matches: bool) -> None:
    write(tmp_path / "m.gguf", header(u32("general.file_type", 1)))
    observed, _ = observe_artifact({"path": "m.gguf", "quantization": declared}, base_dir=tmp_path)
    assert observed["quantization_matches_declared"] is matches


def test_a_declared_quantization_never_matches_when_the_files_say_none(tmp_path: Path) -> None:
    write(tmp_path / "m.gguf", header(string("general.name", "n")))
    observed, _ = observe_artifact({"path": "m.gguf", "quantization": "q4"}, base_dir=tmp_path)
    assert observed["quantization_matches_declared"] is False
    observed, _ = observe_artifact({"path": "m.gguf"}, base_dir=tmp_path)
    assert "quantization_matches_declared" not in observed


def test_a_quantization_config_is_recorded_beside_the_label(tmp_path: Path) -> None:
    qconf = {"quant_method": "awq", "bits": 4}
    tree(tmp_path / "m", {"config.json": json.dumps({"quantization_config": qconf}).encode(),
                          "w.safetensors": b"x"})
    observed, model = observe_artifact({"path": "m", "quantization": "AWQ"}, base_dir=tmp_path)
    assert observed["kind"] == "tree" and observed["files"] == 2 and observed["format"] == "safetensors"
    assert observed["quantization"] == "awq 4-bit" and observed["quantization_config"] == qconf
    assert observed["quantization_matches_declared"] is True
    assert model == {}


def test_an_adapter_is_digested_beside_the_artifact(tmp_path: Path) -> None:
    from execsys.digest import digest_path

    write(tmp_path / "m.gguf", GG)
    a = tree(tmp_path / "lora", {"adapter_model.safetensors": b"abc", "adapter_config.json": b"{}"})
    observed, _ = observe_artifact({"path": "m.gguf", "adapter": "lora"}, base_dir=tmp_path)
    d = digest_path(a)
    assert observed["adapter"] == {"path": str(a), "kind": "tree", "digest": d.digest, "size_bytes": 5, "files": 2}


def test_a_missing_adapter_is_an_input_error_that_says_adapter(tmp_path: Path) -> None:
    write(tmp_path / "m.gguf", GG)
    with pytest.raises(InputError, match=r"^adapter .*lora: no such file or directory$"):
        observe_artifact({"path": "m.gguf", "adapter": "lora"}, base_dir=tmp_path)


def test_a_missing_artifact_is_an_input_error(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="no such file or directory"):
        observe_artifact({"path": "gone.gguf"}, base_dir=tmp_path)


def test_a_signature_bundle_is_recorded_only_when_there_is_one(tmp_path: Path) -> None:
    root = tree(tmp_path / "m", {"w.safetensors": b"x"})
    observed, _ = observe_artifact({"path": "m"}, base_dir=tmp_path)
    assert "signature" not in observed
    write(root / "model.sig", b"{not a bundle")
    observed, _ = observe_artifact({"path": "m"}, base_dir=tmp_path)
    assert observed["signature"]["bundle"] == "model.sig" and observed["signature"]["present"] is True


def test_a_directory_named_gguf_is_no_gguf_and_the_config_speaks(tmp_path: Path) -> None:
    root = tree(tmp_path / "t", {"a.gguf/inner.txt": b"x", "config.json": b'{"torch_dtype": "float16"}'})
    assert file_quantization(root) == {"quantization": "none (float16)",
                                       "source": "config.json (no quantization_config)", "model": {"dtype": "float16"}}


def test_hashing_progress_reaches_the_caller(tmp_path: Path) -> None:
    write(tmp_path / "m.gguf", GG + b"\0" * 1000)
    seen: list[tuple[int, int]] = []
    observe_artifact({"path": "m.gguf"}, base_dir=tmp_path, progress=lambda done, total: seen.append((done, total)))
    assert seen and seen[-1] == (len(GG) + 1000, len(GG) + 1000)


def test_a_signature_key_is_resolved_beside_the_declaration(tmp_path: Path) -> None:
    tree(tmp_path / "m", {"w.safetensors": b"x"})
    observed, _ = observe_artifact({"path": "m", "signature_key": "keys/pub.pem"}, base_dir=tmp_path)
    key = observed["signature"]["key"]
    assert key["path"] == str(tmp_path / "keys" / "pub.pem")
    assert key["error"] == f"[artifact] signature_key {tmp_path / 'keys' / 'pub.pem'}: no such file"


# -- every count, length and type is unsigned: a value with the top bit set is never negative -------


def test_a_version_with_the_top_bit_set_is_named_unsigned(tmp_path: Path) -> None:
    f = write(tmp_path / "m.gguf", b"GGUF" + struct.pack("<I", 0x80000003) + b"\0" * 16)
    with pytest.raises(GGUFError, match="^GGUF version 2147483651 is not understood$"):
        read_gguf_metadata(f)


@pytest.mark.parametrize("version", [1, 3])
def test_a_key_count_with_the_top_bit_set_is_a_huge_count(tmp_path: Path, version: int) -> None:
    lf = "<I" if version == 1 else "<Q"
    count = (1 << 31) + 1 if version == 1 else (1 << 63) + 1
    f = write(tmp_path / "m.gguf", header(u32("general.file_type", 1, lf), version=version, count=count))
    assert read_gguf_metadata(f, {"general.file_type"}) == {"gguf_version": version, "general.file_type": 1}


@pytest.mark.parametrize("version", [1, 3])
def test_a_string_length_with_the_top_bit_set_is_implausible(tmp_path: Path, version: int) -> None:
    lf = "<I" if version == 1 else "<Q"
    length = 1 << 31 if version == 1 else 1 << 63
    f = write(tmp_path / "m.gguf", header(kv("general.name", 8, struct.pack(lf, length) + b"abc", lf), version=version))
    with pytest.raises(GGUFError, match="^implausible string length in GGUF header$"):
        read_gguf_metadata(f)


def test_value_and_item_types_with_the_top_bit_set_are_named_unsigned(tmp_path: Path) -> None:
    f = write(tmp_path / "m.gguf", header(kv("x.odd", 0x80000000, b"")))
    with pytest.raises(GGUFError, match="^unknown GGUF value type 2147483648$"):
        read_gguf_metadata(f)
    g = write(tmp_path / "g.gguf", header(kv("x.arr", 9, struct.pack("<IQ", 0x80000001, 1))))
    with pytest.raises(GGUFError, match="^unknown GGUF value type 2147483649$"):
        read_gguf_metadata(g)


def test_a_wanted_array_of_arrays_is_kept_whole(tmp_path: Path) -> None:
    def ints(*values: int) -> bytes:
        return struct.pack("<IQ", 5, len(values)) + b"".join(struct.pack("<i", v) for v in values)

    f = write(tmp_path / "m.gguf", header(array("x.nested", 9, [ints(1, 2), ints(3)]), string("general.name", "n")))
    assert read_gguf_metadata(f, {"x.nested", "general.name"}) == {"gguf_version": 3, "x.nested": [[1, 2], [3]],
                                                                   "general.name": "n"}
    assert read_gguf_metadata(f, {"general.name"}) == {"gguf_version": 3, "general.name": "n"}
