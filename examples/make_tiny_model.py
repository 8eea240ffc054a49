"""Write a tiny random-weight llama-architecture GGUF model: nothing downloaded, well under a second.

    python make_tiny_model.py models/tiny.gguf [--seed 0]

About 0.5 MB: 2 layers, 64-wide, a byte-level vocabulary of printable ASCII. Its answers are
nonsense, but it is a real model that llama.cpp loads and serves, so every step of the procedure
(doctor, pin, probe, scope, run) works on a CPU-only box in seconds. The same seed gives the same
bytes, so the same identity. Needs the ``gguf`` and ``numpy`` packages (llama-cpp-python's
installation does not bring them: ``pip install gguf``). The test suite generates the same model
(``tests/fixtures/llama.py``; a test keeps the two byte-identical).
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

N_EMBD, N_LAYER, N_HEAD, N_FF, N_CTX = 64, 2, 4, 128, 256
CONTROL = ["<unk>", "<s>", "</s>"]
BYTE_TOKENS = [f"<0x{b:02X}>" for b in range(256)]
NORMAL = ["\u2581" if c == " " else c for c in map(chr, range(32, 127))]  # SentencePiece's space


def make_tiny_model(path: Path, seed: int = 0) -> Path:
    import gguf
    import numpy as np

    rng = np.random.default_rng(seed)
    tokens = CONTROL + BYTE_TOKENS + NORMAL
    types = [gguf.TokenType.CONTROL] * 3 + [gguf.TokenType.BYTE] * 256 + [gguf.TokenType.NORMAL] * len(NORMAL)
    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_name("execsys-tiny")
    writer.add_context_length(N_CTX)
    writer.add_embedding_length(N_EMBD)
    writer.add_block_count(N_LAYER)
    writer.add_feed_forward_length(N_FF)
    writer.add_head_count(N_HEAD)
    writer.add_head_count_kv(N_HEAD)
    writer.add_rope_dimension_count(N_EMBD // N_HEAD)
    writer.add_layer_norm_rms_eps(1e-5)
    writer.add_file_type(gguf.LlamaFileType.ALL_F32)
    writer.add_tokenizer_model("llama")
    writer.add_token_list(tokens)
    writer.add_token_types(types)
    writer.add_token_scores([0.0] * (3 + 256) + [-float(i) for i in range(len(NORMAL))])
    writer.add_bos_token_id(1)
    writer.add_eos_token_id(2)
    writer.add_unk_token_id(0)
    writer.add_add_bos_token(True)

    def weights(*shape: int, scale: float = 0.4) -> np.ndarray:
        return (rng.standard_normal(shape) * scale).astype(np.float32)

    writer.add_tensor("token_embd.weight", weights(len(tokens), N_EMBD, scale=1.0))
    writer.add_tensor("output_norm.weight", np.ones(N_EMBD, dtype=np.float32))
    output = weights(len(tokens), N_EMBD, scale=1.0)
    output[: 3 + 256] = 0.0  # only printable tokens can win a greedy choice: readable, never ends early
    writer.add_tensor("output.weight", output)
    for layer in range(N_LAYER):
        prefix = f"blk.{layer}"
        writer.add_tensor(f"{prefix}.attn_norm.weight", np.ones(N_EMBD, dtype=np.float32))
        for name in ("attn_q", "attn_k", "attn_v", "attn_output"):
            writer.add_tensor(f"{prefix}.{name}.weight", weights(N_EMBD, N_EMBD, scale=0.2))
        writer.add_tensor(f"{prefix}.ffn_norm.weight", np.ones(N_EMBD, dtype=np.float32))
        writer.add_tensor(f"{prefix}.ffn_gate.weight", weights(N_FF, N_EMBD, scale=0.2))
        writer.add_tensor(f"{prefix}.ffn_up.weight", weights(N_FF, N_EMBD, scale=0.2))
        writer.add_tensor(f"{prefix}.ffn_down.weight", weights(N_EMBD, N_FF, scale=0.2))

    tmp = path.with_name(path.name + ".part")  # a half-written model is never served under the real name
    writer.path = tmp
    writer.write_header_to_file(tmp)
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    os.replace(tmp, path)
    return path


def main() -> None:
    parser = argparse.ArgumentParser(description="Write a tiny random-weight llama GGUF model.")
    parser.add_argument("path", type=Path, help="where to write it, e.g. models/tiny.gguf")
    parser.add_argument("--seed", type=int, default=0, help="same seed, same bytes (default 0)")
    args = parser.parse_args()
    args.path.parent.mkdir(parents=True, exist_ok=True)
    path = make_tiny_model(args.path, args.seed)
    print(f"wrote {path} ({path.stat().st_size:,} bytes)")


if __name__ == "__main__":
    main()
