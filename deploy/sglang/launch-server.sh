#!/usr/bin/env bash
# Start ONE SGLang server of a specswitch group from the planner's settings.
#
#   launch-server.sh [--env-file FILE] [--dry-run] spec|baseline [extra sglang args...]
#
# Settings come from the environment (docker compose passes the .env written by
# `specswitch layout plan --format env`; Kubernetes passes the plan ConfigMap), or from
# --env-file FILE (KEY=VALUE lines, values taken literally; the environment wins).
# Plan names: MODEL_PATH SERVED_MODEL_NAME TP_SIZE SPEC_ALGORITHM DRAFT_MODEL_PATH
#   SPEC_NUM_STEPS SPEC_EAGLE_TOPK SPEC_NUM_DRAFT_TOKENS SPEC_MEM_FRACTION BASELINE_MEM_FRACTION
#   SPEC_MAX_RUNNING_REQUESTS BASELINE_MAX_RUNNING_REQUESTS CONTEXT_LENGTH KV_CACHE_DTYPE
# Deployment knobs (defaults): SGLANG_HOST (0.0.0.0), SPEC_PORT (30001), BASELINE_PORT (30002),
#   SPEC_NCCL_PORT (31001), BASELINE_NCCL_PORT (32001), SGLANG_LAUNCH ("python3 -m
#   sglang.launch_server"), SGLANG_EXTRA_ARGS, SPEC_EXTRA_ARGS, BASELINE_EXTRA_ARGS
#   (word-split, for flags such as --trust-remote-code).
# Both servers always get --enable-metrics (the router scrapes them), --enable-cache-report
# (usage then carries prompt_tokens_details.cached_tokens, which the router's KV-aware layer
# reads to correct its prefix-cache estimates) and an explicit --mem-fraction-static: the second
# server measures free memory at startup, so the planner's fraction for it assumes the spec
# server is already up (start order: spec, then baseline).
# --dry-run prints the command, one argument per line, instead of running it.
set -euo pipefail

die() { echo "launch-server: error: $*" >&2; exit 2; }

env_file="" dry_run=0
while [ $# -gt 0 ]; do
    case "$1" in
        --env-file) [ $# -ge 2 ] || die "--env-file needs a path"; env_file="$2"; shift 2 ;;
        --env-file=*) env_file="${1#*=}"; shift ;;
        --dry-run) dry_run=1; shift ;;
        -h|--help) sed -n '2,20p' "$0"; exit 0 ;;
        *) break ;;
    esac
done
[ $# -ge 1 ] || die "which server? usage: launch-server.sh [--env-file FILE] [--dry-run] spec|baseline"
role="$1"; shift
case "$role" in spec|baseline) ;; *) die "role must be spec or baseline, got '$role'" ;; esac

if [ -n "$env_file" ]; then
    [ -r "$env_file" ] || die "cannot read env file '$env_file'"
    while IFS= read -r line || [ -n "$line" ]; do
        line="${line%$'\r'}"
        case "$line" in ''|'#'*) continue ;; esac
        key="${line%%=*}"; value="${line#*=}"
        key="${key#export }"; key="${key// /}"
        [[ "$key" =~ ^[A-Za-z_][A-Za-z0-9_]*$ ]] || die "bad line in $env_file: $line"
        if [[ "$value" =~ ^\"(.*)\"$ || "$value" =~ ^\'(.*)\'$ ]]; then value="${BASH_REMATCH[1]}"; fi
        [ -n "${!key+x}" ] || export "$key=$value"
    done < "$env_file"
fi

plan_hint="write the plan first: specswitch layout plan ... --format env --output .env"
need() { [ -n "${!1:-}" ] || die "$1 is not set ($2); $plan_hint"; }
is_fraction() { [[ "$1" =~ ^0?\.[0-9]+$ ]] && [[ ! "$1" =~ ^0?\.0+$ ]]; }
is_int() { [[ "$1" =~ ^[0-9]+$ ]] && [ "$1" -gt 0 ]; }

need MODEL_PATH "model to serve"
need TP_SIZE "tensor-parallel size"
is_int "$TP_SIZE" || die "TP_SIZE must be a positive integer, got '$TP_SIZE'"

if [ "$role" = spec ]; then
    port="${SPEC_PORT:-30001}" nccl_port="${SPEC_NCCL_PORT:-31001}"
    fraction_var=SPEC_MEM_FRACTION mrr_var=SPEC_MAX_RUNNING_REQUESTS
    extra_var=SPEC_EXTRA_ARGS
else
    port="${BASELINE_PORT:-30002}" nccl_port="${BASELINE_NCCL_PORT:-32001}"
    fraction_var=BASELINE_MEM_FRACTION mrr_var=BASELINE_MAX_RUNNING_REQUESTS
    extra_var=BASELINE_EXTRA_ARGS
fi
need "$fraction_var" "--mem-fraction-static of the $role server"
is_fraction "${!fraction_var}" || die "$fraction_var must be a fraction in (0, 1), got '${!fraction_var}'"

read -r -a launch <<< "${SGLANG_LAUNCH:-python3 -m sglang.launch_server}"
args=(
    --model-path "$MODEL_PATH"
    --tp-size "$TP_SIZE"
    --host "${SGLANG_HOST:-0.0.0.0}"
    --port "$port"
    --nccl-port "$nccl_port"
    --mem-fraction-static "${!fraction_var}"
    --enable-metrics
    --enable-cache-report
)
[ -z "${SERVED_MODEL_NAME:-}" ] || args+=(--served-model-name "$SERVED_MODEL_NAME")
if [ -n "${!mrr_var:-}" ]; then
    is_int "${!mrr_var}" || die "$mrr_var must be a positive integer, got '${!mrr_var}'"
    args+=(--max-running-requests "${!mrr_var}")
fi
if [ -n "${CONTEXT_LENGTH:-}" ]; then
    is_int "$CONTEXT_LENGTH" || die "CONTEXT_LENGTH must be a positive integer, got '$CONTEXT_LENGTH'"
    args+=(--context-length "$CONTEXT_LENGTH")
fi
[ -z "${KV_CACHE_DTYPE:-}" ] || args+=(--kv-cache-dtype "$KV_CACHE_DTYPE")

if [ "$role" = spec ]; then
    need SPEC_ALGORITHM "EAGLE3 or NEXTN"
    case "$SPEC_ALGORITHM" in
        EAGLE|EAGLE3) need DRAFT_MODEL_PATH "draft model for $SPEC_ALGORITHM" ;;
        NEXTN) ;;
        *) die "SPEC_ALGORITHM must be EAGLE3, EAGLE or NEXTN, got '$SPEC_ALGORITHM'" ;;
    esac
    args+=(--speculative-algorithm "$SPEC_ALGORITHM")
    [ -z "${DRAFT_MODEL_PATH:-}" ] || args+=(--speculative-draft-model-path "$DRAFT_MODEL_PATH")
    set_count=0
    for v in SPEC_NUM_STEPS SPEC_EAGLE_TOPK SPEC_NUM_DRAFT_TOKENS; do
        if [ -n "${!v:-}" ]; then
            is_int "${!v}" || die "$v must be a positive integer, got '${!v}'"
            set_count=$((set_count + 1))
        fi
    done
    case "$set_count" in
        0) ;;
        3) args+=(--speculative-num-steps "$SPEC_NUM_STEPS"
                  --speculative-eagle-topk "$SPEC_EAGLE_TOPK"
                  --speculative-num-draft-tokens "$SPEC_NUM_DRAFT_TOKENS") ;;
        *) die "set all of SPEC_NUM_STEPS, SPEC_EAGLE_TOPK, SPEC_NUM_DRAFT_TOKENS or none (SGLang requires it)" ;;
    esac
fi

read -r -a common_extra <<< "${SGLANG_EXTRA_ARGS:-}"
read -r -a role_extra <<< "${!extra_var:-}"
cmd=("${launch[@]}" "${args[@]}" "${common_extra[@]}" "${role_extra[@]}" "$@")

if [ "$dry_run" = 1 ]; then
    printf '%s\n' "${cmd[@]}"
    exit 0
fi
echo "launch-server: role=$role port=$port mem_fraction_static=${!fraction_var} cmd=${cmd[*]}" >&2
exec "${cmd[@]}"
