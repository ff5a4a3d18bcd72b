// Command baseline is the least a service can do for a fillup, so budgetd's
// numbers have something to be compared with. It serves budgetd's fillup
// path, POST /v1/limits/{name}/buckets/{key}/fillup {"cost":"1"}, in one of
// three modes:
//
//   - echo: a bare echo handler that parses the body and answers a fixed
//     decision (the floor for budgetd's memory store);
//   - redis: one EVALSHA per request of a trivial integer leaky-bucket Lua
//     script (the floor for the Redis store);
//   - postgres: one INSERT … ON CONFLICT DO UPDATE … RETURNING per request
//     through pgxpool (the floor for the PostgreSQL store);
//   - mysql: one INSERT … ON DUPLICATE KEY UPDATE per request through a
//     database/sql pool (the floor for the MySQL store).
//
// PUT and DELETE /v1/limits/{name} answer 200 and 204 without doing anything,
// so that budgetload drives it unchanged (with --mix fillup=100 --verify=false).
//
//	baseline --mode redis --store redis://127.0.0.1:6379/0 --addr 127.0.0.1:8081
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"regexp"
	"strconv"
	"syscall"
	"time"

	"database/sql"

	"github.com/go-sql-driver/mysql"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/labstack/echo/v4"
	goredis "github.com/redis/go-redis/v9"

	budgetmysql "github.com/budgetd/budgetd/internal/mysql"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stdout); err != nil && !errors.Is(err, flag.ErrHelp) {
		fmt.Fprintln(os.Stderr, "baseline:", err)
		os.Exit(1)
	}
}

// decider charges cost to (name, key) and says whether it was accepted and
// the level after.
type decider func(ctx context.Context, name, key string, cost int64) (bool, string, error)

// The limit every baseline applies: as large and slow as budgetload's
// default, so every call is accepted.
const (
	capacity      = 1_000_000_000_000
	leakPerSecond = 0 // 1 per 87600h, rounded down to whole units per second
)

func run(ctx context.Context, args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("baseline", flag.ContinueOnError)
	mode := fs.String("mode", "echo", "echo, redis, postgres or mysql")
	addr := fs.String("addr", "127.0.0.1:8081", "listen address")
	store := fs.String("store", "", "redis://…, postgres://… or mysql://… for those modes")
	if err := fs.Parse(args); err != nil {
		return err
	}
	var decide decider
	switch *mode {
	case "echo":
		decide = func(context.Context, string, string, int64) (bool, string, error) { return true, "1", nil }
	case "redis":
		d, closeFn, err := redisDecider(ctx, *store)
		if err != nil {
			return err
		}
		defer closeFn()
		decide = d
	case "postgres":
		d, closeFn, err := postgresDecider(ctx, *store)
		if err != nil {
			return err
		}
		defer closeFn()
		decide = d
	case "mysql":
		d, closeFn, err := mysqlDecider(ctx, *store)
		if err != nil {
			return err
		}
		defer closeFn()
		decide = d
	default:
		return fmt.Errorf("--mode %q: want echo, redis, postgres or mysql", *mode)
	}

	e := echo.New()
	e.HideBanner, e.HidePort = true, true
	e.GET("/healthz", func(c echo.Context) error { return c.String(http.StatusOK, "ok\n") })
	e.PUT("/v1/limits/:name", func(c echo.Context) error { return c.JSONBlob(http.StatusOK, []byte(`{}`)) })
	e.DELETE("/v1/limits/:name", func(c echo.Context) error { return c.NoContent(http.StatusNoContent) })
	e.POST("/v1/limits/:name/buckets/:key/fillup", fillup(decide))

	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: e, ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 2 * time.Minute}
	fmt.Fprintf(stdout, "baseline: serving on http://%s in %s mode\n", ln.Addr(), *mode)
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	select {
	case err := <-served:
		return err
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return srv.Shutdown(sctx)
}

var costRE = regexp.MustCompile(`^(0|[1-9][0-9]{0,11})$`)

// fillup parses the same body as budgetd ({"cost":"12"}, whole costs only
// here) and answers a decision shaped like budgetd's.
func fillup(decide decider) echo.HandlerFunc {
	return func(c echo.Context) error {
		var body struct {
			Cost json.RawMessage `json:"cost"`
		}
		dec := json.NewDecoder(io.LimitReader(c.Request().Body, 64<<10))
		if err := dec.Decode(&body); err != nil {
			return c.JSONBlob(http.StatusBadRequest, []byte(`{"code":"invalid_request"}`))
		}
		raw := string(body.Cost)
		if s, err := strconv.Unquote(raw); err == nil {
			raw = s
		}
		if !costRE.MatchString(raw) {
			return c.JSONBlob(http.StatusBadRequest, []byte(`{"code":"invalid_amount"}`))
		}
		cost, _ := strconv.ParseInt(raw, 10, 64)
		ok, level, err := decide(c.Request().Context(), c.Param("name"), c.Param("key"), cost)
		if err != nil {
			return c.JSONBlob(http.StatusServiceUnavailable, []byte(`{"code":"store_unavailable"}`))
		}
		status := http.StatusOK
		if !ok {
			status = http.StatusTooManyRequests
		}
		return c.JSONBlob(status, []byte(`{"accepted":`+strconv.FormatBool(ok)+`,"level":"`+level+
			`","held":"0","remaining":"0","capacity":"1000000000000","retry_after":null,"never_fits":false}`))
	}
}

// bucketScript is a leaky bucket in whole units: leak first, clamp at zero,
// then add if it fits. Integers stay far below 2^53.
var bucketScript = goredis.NewScript(`
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local b = redis.call('HMGET', KEYS[1], 'l', 't')
local level = tonumber(b[1]) or 0
local last = tonumber(b[2]) or now
local leak = math.floor((now - last) * tonumber(ARGV[3]) / 1000000)
level = level - leak
if level < 0 then level = 0 end
local cost = tonumber(ARGV[1])
if level + cost > tonumber(ARGV[2]) then return {0, level} end
level = level + cost
redis.call('HSET', KEYS[1], 'l', level, 't', now)
return {1, level}
`)

func redisDecider(ctx context.Context, url string) (decider, func(), error) {
	opt, err := goredis.ParseURL(url)
	if err != nil {
		return nil, nil, fmt.Errorf("--store %q: %w", url, err)
	}
	rdb := goredis.NewClient(opt)
	if err := bucketScript.Load(ctx, rdb).Err(); err != nil {
		rdb.Close()
		return nil, nil, fmt.Errorf("load script: %w", err)
	}
	return func(ctx context.Context, name, key string, cost int64) (bool, string, error) {
		// EvalSha: one round trip; the script was loaded above.
		res, err := bucketScript.EvalSha(ctx, rdb, []string{"baseline:" + name + ":" + key}, cost, capacity, leakPerSecond).Int64Slice()
		if err != nil {
			return false, "", err
		}
		return res[0] == 1, strconv.FormatInt(res[1], 10), nil
	}, func() { rdb.Close() }, nil
}

const upsert = `
INSERT INTO baseline_bucket AS b (name, key, level, updated) VALUES ($1, $2, $3::numeric, clock_timestamp())
ON CONFLICT (name, key) DO UPDATE SET
  level = CASE WHEN greatest(0, b.level - $5::numeric * extract(epoch FROM clock_timestamp() - b.updated)) + excluded.level <= $4::numeric
          THEN greatest(0, b.level - $5::numeric * extract(epoch FROM clock_timestamp() - b.updated)) + excluded.level
          ELSE b.level END,
  updated = clock_timestamp()
RETURNING level::text`

func postgresDecider(ctx context.Context, url string) (decider, func(), error) {
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		return nil, nil, fmt.Errorf("--store: %w", err)
	}
	if _, err := pool.Exec(ctx, `CREATE TABLE IF NOT EXISTS baseline_bucket (
		name text NOT NULL, key text NOT NULL, level numeric NOT NULL, updated timestamptz NOT NULL,
		PRIMARY KEY (name, key))`); err != nil {
		pool.Close()
		return nil, nil, fmt.Errorf("create table: %w", err)
	}
	capS, leakS := strconv.Itoa(capacity), strconv.Itoa(leakPerSecond)
	return func(ctx context.Context, name, key string, cost int64) (bool, string, error) {
		var level string
		// The statement cannot say whether it charged (RETURNING sees only
		// the new row); with budgetload's capacity every call fits.
		err := pool.QueryRow(ctx, upsert, name, key, strconv.FormatInt(cost, 10), capS, leakS).Scan(&level)
		return err == nil, level, err
	}, pool.Close, nil
}

// mysqlUpsert leaks by whole seconds since the last charge and adds the cost
// if it fits. MySQL has no RETURNING for an update, so the level is not read
// back: the one statement is all the work, as in the other modes.
const mysqlUpsert = `
INSERT INTO baseline_bucket (name, ` + "`key`" + `, level, updated) VALUES (?, ?, ?, NOW(6))
ON DUPLICATE KEY UPDATE
  level = IF(GREATEST(0, level - ? * TIMESTAMPDIFF(MICROSECOND, updated, NOW(6)) / 1000000) + VALUES(level) <= ?,
             GREATEST(0, level - ? * TIMESTAMPDIFF(MICROSECOND, updated, NOW(6)) / 1000000) + VALUES(level),
             level),
  updated = NOW(6)`

func mysqlDecider(ctx context.Context, url string) (decider, func(), error) {
	cfg, err := budgetmysql.ParseURL(url)
	if err != nil {
		return nil, nil, fmt.Errorf("--store: %w", err)
	}
	connector, err := mysql.NewConnector(cfg)
	if err != nil {
		return nil, nil, fmt.Errorf("--store: %w", err)
	}
	db := sql.OpenDB(connector)
	db.SetMaxIdleConns(64)
	if _, err := db.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS baseline_bucket (
		name VARCHAR(191) NOT NULL, `+"`key`"+` VARCHAR(191) NOT NULL, level DECIMAL(40,18) NOT NULL,
		updated DATETIME(6) NOT NULL, PRIMARY KEY (name, `+"`key`"+`))`); err != nil {
		db.Close()
		return nil, nil, fmt.Errorf("create table: %w", err)
	}
	return func(ctx context.Context, name, key string, cost int64) (bool, string, error) {
		_, err := db.ExecContext(ctx, mysqlUpsert, name, key, cost, leakPerSecond, capacity, leakPerSecond)
		// With budgetload's capacity every call fits; the level is not read
		// back (see mysqlUpsert), so the answer carries the cost charged.
		return err == nil, strconv.FormatInt(cost, 10), err
	}, func() { db.Close() }, nil
}
