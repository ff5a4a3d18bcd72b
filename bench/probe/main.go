// Command probe measures what scripts/bench needs besides throughput, so the
// script depends on nothing but Go and the servers:
//
//	probe memsize [-n 1000000]   bytes per idle bucket of the memory store, in process
//	probe pgsize URL             pg_database_size after VACUUM
//	probe mysqlsize URL          data_length + index_length of the database's
//	                             tables after ANALYZE TABLE (MySQL/MariaDB)
//	probe mysqlreset URL         empties performance_schema's statement digests
//	probe mysqlstats URL         the statements that took the most time since the reset
//	probe pgreset URL            pg_stat_statements_reset()
//	probe pgstats URL            the statements that took the most time since the reset
//	probe redismem URL           INFO memory used_memory
//	probe redisreset URL         CONFIG RESETSTAT
//	probe redisstats URL         INFO commandstats, the commands that took the most time
//	probe evalsha FILE           the last EVALSHA in a `redis-cli MONITOR` capture, as
//	                             NUL-separated arguments (for redis-benchmark)
//	probe pgbench OUT LOG...     a pgbench run (its stdout and its -l logs) as
//	                             budgetload's JSON summary
//	probe webhooklat -url URL -listen ADDR -secret-file F [-n 300]
//	                             threshold crossing → webhook arrival times
//	                             (budgetd runs with --webhook-url http://ADDR/)
//
// memsize charges N buckets once (history off) through the ledger service
// over a memory store, collects garbage, and prints the heap growth per
// bucket as JSON: nothing but the buckets is counted.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/budgetd/budgetd/internal/ledger"
	"github.com/budgetd/budgetd/internal/memory"
	"github.com/jackc/pgx/v5"
	goredis "github.com/redis/go-redis/v9"
	"github.com/shopspring/decimal"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: probe memsize|pgsize|mysqlsize|mysqlreset|mysqlstats|pgreset|pgstats|redismem|redisreset|redisstats|evalsha|pgbench|webhooklat …")
		os.Exit(2)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	var err error
	arg := func() string {
		if len(os.Args) < 3 {
			fmt.Fprintln(os.Stderr, "probe", os.Args[1], "needs a URL")
			os.Exit(2)
		}
		return os.Args[2]
	}
	switch os.Args[1] {
	case "memsize":
		err = memsize(os.Args[2:])
	case "pgsize":
		err = pgsize(ctx, arg())
	case "mysqlsize":
		err = mysqlsize(ctx, arg(), os.Stdout)
	case "mysqlreset":
		err = mysqlreset(ctx, arg())
	case "mysqlstats":
		err = mysqlstats(ctx, arg(), os.Stdout)
	case "pgreset":
		err = pgExec(ctx, arg(), "CREATE EXTENSION IF NOT EXISTS pg_stat_statements; SELECT pg_stat_statements_reset()")
	case "pgstats":
		err = pgstats(ctx, arg())
	case "redismem":
		err = redismem(ctx, arg())
	case "redisreset":
		err = withRedis(arg(), func(r *goredis.Client) error { return r.ConfigResetStat(ctx).Err() })
	case "redisstats":
		err = redisstats(ctx, arg())
	case "evalsha":
		err = evalsha(arg())
	case "pgbench":
		if len(os.Args) < 4 {
			fmt.Fprintln(os.Stderr, "probe pgbench needs pgbench's output and at least one of its logs")
			os.Exit(2)
		}
		err = pgbench(os.Args[2], os.Args[3:])
	case "webhooklat":
		err = webhooklat(ctx, os.Args[2:])
	default:
		err = errors.New("unknown probe " + os.Args[1])
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "probe:", err)
		os.Exit(1)
	}
}

func heap() uint64 {
	var m runtime.MemStats
	for range 3 {
		runtime.GC()
	}
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

func memsize(args []string) error {
	fs := flag.NewFlagSet("memsize", flag.ContinueOnError)
	n := fs.Int("n", 1_000_000, "buckets")
	if err := fs.Parse(args); err != nil {
		return err
	}
	ctx := context.Background()
	st := memory.New()
	defer st.Close()
	svc := ledger.NewService(st)
	if _, err := svc.PutLimit(ctx, "mem", ledger.LimitSpec{Capacity: decimal.NewFromInt(1_000_000_000_000),
		LeakAmount: decimal.NewFromInt(1), LeakPer: 87600 * time.Hour, History: false}); err != nil {
		return err
	}
	one := decimal.NewFromInt(1)
	before := heap()
	start := time.Now()
	for i := range *n {
		if _, err := svc.Fillup(ctx, []ledger.Item{{Bucket: ledger.BucketRef{Limit: "mem", Key: "k" + strconv.Itoa(i)}, Cost: one}}, ledger.Idempotency{}); err != nil {
			return err
		}
	}
	took := time.Since(start)
	after := heap()
	runtime.KeepAlive(st)
	return json.NewEncoder(os.Stdout).Encode(map[string]any{"buckets": *n, "heap_bytes": int64(after) - int64(before),
		"bytes_per_bucket": float64(int64(after)-int64(before)) / float64(*n), "fillups_per_second": float64(*n) / took.Seconds()})
}

func pgExec(ctx context.Context, url, sql string) error {
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	_, err = conn.Exec(ctx, sql)
	return err
}

func pgsize(ctx context.Context, url string) error {
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, "VACUUM"); err != nil {
		return err
	}
	var n int64
	if err := conn.QueryRow(ctx, "SELECT pg_database_size(current_database())").Scan(&n); err != nil {
		return err
	}
	fmt.Println(n)
	return nil
}

// pgstats prints the statements (top level and inside functions) that took
// the most time since the last reset: PostgreSQL's own profile.
func pgstats(ctx context.Context, url string) error {
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	rows, err := conn.Query(ctx, `SELECT calls, round(total_exec_time::numeric, 1), round(mean_exec_time::numeric * 1000, 1),
		round(shared_blks_hit::numeric / greatest(calls, 1), 1), round(wal_bytes::numeric / greatest(calls, 1), 0),
		regexp_replace(left(query, 110), '\s+', ' ', 'g')
		FROM pg_stat_statements WHERE calls > 0 ORDER BY total_exec_time DESC LIMIT 12`)
	if err != nil {
		return err
	}
	defer rows.Close()
	fmt.Printf("%9s %10s %9s %9s %9s  %s\n", "calls", "total ms", "mean µs", "blks/call", "WAL B/call", "statement")
	for rows.Next() {
		var calls int64
		var total, mean, blks, wal, q string
		if err := rows.Scan(&calls, &total, &mean, &blks, &wal, &q); err != nil {
			return err
		}
		fmt.Printf("%9d %10s %9s %9s %9s  %s\n", calls, total, mean, blks, wal, q)
	}
	return rows.Err()
}

func withRedis(url string, f func(*goredis.Client) error) error {
	opt, err := goredis.ParseURL(url)
	if err != nil {
		return err
	}
	r := goredis.NewClient(opt)
	defer r.Close()
	return f(r)
}

func redismem(ctx context.Context, url string) error {
	return withRedis(url, func(r *goredis.Client) error {
		info, err := r.Info(ctx, "memory").Result()
		if err != nil {
			return err
		}
		for line := range strings.SplitSeq(info, "\n") {
			if v, ok := strings.CutPrefix(strings.TrimSpace(line), "used_memory:"); ok {
				fmt.Println(v)
				return nil
			}
		}
		return errors.New("no used_memory in INFO memory")
	})
}

// redisstats prints the commands Redis spent the most time in since the
// last CONFIG RESETSTAT, with microseconds per call: Redis's own profile.
func redisstats(ctx context.Context, url string) error {
	return withRedis(url, func(r *goredis.Client) error {
		info, err := r.Info(ctx, "commandstats").Result()
		if err != nil {
			return err
		}
		type stat struct {
			name         string
			calls        int64
			usec, perCal float64
		}
		var stats []stat
		for line := range strings.SplitSeq(info, "\n") {
			name, rest, ok := strings.Cut(strings.TrimSpace(line), ":")
			if !ok || !strings.HasPrefix(name, "cmdstat_") {
				continue
			}
			s := stat{name: strings.TrimPrefix(name, "cmdstat_")}
			for kv := range strings.SplitSeq(rest, ",") {
				k, v, _ := strings.Cut(kv, "=")
				switch k {
				case "calls":
					s.calls, _ = strconv.ParseInt(v, 10, 64)
				case "usec":
					s.usec, _ = strconv.ParseFloat(v, 64)
				case "usec_per_call":
					s.perCal, _ = strconv.ParseFloat(v, 64)
				}
			}
			stats = append(stats, s)
		}
		slices.SortFunc(stats, func(a, b stat) int { return int(b.usec - a.usec) })
		fmt.Printf("%-14s %10s %12s %10s\n", "command", "calls", "total ms", "µs/call")
		for _, s := range stats[:min(len(stats), 6)] {
			fmt.Printf("%-14s %10d %12.1f %10.2f\n", s.name, s.calls, s.usec/1000, s.perCal)
		}
		return nil
	})
}

// evalsha prints the arguments of the last EVALSHA (or FCALL: budgetd calls
// a Redis function) in a MONITOR capture,
// each followed by a NUL byte, so that scripts/bench can hand exactly the call
// a service made to redis-benchmark.
func evalsha(path string) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	var last []string
	for line := range strings.SplitSeq(string(data), "\n") {
		args, err := monitorArgs(line)
		if err != nil || len(args) < 3 || !strings.EqualFold(args[0], "evalsha") && !strings.EqualFold(args[0], "fcall") {
			continue
		}
		last = args
	}
	if last == nil {
		return errors.New("no EVALSHA or FCALL in " + path)
	}
	for _, a := range last {
		fmt.Print(a, "\x00")
	}
	return nil
}

// monitorArgs splits one MONITOR line (`1700000000.000001 [0 127.0.0.1:5]
// "evalsha" "…" …`) into its command's arguments, undoing redis-cli's
// quoting (\", \\, \n, \r, \t, \a, \b, \xHH).
func monitorArgs(line string) ([]string, error) {
	_, rest, ok := strings.Cut(line, "] ")
	if !ok {
		return nil, errors.New("not a MONITOR line")
	}
	var args []string
	for rest = strings.TrimSpace(rest); rest != ""; rest = strings.TrimLeft(rest, " ") {
		if rest[0] != '"' {
			return nil, errors.New("unquoted argument")
		}
		var b strings.Builder
		i := 1
		for ; i < len(rest) && rest[i] != '"'; i++ {
			c := rest[i]
			if c != '\\' || i+1 >= len(rest) {
				b.WriteByte(c)
				continue
			}
			i++
			switch rest[i] {
			case 'n':
				b.WriteByte('\n')
			case 'r':
				b.WriteByte('\r')
			case 't':
				b.WriteByte('\t')
			case 'a':
				b.WriteByte('\a')
			case 'b':
				b.WriteByte('\b')
			case 'x':
				if i+2 >= len(rest) {
					return nil, errors.New("short \\x escape")
				}
				v, err := strconv.ParseUint(rest[i+1:i+3], 16, 8)
				if err != nil {
					return nil, err
				}
				b.WriteByte(byte(v))
				i += 2
			default:
				b.WriteByte(rest[i])
			}
		}
		if i >= len(rest) {
			return nil, errors.New("unterminated argument")
		}
		args = append(args, b.String())
		rest = rest[i+1:]
	}
	return args, nil
}
