#!/usr/bin/env bash
# The layer contracts (import-linter) and the types (pyright, basic mode) over the package as it
# installs. Both tools read the installed layout: the repository keeps doctor/, probes/ and tui/
# at top level and maps them to execsys.doctor, execsys.probes and execsys.tui (pyproject
# package-dir), which neither tool can follow in the source tree.
# Usage: bash scripts/static-checks.sh [PYTHON]   (default: the interpreter scripts/test.sh uses)
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${1:-${PYTHON:-python3}}
case $PY in /*) ;; */*) PY="$PWD/$PY" ;; esac   # the checks run from a temp dir
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
"$PY" -m pip install -q --disable-pip-version-check --no-deps --target "$work/site" . \
  >"$work/pip.log" 2>&1 || { cat "$work/pip.log" >&2; exit 1; }
rm -rf build
status=0
echo "== import-linter: layer contracts (pyproject.toml [tool.importlinter])"
(cd "$work" && PYTHONPATH="$work/site" "$PY" -c \
  'import sys; from importlinter.cli import lint_imports_command as lint; lint.main(args=sys.argv[1:], prog_name="lint-imports")' \
  --config "$OLDPWD/pyproject.toml") || status=1
echo "== pyright (basic) over the installed package"
cat >"$work/pyrightconfig.json" <<JSON
{"include": ["site/execsys"], "extraPaths": ["site"], "typeCheckingMode": "basic",
 "pythonVersion": "3.10", "exclude": ["**/__pycache__"]}
JSON
(cd "$work" && "$PY" -m pyright --pythonpath "$(command -v "$PY")" -p pyrightconfig.json) || status=1
exit $status
