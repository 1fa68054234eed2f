#!/usr/bin/env bash
# Probe both SGLang servers of a group (Kubernetes exec probe of the group pod).
#   group-health.sh [PATH]     PATH defaults to /health (200 only when the server can generate)
# Exit 0 only when the spec server (SPEC_PORT, 30001) and the baseline server (BASELINE_PORT,
# 30002) both answer PATH with 200 within HEALTH_TIMEOUT_S (20) seconds each.
set -euo pipefail
path="${1:-/health}"
timeout_s="${HEALTH_TIMEOUT_S:-20}"
for port in "${SPEC_PORT:-30001}" "${BASELINE_PORT:-30002}"; do
    status=""
    { exec 3<>"/dev/tcp/127.0.0.1/$port"; } 2>/dev/null || { echo "port $port: not listening" >&2; exit 1; }
    printf 'GET %s HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n' "$path" >&3
    IFS= read -r -t "$timeout_s" status <&3 || true
    exec 3<&- 3>&- || true
    [[ "$status" == "HTTP/"*" 200"* ]] || { echo "port $port: $path -> ${status:-no answer}" >&2; exit 1; }
done
