# Shared helpers for scripts/*. Source it; do not run it.
# shellcheck shell=bash

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
export REPO
_HR_T0=${_HR_T0:-$(date +%s.%N)}

_hr_name() { basename "${0}"; }

# say MSG...  -> "[name +1.2s] MSG" on stderr (stdout stays clean for `services env`).
say() {
    printf '[%s +%ss] %s\n' "$(_hr_name)" "$(elapsed_since "$_HR_T0")" "$*" >&2
}

die() {
    printf '[%s] ERROR: %s\n' "$(_hr_name)" "$*" >&2
    exit 1
}

# elapsed_since T0 -> seconds with one decimal
elapsed_since() {
    awk -v a="$1" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }'
}

# The state directory of the test services (docker data-root, registry storage, logs, pid files).
HR_STATE="${HARNESS_RUN_STATE:-$REPO/.ci-state}"
mkdir -p "$HR_STATE" 2>/dev/null || true
HR_STATE="$(cd "$HR_STATE" && pwd)"
# Unix sockets (docker.sock, containerd's, the shims') must stay under ~100 bytes: keep the runtime
# directory short, derived from the state dir so that every command finds the same one.
HR_RUN="/tmp/hr-ci-$(printf '%s' "$HR_STATE" | sha256sum | cut -c1-10)"
HR_REGISTRY_PORT="${HARNESS_RUN_REGISTRY_PORT:-5000}"
HR_REGISTRY="127.0.0.1:$HR_REGISTRY_PORT"
HR_DOCKER_SOCK="$HR_RUN/docker.sock"
HR_DOCKER_HOST="unix://$HR_DOCKER_SOCK"
HR_BASE_IMAGE="${HARNESS_RUN_TEST_BASE_IMAGE:-harness-run/base:trixie}"
export HR_STATE HR_RUN HR_REGISTRY HR_DOCKER_HOST HR_BASE_IMAGE

# Make the registry proxy's CA bundle visible to every TLS client we start (uv, pip, curl).
if [[ -n "${PIP_CERT:-}" && -f "${PIP_CERT}" ]]; then
    export SSL_CERT_FILE="${SSL_CERT_FILE:-$PIP_CERT}"
    export REQUESTS_CA_BUNDLE="${REQUESTS_CA_BUNDLE:-$PIP_CERT}"
fi
