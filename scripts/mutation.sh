#!/usr/bin/env bash
# Mutation testing of the core modules where a wrong answer is silent (issue 18), with mutmut 3.
#
#   bash scripts/mutation.sh                  # every module below, one after another, then the score
#   bash scripts/mutation.sh stats compare    # only those modules (the others' last results still count)
#   MUTATION_DIR=/tmp/m bash scripts/mutation.sh   # keep the staged trees (and mutmut's caches) there
#   bash scripts/mutation.sh --report         # print the score from the last runs in MUTATION_DIR
#   bash scripts/mutation.sh --recheck cases  # after adding tests: re-run only that module's survivors
#                                             # that have no reason yet, against the current tests
#
# Each module is mutated on its own, in its own staged tree, with only the fast in-process tests that
# cover it (the table below), so one module's run fits a shared 2-core machine; run it under
# `nice -n 10` there. A full run takes about 40 minutes on 2 cores, too long for .ci/run.
#
# mutmut names each mutant after its file's path and copies the tree it mutates, so the package is
# staged as it installs (doctor/ -> execsys/doctor/, probes/ and tui/ likewise). Only in-process tests
# can kill a mutant: a CLI test's subprocess imports the unmutated checkout (mutmut's trampolines cannot
# run outside its tree), so a function exercised only through `execsys ...` subprocesses shows as
# "no tests". Surviving mutants are listed with the reason each is equivalent, from
# scripts/mutation_equivalent.tsv; a survivor without a reason there is a missing test (exit 1).
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd -P)
PY=${PYTHON:-python3}
# the runs cd into the staged tree: a relative interpreter path must not change meaning there
[[ "$PY" == */* ]] && PY="$(cd "$(dirname "$PY")" && pwd)/$(basename "$PY")"
work=${MUTATION_DIR:-${TMPDIR:-/tmp}/execsys-mutation}

# module name | file(s) mutated (staged layout, space-separated) | the fast tests that kill its mutants [| per-test timeout, s]
# (the timeout defaults to 120 s; a mutant that makes a test hang costs that long, so a module whose
# tests each finish in seconds says so)
modules=(
  "stats|execsys/stats.py|tests/test_stats.py tests/test_stats_golden.py tests/test_stats_sizing.py"
  "canonical|execsys/canonical.py|tests/test_canonical_golden.py"
  "quant|execsys/quant.py|tests/test_quant.py tests/test_quant_table_golden.py tests/test_quant_verdicts.py"
  "agreement|execsys/probes/agreement.py|tests/test_probe_arithmetic.py::test_the_one_fold_excludes_errored_cases_and_locates_the_first_differing_pass tests/test_probe_agreement.py"
  "cases|execsys/probes/cases.py|tests/test_probe_cases.py"
  "compare|execsys/compare.py|tests/compare/test_compare.py tests/compare/test_verdict.py tests/compare/test_results.py"
  "scope|execsys/scope.py|tests/test_scope.py tests/test_scope_licence.py"
  "digest|execsys/digest.py|tests/test_digest_files_and_trees.py|20"
  "identity|execsys/identity/*.py|tests/identity/test_golden.py tests/identity/test_verify.py tests/identity/test_pin.py tests/identity/test_lock.py tests/identity/test_diff.py tests/identity/test_redaction.py tests/identity/test_engine.py tests/identity/test_notes.py tests/identity/test_live.py tests/identity/test_refs.py tests/identity/test_environment.py tests/identity/test_untrusted.py|90"
  "runner|execsys/doctor/runner.py|tests/test_doctor_runner.py tests/test_doctor_runner_reports.py|30"
  # the decision tables (issue 26): every test in them runs in milliseconds
  "run.record|execsys/run/record.py|tests/test_run_decisions.py tests/test_run_record_decisions.py|30"
  "run.gate|execsys/run/gate.py|tests/test_run_decisions.py tests/test_run_gate_decisions.py tests/test_run_gate.py|30"
  "run.watch|execsys/run/watch.py|tests/test_run_decisions.py tests/test_run_watch_decisions.py|30"
  "run.results|execsys/run/results.py|tests/test_run_decisions.py tests/test_run_result_decisions.py|30"
  "harnesses.lm_eval|execsys/harnesses/lm_eval.py|tests/test_run_decisions.py tests/test_lm_eval_adapter_decisions.py|30"
  "fleet|execsys/fleet/*.py|tests/test_fleet_decisions.py tests/test_fleet_report_decisions.py tests/test_fleet_facts_decisions.py tests/test_fleet_options_decisions.py|30"
  "redact|execsys/redact.py|tests/test_redact_decisions.py tests/test_redact_properties.py tests/test_reliability_redact.py::test_a_megabyte_without_spaces_is_redacted_in_linear_time tests/test_reliability_redact.py::test_secrets_inside_a_megabyte_run_are_still_found tests/test_reliability_redact.py::test_credentials_inside_a_key_value_list_argument_are_redacted_and_settings_stay_readable tests/test_reliability_redact.py::test_scrub_redacts_keys_and_keeps_colliding_ones_apart|60"
  "doctor.node_checks.check|execsys/doctor/node_checks/check.py|tests/test_node_check_decisions.py|30"
  "doctor.node_checks.npd|execsys/doctor/node_checks/npd.py|tests/test_node_check_decisions.py|30"
  "doctor.node_checks.slurm|execsys/doctor/node_checks/slurm.py|tests/test_node_check_decisions.py|30"
  "doctor.node_checks.slurm_prolog|execsys/doctor/node_checks/slurm_prolog.py|tests/test_node_check_decisions.py|30"
  "doctor.node_checks.nhc|execsys/doctor/node_checks/nhc.py|tests/test_node_check_decisions.py|30"
  "doctor.hazards.clock_skew|execsys/doctor/hazards/clock_skew.py|tests/test_hazard_thresholds.py tests/test_hazard_decisions_a.py|30"
  "doctor.hazards.unread_env_config|execsys/doctor/hazards/unread_env_config.py|tests/test_hazard_thresholds.py tests/test_hazard_decisions_a.py|30"
  "doctor.hazards.stub_executables|execsys/doctor/hazards/stub_executables.py|tests/test_hazard_thresholds.py tests/test_hazard_decisions_a.py|30"
  "doctor.hazards.interop_mangling|execsys/doctor/hazards/interop_mangling.py|tests/test_hazard_thresholds.py tests/test_hazard_decisions_a.py|30"
  "doctor.remote|execsys/doctor/remote.py|tests/test_hazard_thresholds.py tests/test_doctor_peer_decisions.py|30"
  "plan.checks|execsys/plan/checks.py|tests/test_plan_decisions.py tests/test_plan_checks.py tests/test_plan_check_plan_decisions.py|30"
  "plan.paired|execsys/plan/paired.py|tests/test_plan_decisions.py|30"
  "probes.margin|execsys/probes/margin.py|tests/test_margin_decisions.py|30"
  "ledger|execsys/ledger.py|tests/test_ledger_decisions.py tests/test_ledger.py|60"
  "tui.state|execsys/tui/state.py|tests/test_tui_gate_decisions.py tests/test_tui_state.py|30"
  "probes.store|execsys/probes/store.py|tests/test_probe_store_keys.py|30"
  "harnesses.inspect|execsys/harnesses/inspect.py execsys/harnesses/inspect_names.py|tests/test_inspect_adapter_decisions.py|30"
  "observe.vocabulary|execsys/observe/vocabulary.py|tests/test_observe_served_decisions.py|30"
  "observe.served|execsys/observe/served.py|tests/test_observe_served_decisions.py|30"
  # issue 26, every engine module: each line's tests are the fast in-process ones that cover it
  "run.runner|execsys/run/runner.py|tests/test_run_runner_decisions.py|30"
  "run.attach|execsys/run/attach.py|tests/test_run_attach_decisions.py|30"
  "run.options|execsys/run/options.py|tests/test_run_options_decisions.py|30"
  "run.drift|execsys/run/drift.py|tests/test_run_drift_decisions.py|30"
  "run.history|execsys/run/history.py|tests/test_run_history_decisions.py|30"
  "run.shard|execsys/run/shard.py|tests/test_run_shard_decisions.py|30"
  "harnesses.base|execsys/harnesses/base.py execsys/harnesses/registry.py|tests/test_harness_base_decisions.py|30"
  "harnesses.other|execsys/harnesses/other.py|tests/test_harness_other_decisions.py|30"
  "harnesses.inspect_hook|execsys/harnesses/inspect_hook.py|tests/test_inspect_hook_decisions.py|30"
  "plan.log|execsys/plan/log.py|tests/test_plan_log_decisions.py|30"
  "plan.placement|execsys/plan/placement.py|tests/test_plan_placement_decisions.py|30"
  "plan.run|execsys/plan/run.py|tests/test_plan_run_decisions.py|30"
  "plan.schedule|execsys/plan/schedule.py|tests/test_plan_schedule_decisions.py tests/test_plan_golden.py|30"
  "plan.system|execsys/plan/system.py|tests/test_plan_system_decisions.py|30"
  "doctor.hazards.baked_paths|execsys/doctor/hazards/baked_paths.py|tests/test_hazard_thresholds.py tests/test_hazard_decisions_a.py|30"
  "doctor.hazards.binary_aliasing|execsys/doctor/hazards/binary_aliasing.py|tests/test_hazard_decisions_b.py|30"
  "doctor.hazards.lost_mode_bits|execsys/doctor/hazards/lost_mode_bits.py|tests/test_hazard_decisions_b.py|30"
  "doctor.hazards.model_name_honesty|execsys/doctor/hazards/model_name_honesty.py|tests/test_hazard_decisions_b.py|30"
  "doctor.hazards.package_prefixes|execsys/doctor/hazards/package_prefixes.py|tests/test_hazard_decisions_b.py|30"
  "doctor.hazards.port_collisions|execsys/doctor/hazards/port_collisions.py|tests/test_hazard_decisions_b.py|30"
  "probes.runner|execsys/probes/runner.py|tests/test_probe_runner_decisions.py|30"
  "probes.axes|execsys/probes/axes/*.py|tests/test_probe_axes_decisions.py|30"
  "observe.artifact|execsys/observe/artifact.py|tests/test_observe_artifact_decisions.py|30"
  "observe.context_policy|execsys/observe/context_policy.py|tests/test_observe_context_policy_decisions.py|30"
  "observe.environment|execsys/observe/environment.py|tests/test_observe_environment_decisions.py|30"
  "observe.grader|execsys/observe/grader.py|tests/test_observe_grader_decisions.py|30"
  "observe.harness|execsys/observe/harness.py|tests/test_observe_harness_decisions.py|30"
  "observe.http|execsys/observe/http.py|tests/test_observe_http_decisions.py|30"
  "observe.tools|execsys/observe/tools.py execsys/observe/workflow.py|tests/test_observe_tools_decisions.py|30"
  "observe.passmemo|execsys/observe/passmemo.py|tests/test_observe_passmemo_decisions.py|30"
  "observe.hardware|execsys/observe/hardware.py|tests/test_observe_hardware_decisions.py|30"
  "observe.kernels|execsys/observe/kernels.py|tests/test_observe_kernels_decisions.py|30"
  "observe.listener|execsys/observe/listener.py|tests/test_observe_listener_decisions.py tests/test_observe_listener.py::test_one_pass_shares_one_scan_and_the_next_pass_sees_the_change tests/test_observe_listener.py::test_ports_default_by_scheme_and_a_bad_port_is_no_port|30"
  "observe.model_signature|execsys/observe/model_signature.py|tests/test_observe_model_signature_decisions.py|30"
  "observe.runtime|execsys/observe/runtime.py|tests/test_observe_runtime_decisions.py|30"
  "observe.stack|execsys/observe/stack.py|tests/test_observe_stack_decisions.py|30"
  "observe.engines|execsys/observe/engines/*.py|tests/test_observe_engines_decisions.py tests/test_vllm_readers.py|30"
)

report() {
  local results="$work/results.txt"
  : >"$results"
  for entry in "${modules[@]}"; do
    local name=${entry%%|*}
    [[ -f "$work/$name/results.txt" ]] && cat "$work/$name/results.txt" >>"$results"
  done
  exec "$PY" "$repo/scripts/mutation_report.py" "$results" "$repo/scripts/mutation_equivalent.tsv"
}

run_module() {
  local name=$1 file=$2 tests=$3 timeout=${4:-120}
  local stage="$work/$name"
  local existing=()
  for t in $tests; do [[ -f "$repo/${t%%::*}" ]] && existing+=("$t"); done
  mkdir -p "$stage"
    rm -rf "$stage/execsys" "$stage/tests"
  cp -rp "$repo/execsys" "$stage/execsys"
  cp -rp "$repo/doctor" "$stage/execsys/doctor"
  cp -rp "$repo/probes" "$stage/execsys/probes"
  cp -rp "$repo/tui" "$stage/execsys/tui"
  cp -rp "$repo/tests" "$stage/tests"
  find "$stage" -name __pycache__ -type d -prune -exec rm -rf {} +
  rm -f "$stage/tests/test_suite_runs_this_checkout.py"  # it asserts the unstaged layout, by design
  {
    cat "$repo/pyproject.toml"
    echo
    echo "[tool.mutmut]"
    echo 'source_paths = ["execsys"]'
    # one or more files (or globs, left for mutmut to match), separated by spaces
    local patterns
    read -r -a patterns <<<"$file"
    echo "only_mutate = [$(printf '"%s", ' "${patterns[@]}")]"
    # the SSH paths need the staged tree on the remote side, and "nobody" cannot read the staged copy.
    # -k matches substrings of test names: a test named "... host ..." is left out too, so the tests
    # written for mutants avoid those words
    echo "pytest_add_cli_args = [\"-p\", \"no:cacheprovider\", \"-q\", \"--timeout=$timeout\", \"-k\", \"not remote and not ssh and not host and not unprivileged\"]"
    # mutmut's own wall limit is 15x the covering tests' duration in its stats run, which a loaded machine
    # overruns (a survivor then counts as a "timeout", a kill); where pytest bounds each test, that
    # limit is only a backstop
    (( timeout < 120 )) && echo "timeout_multiplier = 1000"
    # blake3's thread pool, started in mutmut's own process by the stats run, does not survive a fork:
    # a worker forked from it waits forever on the first multi-threaded hash. Fork from a clean server.
    [[ "$name" == digest ]] && echo 'process_isolation = "forkserver"'
    printf 'pytest_add_cli_args_test_selection = ['
    printf '"%s", ' "${existing[@]}"
    echo ']'
  } >"$stage/pyproject.toml.new"
  mv "$stage/pyproject.toml.new" "$stage/pyproject.toml"
  # mutmut keeps a survivor's verdict when only the tests changed: start each module from scratch
  rm -rf "$stage/mutants"
  local start
  start=$(date +%s)
  (cd "$stage" && "$PY" -m mutmut run --max-children "${MUTATION_JOBS:-2}" >"$stage/mutmut-run.log" 2>&1) || {
    tail -40 "$stage/mutmut-run.log" >&2
    exit 2
  }
  (cd "$stage" && "$PY" -m mutmut results --all true) >"$stage/results.txt"
  echo "$name: mutmut run $(( $(date +%s) - start )) s, ${#existing[@]} test file(s); log in $stage/mutmut-run.log"
}

recheck_module() {
  local name=$1 stage="$work/$1"
  [[ -f "$stage/results.txt" ]] || { echo "mutation.sh: no earlier run of '$name' in $work" >&2; exit 2; }
  local names
  names=$(grep ': survived$' "$stage/results.txt" | sed 's/: survived$//; s/^ *//' \
    | grep -v -x -F -f <(cut -f1 "$repo/scripts/mutation_equivalent.tsv" | grep -v '^#') || true)
  [[ -n "$names" ]] || { echo "$name: no survivor without a reason"; return; }
  rm -rf "$stage/tests" "$stage/mutants/tests"
  cp -rp "$repo/tests" "$stage/tests"
  cp -rp "$repo/tests" "$stage/mutants/tests"
  rm -f "$stage/tests/test_suite_runs_this_checkout.py" "$stage/mutants/tests/test_suite_runs_this_checkout.py"
  # a test file added to the module's line since the run is selected too (mutmut collects its stats)
  local entry tests selection existing=()
  entry=$(printf '%s\n' "${modules[@]}" | grep "^$name|")
  IFS='|' read -r _ _ tests _ <<<"$entry"
  for t in $tests; do [[ -f "$repo/${t%%::*}" ]] && existing+=("$t"); done
  selection="pytest_add_cli_args_test_selection = [$(printf '"%s", ' "${existing[@]}")]"
  for toml in "$stage/pyproject.toml" "$stage/mutants/pyproject.toml"; do
    [[ -f "$toml" ]] && sed -i "s|^pytest_add_cli_args_test_selection = .*|$selection|" "$toml"
  done
  # shellcheck disable=SC2086  # one argument per mutant name
  (cd "$stage" && "$PY" -m mutmut run --max-children "${MUTATION_JOBS:-2}" $names >"$stage/recheck.log" 2>&1) || {
    tail -40 "$stage/recheck.log" >&2
    exit 2
  }
  # the run resets every mutant it was not given to "not checked": keep their earlier verdicts
  (cd "$stage" && "$PY" -m mutmut results --all true) >"$stage/results.after.txt"
  # shellcheck disable=SC2086  # one name per line
  printf '%s\n' $names >"$stage/rechecked.txt"
  "$PY" "$repo/scripts/mutation_report.py" --merge "$stage/results.txt" "$stage/results.after.txt" \
    "$stage/rechecked.txt" >"$stage/results.txt.new"
  mv "$stage/results.txt.new" "$stage/results.txt"
  echo "$name: re-checked $(wc -w <<<"$names") survivor(s)"
}

"$PY" -c 'import mutmut' 2>/dev/null || "$PY" -m pip install -q --disable-pip-version-check 'mutmut==3.8.1'
mkdir -p "$work"
if [[ "${1:-}" == "--report" ]]; then report; fi
if [[ "${1:-}" == "--recheck" ]]; then
  shift
  for name in "$@"; do recheck_module "$name"; done
  report
fi
wanted=("$@")
for want in "${wanted[@]}"; do
  printf '%s\n' "${modules[@]}" | grep -q "^$want|" || { echo "mutation.sh: unknown module '$want'" >&2; exit 2; }
done
for entry in "${modules[@]}"; do
  IFS='|' read -r name file tests timeout <<<"$entry"
  if (( ${#wanted[@]} == 0 )) || [[ " ${wanted[*]} " == *" $name "* ]]; then
    run_module "$name" "$file" "$tests" "$timeout"
  fi
done
report
