#!/usr/bin/env bash
# Build (once) and print the path of the evaluation-harness venv the run tests use.
#
# A user's harness lives in its own environment, not in execsys's: so do the tests'. The venv holds
# lm-evaluation-harness and Inspect AI at pinned versions, plus this checkout of execsys (editable),
# as a user who runs `pip install 'execsys[inspect]'` in their harness environment has it: Inspect
# finds the hook through execsys's `inspect_ai` entry point. It is cached under ~/.cache/execsys-test-harness/<hash of the
# requirements below>, so a second run costs one editable reinstall of execsys.
#
# torch==2.13.0 goes in FIRST and alone: this machine kind keeps its CPU build on disk, and a bare
# `torch` requirement (lm-eval asks for one) would otherwise make pip pull a CUDA build of several GB.
#
# Usage: bash scripts/harness-env.sh        # prints the venv directory on stdout, progress on stderr
set -euo pipefail
repo="$(cd "$(dirname "$0")/.." && pwd)"
PY=${PYTHON:-python3}

torch_req="torch==2.13.0"
harness_reqs=("lm-eval[api]==0.4.13" "inspect-ai==0.3.285" "openai==3.57.0")
key=$(printf '%s\n' "$("$PY" -c 'import sys; print(sys.version.split()[0])')" "$torch_req" "${harness_reqs[@]}" \
      | sha256sum | cut -c1-16)
cache="${EXECSYS_HARNESS_CACHE:-$HOME/.cache/execsys-test-harness}"
venv="$cache/$key"

mkdir -p "$cache"
# Two test runs at once (two checkouts, a CI run beside a developer's) must not build one venv together:
# the second waits for the first, then finds it complete.
exec 9>"$venv.lock"
flock 9
if [ ! -f "$venv/.complete" ]; then
  start=$(date +%s)
  echo "harness-env: building $venv (first time only)" >&2
  # Built in place (a venv and its console scripts embed their own path); `.complete` marks it whole,
  # so an interrupted build is thrown away and redone rather than half-used.
  rm -rf "$venv"
  "$PY" -m venv "$venv" >&2
  pip=("$venv/bin/python" -m pip install -q --disable-pip-version-check)
  "${pip[@]}" "$torch_req" >&2
  "${pip[@]}" "$torch_req" "${harness_reqs[@]}" >&2
  touch "$venv/.complete"
  echo "harness-env: built in $(( $(date +%s) - start )) s" >&2
fi
# This checkout's execsys: its entry point registers the Inspect hook (dependencies are already there
# after the first time, so this is an editable reinstall of a few seconds).
"$venv/bin/python" -m pip install -q --disable-pip-version-check --no-build-isolation -e "$repo" >&2
flock -u 9
echo "$venv"
