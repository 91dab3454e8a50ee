#!/usr/bin/env bash
# Schemathesis against a live `kaas serve` (issue 38): the OpenAPI document and the server
# must agree, and no request may get a 5xx.
#
#   scripts/schemathesis.sh [MAX_EXAMPLES]      (default 15 per operation)
#
# Installs schemathesis into a virtual environment under .dev/schemathesis (PyPI), builds
# the release `kaas`, serves the shipped catalog on a fresh SQLite file, creates a
# submitter token, and runs every check with it. Exits with schemathesis's status.
set -euo pipefail
cd "$(dirname "$0")/.."
max="${1:-15}"
venv=.dev/schemathesis
[[ -x "$venv/bin/schemathesis" ]] || { python3 -m venv "$venv" && "$venv/bin/pip" install -q schemathesis; }
cargo build --release --bin kaas
work="$(mktemp -d)"
db="sqlite://$work/kaas.db?mode=rwc"
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
target/release/kaas serve --bind "127.0.0.1:$port" --database-url "$db" --catalog kernels >"$work/serve.log" 2>&1 &
server=$!
trap 'kill $server 2>/dev/null; rm -rf "$work"' EXIT
for _ in $(seq 100); do curl -sf "http://127.0.0.1:$port/v1/health/ready" >/dev/null && break; sleep 0.2; done
token="$(target/release/kaas token create --name schemathesis --role submitter --database-url "$db" 2>/dev/null | tail -n 1)"
"$venv/bin/schemathesis" --config-file scripts/schemathesis.toml run "http://127.0.0.1:$port/openapi.json" -H "Authorization: Bearer $token" \
    --max-examples "$max" --checks all --rate-limit=2000/m
