#!/usr/bin/env bash
# PTX download load benchmark: kaas (its API listener, and its sendfile downloads listener,
# `serve --downloads-bind`) against nginx serving the same ~200 KB artifact on loopback,
# side by side in one run, with wrk at 64 connections. Prints a Markdown table.
# Needs Debian's nginx-light and wrk (installs them when missing, as root).
# Usage: scripts/loadbench.sh [seconds-per-round] [rounds]
set -euo pipefail
secs=${1:-10}
lines=${KAAS_LOADBENCH_LINES:-8200}
rounds=${2:-3}
# kaas listens on $KAAS_LOADBENCH_PORT (default 18080), nginx on the next port, kaas's
# downloads listener on the one after.
port=${KAAS_LOADBENCH_PORT:-18080}; nport=$((port + 1)); dport=$((port + 2))
for p in $port $nport $dport; do
  if (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null; then echo "port $p is in use; set KAAS_LOADBENCH_PORT" >&2; exit 1; fi
done
root=$(cd "$(dirname "$0")/.." && pwd)
command -v nginx >/dev/null && command -v wrk >/dev/null || {
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq nginx-light wrk >/dev/null
}
work=$(mktemp -d)
kaas_pid= ; nginx_pid=
cleanup() { [ -n "$kaas_pid" ] && kill "$kaas_pid" 2>/dev/null; [ -n "$nginx_pid" ] && kill "$nginx_pid" 2>/dev/null; rm -rf "$work"; }
trap cleanup EXIT

# KAAS_BIN=path benchmarks that binary instead of building this checkout (to compare builds).
if [ -n "${KAAS_BIN:-}" ]; then
  kaas=$KAAS_BIN
else
  cargo build --release --quiet --manifest-path "$root/Cargo.toml"
  kaas="${CARGO_TARGET_DIR:-$root/target}/release/kaas"
fi
db="sqlite://$work/kaas.db?mode=rwc"

# A ~200 KB PTX module of real kernel code: the shipped kernels' PTX in one module (the
# first file whole, the other's entries appended), so gzip sees realistic text.
# KAAS_LOADBENCH_LINES=N instead makes a synthetic module of N straight-line instructions.
ptx="$work/kernel.ptx"
mapfile -t shipped < <(ls "$root"/kernels/ptx/*.ptx 2>/dev/null)
if [ -z "${KAAS_LOADBENCH_LINES:-}" ] && [ "${#shipped[@]}" -ge 2 ]; then
  { cat "${shipped[0]}"; sed -n '/^\.visible \.entry/,$p' "${shipped[1]}"; } > "$ptx"
else
  {
    printf '.version 8.8\n.target sm_90\n.address_size 64\n\n.visible .entry load_bench(\n\t.param .u64 .ptr .global .align 1 p\n)\n{\n\t.reg .b32 %%r<4>;\n'
    for i in $(seq 1 "$lines"); do printf '\tadd.s32 %%r1, %%r2, %d;\n' "$i"; done
    printf '\tret;\n}\n'
  } > "$ptx"
fi
size=$(stat -c %s "$ptx")

token=$("$kaas" token create --name loadbench --role submitter --database-url "$db" 2>/dev/null)
KAAS_LOG=warn "$kaas" serve --bind "127.0.0.1:$port" --database-url "$db" --catalog "$work/none" \
  --downloads-bind "127.0.0.1:$dport" --downloads-dir "$work/downloads" &
kaas_pid=$!
for _ in $(seq 1 100); do curl -sf "localhost:$port"/v1/health >/dev/null && break; sleep 0.1; done
sha=$(curl -sf -H "Authorization: Bearer $token" -H 'Content-Type: text/plain' --data-binary @"$ptx" "localhost:$port"/v1/artifacts | python3 -c 'import json,sys; print(json.load(sys.stdin)["sha256"])')

mkdir -p "$work/www/v1/artifacts" "$work/logs"
cp "$ptx" "$work/www/v1/artifacts/$sha"
gzip -6 -k -c "$ptx" > "$work/www/v1/artifacts/$sha.gz"   # nginx's gzip_static serves this to gzip clients
cat > "$work/nginx.conf" <<CONF
worker_processes auto;
pid $work/nginx.pid;
error_log $work/logs/error.log warn;
events { worker_connections 1024; }
http {
  access_log off;
  sendfile on; tcp_nopush on; keepalive_requests 100000;
  default_type text/plain;
  client_body_temp_path $work/tmp; proxy_temp_path $work/tmp; fastcgi_temp_path $work/tmp; uwsgi_temp_path $work/tmp; scgi_temp_path $work/tmp;
  server { listen 127.0.0.1:$nport; root $work/www; etag on; gzip_static on; gzip_vary on; }
}
CONF
mkdir -p "$work/tmp"; chmod -R a+rX "$work"   # nginx workers run as nobody
nginx -p "$work" -c "$work/nginx.conf" -g 'daemon off;' &
nginx_pid=$!
sleep 0.5

url_kaas="http://127.0.0.1:$port/v1/artifacts/$sha"
url_nginx="http://127.0.0.1:$nport/v1/artifacts/$sha"
url_dl="http://127.0.0.1:$dport/v1/artifacts/$sha"
a=$(curl -sf "$url_kaas" | sha256sum); b=$(curl -sf "$url_nginx" | sha256sum); c=$(curl -sf "$url_dl" | sha256sum)
[ "$a" = "$b" ] && [ "$a" = "$c" ] || { echo "the servers disagree on the bytes: kaas $a, nginx $b, downloads $c (sha $sha)" >&2; exit 1; }
for s in kaas downloads nginx; do   # the response headers each sends (identity), for the record
  u=$url_kaas; [ $s = nginx ] && u=$url_nginx; [ $s = downloads ] && u=$url_dl
  echo "$s headers: $(curl -s -D - -o /dev/null "$u" | tr -d '\r' | sed -n '2,$p' | cut -d: -f1 | grep . | tr '\n' ' ')"
done

# wrk's numbers: requests/s, p50 and p99 latency in ms. $2: extra wrk arguments.
measure() {
  wrk -t2 -c64 -d"${secs}s" --latency ${2:+"$2"} ${3:+"$3"} "$1" | python3 -c '
import re, sys
t = sys.stdin.read()
def ms(v):
    n, u = re.match(r"([\d.]+)(us|ms|s)", v).groups()
    return float(n) * {"us": 1e-3, "ms": 1.0, "s": 1e3}[u]
rps = float(re.search(r"Requests/sec:\s+([\d.]+)", t).group(1))
p50 = ms(re.search(r"\s50%\s+(\S+)", t).group(1)); p99 = ms(re.search(r"\s99%\s+(\S+)", t).group(1))
errs = re.search(r"Non-2xx or 3xx responses: (\d+)", t)
print(f"{rps:.0f} {p50:.2f} {p99:.2f} {errs.group(1) if errs else 0}")'
}
for u in "$url_kaas" "$url_dl" "$url_nginx"; do wrk -t2 -c64 -d2s "$u" >/dev/null; done   # warm-up

# CPU time (user + system, in clock ticks) the server has used so far: kaas's process, or
# nginx's master and workers. Divided by the requests served it gives the server's CPU
# cost per request, which other load on the machine disturbs less than requests/s.
cpu_ticks() {
  local pids=$1; [ "$1" = "$nginx_pid" ] && pids="$1 $(pgrep -P "$1" | tr '\n' ' ')"
  for p in $pids; do cut -d' ' -f14,15 "/proc/$p/stat"; done | awk '{t += $1 + $2} END {print t}'
}
tick=$(getconf CLK_TCK)

echo "| round | server | encoding | requests/s | p50 ms | p99 ms | non-2xx | server CPU µs/req |"
echo "|---|---|---|---|---|---|---|---|"
for r in $(seq 1 "$rounds"); do
  for enc in identity gzip; do
    for s in kaas downloads nginx; do
      url=$url_kaas; pid=$kaas_pid; [ $s = nginx ] && { url=$url_nginx; pid=$nginx_pid; }; [ $s = downloads ] && url=$url_dl
      t0=$(cpu_ticks "$pid")
      if [ $enc = gzip ]; then read -r rps p50 p99 errs < <(measure "$url" -H "Accept-Encoding: gzip")
      else read -r rps p50 p99 errs < <(measure "$url"); fi
      cpu=$(( ($(cpu_ticks "$pid") - t0) * 1000000 / tick / (rps * secs) ))
      echo "| $r | $s | $enc | $rps | $p50 | $p99 | $errs | $cpu |"
      echo "$s-$enc $rps $p50 $p99" >> "$work/results"
    done
  done
done
python3 - "$work/results" "$size" <<'PY'
import statistics, sys
rows = [l.split() for l in open(sys.argv[1])]
med = lambda s, i: statistics.median(float(r[i]) for r in rows if r[0] == s)
print(f"\nartifact {sys.argv[2]} bytes; medians over rounds:")
for enc in ("identity", "gzip"):
    k, d, n = med(f"kaas-{enc}", 1), med(f"downloads-{enc}", 1), med(f"nginx-{enc}", 1)
    print(f"  {enc}: kaas API {k:.0f} req/s (p99 {med(f'kaas-{enc}', 3):.2f} ms), "
          f"kaas downloads {d:.0f} req/s (p99 {med(f'downloads-{enc}', 3):.2f} ms), "
          f"nginx {n:.0f} req/s (p99 {med(f'nginx-{enc}', 3):.2f} ms); API/nginx = {k / n:.2f}, downloads/nginx = {d / n:.2f}")
PY
