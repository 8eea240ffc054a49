#!/usr/bin/env bash
# Mutation testing of the core modules where a wrong answer is silent (issue 18), with mutmut 3.
#
#   bash scripts/mutation.sh            # stage, run every mutant, print the score per module
#   MUTATION_DIR=/tmp/m bash scripts/mutation.sh   # keep the staged tree (and mutmut's cache) there
#
# mutmut names each mutant after its file's path and copies the tree it mutates, so the package is
# staged as it installs (doctor/ -> execsys/doctor/, probes/ and tui/ likewise); the modules and tests are
# [tool.mutmut] in pyproject.toml. Only in-process tests can kill a mutant: a CLI test's subprocess
# imports the unmutated checkout (mutmut's trampolines cannot run outside its tree), so a function
# exercised only through `execsys ...` subprocesses shows as "no tests". Surviving mutants are listed with the reason each is equivalent, from
# scripts/mutation_equivalent.tsv; a survivor without a reason there is a missing test.
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd -P)
PY=${PYTHON:-python3}
"$PY" -c 'import mutmut' 2>/dev/null || "$PY" -m pip install -q --disable-pip-version-check 'mutmut==3.8.1'
work=${MUTATION_DIR:-$(mktemp -d "${TMPDIR:-/tmp}/execsys-mutation.XXXXXX")}
stage="$work/stage"
mkdir -p "$stage"
# a fresh copy of the code each time, mtimes kept (mutmut regenerates mutants only for changed files)
rm -rf "$stage/execsys" "$stage/tests" "$stage/benchmarks"
cp -rp "$repo/execsys" "$stage/execsys"
cp -rp "$repo/doctor" "$stage/execsys/doctor"
cp -rp "$repo/probes" "$stage/execsys/probes"
cp -rp "$repo/tui" "$stage/execsys/tui"
cp -rp "$repo/tests" "$stage/tests"
cp -rp "$repo/benchmarks" "$stage/benchmarks"
cp -p "$repo/pyproject.toml" "$stage/pyproject.toml"
find "$stage" -name __pycache__ -type d -prune -exec rm -rf {} +
rm -f "$stage/tests/test_suite_runs_this_checkout.py"  # it asserts the unstaged layout, by design
cd "$stage"
start=$(date +%s)
"$PY" -m mutmut run --max-children "${MUTATION_JOBS:-2}" >"$work/mutmut-run.log" 2>&1 || {
  tail -40 "$work/mutmut-run.log" >&2
  exit 2
}
"$PY" -m mutmut results --all true >"$work/results.txt"
echo "mutmut run: $(( $(date +%s) - start )) s; staged tree and logs in $work"
exec "$PY" "$repo/scripts/mutation_report.py" "$work/results.txt" "$repo/scripts/mutation_equivalent.tsv"
