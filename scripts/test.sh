#!/usr/bin/env bash
# Install everything the test suite needs on a fresh Debian machine, then run it.
# Python packages go into a virtual environment (.venv-test/, or $EXECSYS_TEST_VENV), so this works
# on an interpreter that refuses system-wide installs (PEP 668); $PYTHON picks the interpreter.
# Usage: bash scripts/test.sh [pytest args...]
set -euo pipefail
cd "$(dirname "$0")/.."

need_debs=()
command -v sshd >/dev/null 2>&1 || [ -x /usr/sbin/sshd ] || need_debs+=(openssh-server)
command -v ssh >/dev/null 2>&1 || need_debs+=(openssh-client)
command -v b3sum >/dev/null 2>&1 || need_debs+=(b3sum)
command -v git >/dev/null 2>&1 || need_debs+=(git)
command -v cmake >/dev/null 2>&1 || need_debs+=(cmake)
command -v g++ >/dev/null 2>&1 || need_debs+=(g++)
command -v gcc >/dev/null 2>&1 || need_debs+=(gcc)
# libfaketime gives the loopback sshd a host whose clock runs 5 s ahead (clock-skew tests).
ls /usr/lib/*/faketime/libfaketime.so.1 >/dev/null 2>&1 || need_debs+=(libfaketime)
command -v runuser >/dev/null 2>&1 || need_debs+=(util-linux)
# fleet (node checks, issue 12): a real single-node Slurm cluster for tests/test_slurm.py
[ -x /usr/sbin/slurmctld ] || command -v slurmctld >/dev/null 2>&1 || need_debs+=(slurmctld)
[ -x /usr/sbin/slurmd ] || command -v slurmd >/dev/null 2>&1 || need_debs+=(slurmd)
[ -x /usr/sbin/munged ] || command -v munged >/dev/null 2>&1 || need_debs+=(munge)
command -v scontrol >/dev/null 2>&1 || need_debs+=(slurm-client)
if [ ${#need_debs[@]} -gt 0 ]; then
  echo "installing Debian packages: ${need_debs[*]}" >&2
  SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${need_debs[@]}" >/dev/null
fi

BASE_PY=${PYTHON:-python3}
# A stock Debian/Ubuntu interpreter refuses system-wide installs (PEP 668) and may lack venv
# support (python3-venv): everything the tests need goes into .venv-test/, created once, reused.
if ! "$BASE_PY" -c 'import ensurepip, venv' >/dev/null 2>&1; then
  echo "installing Debian package: python3-venv" >&2
  SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  $SUDO apt-get update -qq
  venv_pkg="python3-venv"
  ver=$("$BASE_PY" -c 'import sys; print(f"{sys.version_info[0]}.{sys.version_info[1]}")')
  apt-cache show "python${ver}-venv" >/dev/null 2>&1 && venv_pkg="python${ver}-venv"
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "$venv_pkg" >/dev/null
fi
VENV=${EXECSYS_TEST_VENV:-.venv-test}
if [ ! -x "$VENV/bin/python" ]; then
  # no --system-site-packages: a dependency missing from pyproject must fail here, not hide
  "$BASE_PY" -m venv "$VENV"
fi
PY="$VENV/bin/python"
# the suite starts `execsys`, `python3` and helper scripts as subprocesses: they must be this venv's
export PATH="$PWD/$VENV/bin:$PATH"
export VIRTUAL_ENV="$PWD/$VENV"
# llama-cpp-python compiles llama.cpp (about 6 minutes on 2 cores); pip caches the wheel afterwards.
"$PY" -m pip install -q --disable-pip-version-check -e '.[test]'
# an editable install of another checkout would make this suite test someone else's code
installed=$("$PY" -c 'import execsys, os; print(os.path.dirname(os.path.dirname(os.path.realpath(execsys.__file__))))')
if [ "$installed" != "$(pwd -P)" ]; then
  echo "execsys imports from $installed, not from this checkout $(pwd -P): reinstall with pip install -e ." >&2
  exit 1
fi

# execsys run's tests drive real harnesses from their own cached venv (minutes the first time only).
bash scripts/harness-env.sh >/dev/null
# vLLM's tests serve from its own cached venv (CPU build; about 30 minutes the first time on 2 shared cores).
export EXECSYS_VLLM_VENV="$(bash scripts/vllm-env.sh)"

# Two workers (pytest-xdist): the in-process and CLI tests spread over both cores while every
# integration test runs in one of them (one xdist group), so each server starts once. Measured on
# 2 cores: the whole suite in 0.62x the time of one worker. EXECSYS_TEST_WORKERS=0 runs in one process.
workers=${EXECSYS_TEST_WORKERS:-2}
parallel=()
[ "$workers" != "0" ] && parallel=(-n "$workers" --dist loadgroup)
set +e
"$PY" -m pytest "${parallel[@]}" "$@"
rc=$?
set -e
if [ $rc -eq 5 ]; then
  echo "pytest collected no tests: that is a failure here" >&2
  exit 1
fi
exit $rc
