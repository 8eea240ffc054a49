#!/usr/bin/env bash
# Fail when the base interpreter can import what the test suite installs for itself.
#
# scripts/test.sh puts every test dependency into venvs it creates. A test that passes only because the
# base interpreter (python3 on PATH, outside any venv) happens to hold one of them passes here and fails
# on a new machine. CI runs on the machine the tests were developed on, so .ci/run checks first that the
# base interpreter is still as a new machine of this kind has it. The modules listed are the suite's own
# dependencies that such a machine lacks (it has pytest, numpy, hypothesis, distro: those are not listed).
# Usage: bash scripts/check-base-python.sh        ($PYTHON picks the interpreter, default python3)
set -euo pipefail
clean_path=$(printf '%s' "$PATH" | tr ':' '\n' | grep -v -e '/\.venv' -e 'venv/bin' | paste -sd: -)
base_py=${PYTHON:-$(PATH="$clean_path" command -v python3)}
modules="execsys llama_cpp lm_eval inspect_ai vllm torch transformers tokenizers textual rich syrupy gguf
  blake3 tomlkit httpx psutil git platformdirs pynvml elftools mcp ansible prometheus_client importlinter
  pytest_timeout pytest_textual_snapshot xdist securesystemslib in_toto_attestation model_signing"
# find_spec locates a module without running it; run from / so that this checkout is not on sys.path
held=$(cd / && env -u PYTHONPATH -u VIRTUAL_ENV -u PYTHONHOME "$base_py" - $modules <<'PY'
import importlib.util, sys
print(" ".join(m for m in sys.argv[1:] if importlib.util.find_spec(m) is not None))
PY
)
if [ -n "$held" ]; then
  echo "the base interpreter $base_py can import $held, which a new machine's cannot: remove them" \
       "(e.g. $base_py -m pip uninstall <distribution>) so the suite is tested as on a new machine" >&2
  exit 1
fi
