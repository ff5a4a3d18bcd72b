#!/usr/bin/env bash
# bench/pgab/run.sh — budgetd binaries side by side on one PostgreSQL server:
# each binary serves its own database of one fresh server (started here, in a
# temporary directory, on a loopback port), and budgetload drives the cases
# against each binary in turn, alternating the order every round, so that the
# noise of a shared machine falls on both alike. It replaces
# bench/pgoverrides (which called the SQL function alone: since issue 42 a
# Fillup's terms are resolved in Go, so budgetd must be in the loop).
#
#   bench/pgab/run.sh [--rounds 3] [--duration 8s] [--clients 200] [--cases "spread hot"] NAME=BINARY NAME=BINARY…
#
# Build the binaries first, e.g. for a commit REV:
#   git archive REV | (mkdir -p /tmp/rev && tar -x -C /tmp/rev) && (cd /tmp/rev && go build -o /tmp/budgetd-rev ./cmd/budgetd)
# Cases: two-bucket (multi-bucket calls), hot (one key), spread (100,000
# keys), period (month, Europe/Berlin), window (1 h), thresholds, overrides
# (10,000 capacity overrides, put in the first round). Prints one line per
# run: round, case, binary, calls/s, errors; then the medians and the ratio
# of each binary to the first.
set -euo pipefail
cd "$(dirname "$0")/../.."
rounds=3 duration=8s clients=200 cases="two-bucket hot spread period window thresholds overrides"
bins=()
while [ $# -gt 0 ]; do
  case "$1" in
    --rounds) rounds=$2; shift ;; --duration) duration=$2; shift ;; --clients) clients=$2; shift ;;
    --cases) cases=$2; shift ;;
    *=*) bins+=("$1") ;;
    *) echo "run.sh: unknown argument $1" >&2; exit 2 ;;
  esac
  shift
done
[ ${#bins[@]} -ge 1 ] || { echo "run.sh: give NAME=BINARY for each budgetd to compare" >&2; exit 2; }
tmp=$(mktemp -d "${TMPDIR:-/tmp}/pgab.XXXXXX")
psql=$(command -v psql || echo "")
pgbin=$(dirname "$(command -v initdb 2>/dev/null || ls /usr/lib/postgresql/*/bin/initdb | sort -V | tail -n1)")
as_pg=()
if [ "$(id -u)" = 0 ]; then as_pg=(runuser -u postgres --); chown postgres "$tmp"; fi
pids=()
cleanup() {
  set +e
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done
  [ -f "$tmp/pg/postmaster.pid" ] && "${as_pg[@]}" "$pgbin/pg_ctl" -D "$tmp/pg" -m immediate stop >/dev/null 2>&1
  rm -rf "$tmp"
}
trap cleanup EXIT
go build -o "$tmp/budgetload" ./cmd/budgetload
port=$(( 23000 + RANDOM % 7000 ))
"${as_pg[@]}" "$pgbin/initdb" -D "$tmp/pg" -U postgres -A trust --no-sync -E UTF8 >"$tmp/initdb.log" 2>&1
"${as_pg[@]}" "$pgbin/pg_ctl" -D "$tmp/pg" -l "$tmp/pg.log" -w -t 60 -o "-p $port -k $tmp -c listen_addresses=127.0.0.1 -c max_connections=600 -c fsync=off -c synchronous_commit=off -c full_page_writes=off -c shared_buffers=256MB" start >/dev/null
declare -A url
i=0
for nb in "${bins[@]}"; do
  name=${nb%%=*} bin=${nb#*=} i=$((i + 1))
  "${psql:-$pgbin/psql}" -h 127.0.0.1 -p "$port" -U postgres -qc "CREATE DATABASE \"$name\""
  "$bin" --addr "127.0.0.1:$((18180 + i))" --store "postgres://postgres@127.0.0.1:$port/$name" >"$tmp/$name.log" 2>&1 &
  pids+=($!)
  url[$name]=http://127.0.0.1:$((18180 + i))
  for _ in $(seq 50); do curl -fsS "${url[$name]}/readyz" >/dev/null 2>&1 && break; sleep 0.2; done
done
args_of() { # case round
  case $1 in
    two-bucket) echo "--mix multi=100 --keys 100000" ;;
    hot) echo "--mix fillup=100 --keys 1" ;;
    spread) echo "--mix fillup=100 --keys 100000" ;;
    period) echo "--mix fillup=100 --keys 100000 --period month --tz Europe/Berlin" ;;
    window) echo "--mix fillup=100 --keys 100000 --window 1h" ;;
    thresholds) echo "--mix fillup=100 --keys 100000 --thresholds 50%,80%,4500" ;;
    overrides) if [ "$2" = 1 ]; then echo "--mix fillup=100 --keys 100000 --overrides 10000"; else echo "--mix fillup=100 --keys 100000 --setup=false"; fi ;;
    *) echo "run.sh: unknown case $1" >&2; exit 2 ;;
  esac
}
for round in $(seq "$rounds"); do
  order=("${bins[@]}")
  if [ $((round % 2)) = 0 ]; then order=(); for ((j = ${#bins[@]} - 1; j >= 0; j--)); do order+=("${bins[j]}"); done; fi
  for c in $cases; do
    for nb in "${order[@]}"; do
      name=${nb%%=*}
      # shellcheck disable=SC2046
      out=$("$tmp/budgetload" --url "${url[$name]}" --limit "ab-$c" --concurrency "$clients" --duration "$duration" --warmup 2s \
        --quiet --json --verify=false $(args_of "$c" "$round"))
      echo "$out" | python3 -c 'import json,sys; d=json.load(sys.stdin); print("round=%s case=%s bin=%s rate=%d errors=%d" % (sys.argv[1], sys.argv[2], sys.argv[3], d["ops_per_second"], d["errors"]))' "$round" "$c" "$name"
    done
  done
done | tee "$tmp/results.txt"
python3 - "$tmp/results.txt" <<'PY'
import collections, re, statistics, sys
runs = collections.defaultdict(list)
order = []
for line in open(sys.argv[1]):
    m = re.match(r"round=\d+ case=(\S+) bin=(\S+) rate=(\d+)", line)
    if m:
        runs[(m[1], m[2])].append(int(m[3]))
        if m[2] not in order:
            order.append(m[2])
for c in dict.fromkeys(k[0] for k in runs):
    meds = [(b, statistics.median(runs[(c, b)])) for b in order if (c, b) in runs]
    base = meds[0][1]
    print(c + ": " + ", ".join("%s %.0f (%.2f)" % (b, m, m / base) for b, m in meds))
PY
