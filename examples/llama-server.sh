#!/usr/bin/env bash
# Start, stop or restart a local llama.cpp server (llama-cpp-python's `python -m llama_cpp.server`),
# tracked by a pidfile, and wait until it answers. It is the restart command of the quickstart:
#
#   bash llama-server.sh start       # serve $MODEL on 127.0.0.1:$PORT, return once /v1/models answers
#   execsys probe restart --endpoint http://127.0.0.1:8000/v1 --cases cases.jsonl \
#       --restart 'bash llama-server.sh restart'
#   bash llama-server.sh stop
#
# MODEL (default models/tiny.gguf), PORT (8000), ALIAS (tiny), N_CTX (256), PYTHON (python3: the one
# with llama-cpp-python), EXTRA (more server flags, e.g. "--n_threads 1"), PIDFILE (server.pid) and
# LOG (server.log) change what it starts. A restart starts exactly the same command again, so a
# restart probe measures the restart alone; change EXTRA between the two to see execsys name the change.
set -euo pipefail

MODEL=${MODEL:-models/tiny.gguf}
PORT=${PORT:-8000}
ALIAS=${ALIAS:-tiny}
N_CTX=${N_CTX:-256}
PYTHON=${PYTHON:-python3}
PIDFILE=${PIDFILE:-server.pid}
LOG=${LOG:-server.log}
READY_TIMEOUT=${READY_TIMEOUT:-120}

stop() {
  [ -f "$PIDFILE" ] || return 0
  local pid
  pid=$(cat "$PIDFILE")
  # its own process group (setsid below): the server and anything it started go together
  kill -TERM -- "-$pid" 2>/dev/null || true
  for _ in $(seq 100); do
    kill -0 "$pid" 2>/dev/null || break
    # a zombie (exited, its parent has not reaped it yet) has already let go of the port
    [ "$(sed 's/.*) //' "/proc/$pid/stat" 2>/dev/null | cut -d' ' -f1)" = Z ] && break
    sleep 0.1
  done
  kill -KILL -- "-$pid" 2>/dev/null || true
  rm -f "$PIDFILE"
}

start() {
  # shellcheck disable=SC2086  # EXTRA is a list of flags
  setsid "$PYTHON" -m llama_cpp.server --model "$MODEL" --model_alias "$ALIAS" \
    --host 127.0.0.1 --port "$PORT" --n_ctx "$N_CTX" ${EXTRA:-} </dev/null >>"$LOG" 2>&1 &
  echo $! >"$PIDFILE"
  # ready when /v1/models answers 200 (the stdlib only: no curl needed)
  "$PYTHON" - "$PORT" "$READY_TIMEOUT" "$(cat "$PIDFILE")" <<'PY'
import os, sys, time, urllib.request
port, timeout, pid = sys.argv[1], float(sys.argv[2]), int(sys.argv[3])
deadline = time.monotonic() + timeout
while time.monotonic() < deadline:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        sys.exit(f"llama.cpp server exited before it answered: see the log")
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/v1/models", timeout=2) as answer:
            if answer.status == 200:
                sys.exit(0)
    except OSError:
        pass
    time.sleep(0.2)
sys.exit(f"llama.cpp server on port {port} did not answer within {timeout:.0f} s: see the log")
PY
}

case "${1:-}" in
  start) start ;;
  stop) stop ;;
  restart) stop; start ;;
  *) echo "usage: bash llama-server.sh start|stop|restart" >&2; exit 2 ;;
esac
