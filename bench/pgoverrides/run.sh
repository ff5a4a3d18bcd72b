#!/usr/bin/env bash
# bench/pgoverrides/run.sh — what resolving a bucket's override costs a
# decision inside PostgreSQL, without HTTP or budgetd in the way: pgbench
# calls budgetd_fillup on a limit with N capacity overrides (half exact keys
# kN, half prefixes kN*, as budgetload --overrides puts them) and on the same
# limit without, alternating, on buckets that exist and remember their
# override ("memo") and on fresh keys ("fresh": the probe, then the memo
# written). With --before FILE (an older migrations/functions/
# budgetd_fillup_batch.sql, e.g. from `git show REV:…`), each round also runs
# that function, so that before and after are measured side by side.
#
#   bench/pgoverrides/run.sh --db 'postgres://postgres@127.0.0.1:5432/ovbench?sslmode=disable' [--before FILE]
#       [--rounds 4] [--seconds 6] [--overrides 100000] [--clients 8]
#
# The database is dropped and created again (it must not be one in use). It
# prints one line per case: round, function, keys, limit, tps, load average.
set -euo pipefail
cd "$(dirname "$0")/../.."
db="" before="" rounds=4 secs=6 n=100000 clients=8
while [ $# -gt 0 ]; do
  case "$1" in
    --db) db=$2; shift ;; --before) before=$2; shift ;; --rounds) rounds=$2; shift ;;
    --seconds) secs=$2; shift ;; --overrides) n=$2; shift ;; --clients) clients=$2; shift ;;
    *) echo "run.sh: unknown argument $1" >&2; exit 2 ;;
  esac
  shift
done
[ -n "$db" ] || { echo "run.sh: --db is required" >&2; exit 2; }
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
name=${db##*/}; name=${name%%\?*}
psql -X -q -d "${db/\/$name/\/postgres}" -c "DROP DATABASE IF EXISTS $name" -c "CREATE DATABASE $name"
go build -o "$tmp/budgetd" ./cmd/budgetd
"$tmp/budgetd" migrate --store "$db" >/dev/null
cp migrations/functions/budgetd_fillup_batch.sql "$tmp/after.sql"
versions=after
[ -n "$before" ] && { cp "$before" "$tmp/before.sql"; versions="before after"; }
psql -X -q -d "$db" -v n="$n" <<'SQL'
SELECT budgetd_put_limit('plain', '1000000000', '1', 1000000, false, now()) IS NOT NULL;
SELECT budgetd_put_limit('ov', '1000000000', '1', 1000000, false, now()) IS NOT NULL;
-- In one statement, as budgetd_put_override would leave them one by one
-- (its loop takes minutes for 100,000): the rows, then the limit's lengths
-- and version.
INSERT INTO overrides (limit_id, pattern, plen, capacity, created_at, updated_at)
SELECT l.id, CASE WHEN i % 2 = 1 THEN 'k' || i ELSE 'k' || i || '*' END,
       CASE WHEN i % 2 = 1 THEN NULL ELSE char_length('k' || i) END, 2000000000, now(), now()
  FROM limits l, generate_series(0, :n - 1) i WHERE l.name = 'ov';
UPDATE limits SET override_ver = 1, override_rules = false,
       override_lens = ARRAY(SELECT DISTINCT coalesce(o.plen, -1) FROM overrides o WHERE o.limit_id = limits.id ORDER BY 1 DESC)
 WHERE name = 'ov';
SQL
for lim in ov plain; do
  printf '\\set r random(0, 99999)\nSELECT r_fits FROM budgetd_fillup(ARRAY['"'$lim'"'], ARRAY['"'k'"' || :r || :sfx], ARRAY['"'1'"'], NULL, ARRAY[NULL]::text[], ARRAY[NULL]::text[], ARRAY[NULL]::text[], false);\n' >"$tmp/$lim.sql"
done
psql -X -q -d "$db" -c "SELECT count(*) FROM generate_series(0, 99999) i, unnest(ARRAY['ov', 'plain']) l,
  LATERAL budgetd_fillup(ARRAY[l], ARRAY['k' || i], ARRAY['1'], NULL, ARRAY[NULL]::text[], ARRAY[NULL]::text[], ARRAY[NULL]::text[], false) f" >/dev/null
for r in $(seq 1 "$rounds"); do
  for v in $versions; do
    psql -X -q -d "$db" -f "$tmp/$v.sql" >/dev/null
    for keys in memo fresh; do
      for lim in ov plain; do
        sfx="''"; [ $keys = fresh ] && sfx="'-$r$v'"
        tps=$(pgbench -n -c "$clients" -j 2 -T "$secs" -D "sfx=$sfx" -f "$tmp/$lim.sql" "$db" 2>/dev/null | awk '/^tps/ {print $3}')
        echo "round=$r fn=$v keys=$keys limit=$lim tps=$tps load=$(cut -d' ' -f1 /proc/loadavg)"
      done
    done
  done
done
