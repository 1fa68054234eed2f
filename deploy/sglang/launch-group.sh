#!/usr/bin/env bash
# Run BOTH SGLang servers of a group in one container (one Kubernetes pod per GPU node),
# in the order the planner's memory fractions assume: the spec server first; the baseline
# server only once the spec server answers GET /health with 200 (it measures the GPU memory
# the spec server left free). Then supervise: if either server exits, stop the other and exit
# with its status (the pod restarts as a whole). SIGTERM/SIGINT are passed to both servers.
#
#   launch-group.sh [--env-file FILE]
#
# Once both are healthy and ROUTER_ADMIN_URLS/ROUTER_ADMIN_DNS is set, it asks the routers to
# resume this group (prestop_drain.py --resume).
# Env as for launch-server.sh, plus SGLANG_STARTUP_TIMEOUT_S (3600: large checkpoints load
# slowly), SGLANG_HEALTH_TIMEOUT_S (20, one /health probe), SGLANG_HEALTH_POLL_S (2).
set -euo pipefail

here="$(cd "$(dirname "$0")" && pwd)"
launcher="${LAUNCH_SERVER:-$here/launch-server.sh}"
env_args=()
if [ "${1:-}" = --env-file ]; then env_args=(--env-file "$2"); shift 2; fi

startup_timeout="${SGLANG_STARTUP_TIMEOUT_S:-3600}"
probe_timeout="${SGLANG_HEALTH_TIMEOUT_S:-20}"
poll_s="${SGLANG_HEALTH_POLL_S:-2}"
spec_port="${SPEC_PORT:-30001}"
baseline_port="${BASELINE_PORT:-30002}"

log() { echo "launch-group: $*" >&2; }

# GET /health over bash's /dev/tcp (no curl needed); true on HTTP 200.
healthy() {
    local port="$1" status=""
    { exec 3<>"/dev/tcp/127.0.0.1/$port"; } 2>/dev/null || return 1
    printf 'GET /health HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n' >&3
    IFS= read -r -t "$probe_timeout" status <&3 || true
    exec 3<&- 3>&- || true
    [[ "$status" == "HTTP/"*" 200"* ]]
}

spec_pid="" baseline_pid=""
stop_all() {
    local sig="${1:-TERM}"
    for pid in $baseline_pid $spec_pid; do kill -s "$sig" "$pid" 2>/dev/null || true; done
}
on_signal() {
    log "event=stopping signal=$1"
    trap - TERM INT
    stop_all TERM
    wait || true
    exit 0
}
trap 'on_signal TERM' TERM
trap 'on_signal INT' INT

wait_healthy() {
    local role="$1" port="$2" pid="$3" start=$SECONDS
    while ! healthy "$port"; do
        if ! kill -0 "$pid" 2>/dev/null; then
            local rc=0; wait "$pid" || rc=$?
            log "event=exited_during_startup role=$role rc=$rc"
            stop_all TERM; exit "$(( rc == 0 ? 1 : rc ))"
        fi
        if (( SECONDS - start > startup_timeout )); then
            log "event=startup_timeout role=$role after_s=$startup_timeout"
            stop_all TERM; exit 1
        fi
        sleep "$poll_s"
    done
    log "event=healthy role=$role port=$port after_s=$(( SECONDS - start ))"
}

"$launcher" "${env_args[@]}" spec &
spec_pid=$!
log "event=started role=spec pid=$spec_pid"
wait_healthy spec "$spec_port" "$spec_pid"

"$launcher" "${env_args[@]}" baseline &
baseline_pid=$!
log "event=started role=baseline pid=$baseline_pid"
wait_healthy baseline "$baseline_port" "$baseline_pid"
log "event=group_ready spec_port=$spec_port baseline_port=$baseline_port"
if [ -n "${ROUTER_ADMIN_URLS:-}${ROUTER_ADMIN_DNS:-}" ]; then
    # undo a drain left by this pod's previous life (see prestop_drain.py --resume)
    python3 "$here/prestop_drain.py" --resume || true
fi

rc=0
wait -n "$spec_pid" "$baseline_pid" || rc=$?
log "event=server_exited rc=$rc: stopping the other server"
stop_all TERM
wait || true
exit "$(( rc == 0 ? 1 : rc ))"
