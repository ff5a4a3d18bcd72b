// Package postgres is budgetd's durable store on PostgreSQL (pgx/v5).
//
// Every operation is one call of a server-side plpgsql function (one file
// each in migrations/functions; the tables are in migrations/0001_init.sql), so a decision costs one round trip: the check,
// the change, the history entries and the idempotency record commit together
// in that statement's transaction. "Now" is the database clock
// (clock_timestamp(), whole microseconds), so budgetd instances with skewed
// clocks agree. The store works at READ COMMITTED (the default: buckets are
// locked with SELECT … FOR UPDATE in a fixed order) and at SERIALIZABLE; it
// retries serialization failures and deadlocks with jittered backoff, a bounded
// number of times, and never turns one into an accept.
//
// docs/postgres.md describes the schema, the one-round-trip design, timeouts,
// retries and pruning.
package postgres

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"regexp"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/budgetd/budgetd/internal/groupcommit"
	"github.com/budgetd/budgetd/internal/ledger"
	"github.com/budgetd/budgetd/internal/ovset"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

var _ ledger.Store = (*Store)(nil)

// Isolation is the transaction isolation level the store runs at.
type Isolation string

// The supported isolation levels.
const (
	ReadCommitted Isolation = "read-committed"
	Serializable  Isolation = "serializable"
)

// ParseIsolation checks a flag value: "read-committed" or "serializable".
func ParseIsolation(s string) (Isolation, error) {
	switch Isolation(s) {
	case ReadCommitted, Serializable:
		return Isolation(s), nil
	}
	return "", fmt.Errorf("isolation %q: want %q or %q", s, ReadCommitted, Serializable)
}

// Defaults of the options.
const (
	DefaultTimeout        = 5 * time.Second
	DefaultConnectTimeout = 2 * time.Second
	DefaultMaxAttempts    = 50
	DefaultPruneInterval  = time.Minute
	DefaultPruneBatch     = 1000
	// DefaultBatchSlots is how many coalesced batches of single-bucket
	// Fillups are at the database at once, unless the pool has fewer
	// connections (coalesce.go; docs/postgres.md "Batch slots").
	DefaultBatchSlots = 2
)

type config struct {
	isolation      string
	schema         string
	now            func() time.Time
	timeout        time.Duration
	connectTimeout time.Duration
	maxAttempts    int
	pruneInterval  time.Duration
	pruneBatch     int
	maxConns       int32
	tracer         pgx.QueryTracer
	poolHook       func(*pgxpool.Config)
	coalesce       bool
	batchSlots     int
	log            *slog.Logger
	setBatch       bool // WithSetBatch (setbatch.go)
}

// Option configures a Store.
type Option func(*config)

// WithIsolation sets the isolation level: "read-committed" (the default) or
// "serializable". Open and Migrate refuse other values (see ParseIsolation).
func WithIsolation(level string) Option { return func(c *config) { c.isolation = level } }

// WithSchema keeps every table and function in the named schema, created if
// missing (names of [a-z_][a-z0-9_]*). Without it the connection's default
// search_path applies. Tests give each store its own schema.
func WithSchema(name string) Option { return func(c *config) { c.schema = name } }

// WithClock is a test hook: "now" becomes now() passed as a parameter instead
// of the database clock.
func WithClock(now func() time.Time) Option { return func(c *config) { c.now = now } }

// WithTimeout bounds every store call, retries included (default 5s). It is
// also the server-side statement_timeout.
func WithTimeout(d time.Duration) Option { return func(c *config) { c.timeout = d } }

// WithConnectTimeout bounds establishing a connection (default 2s) unless the
// URL sets connect_timeout.
func WithConnectTimeout(d time.Duration) Option { return func(c *config) { c.connectTimeout = d } }

// WithMaxAttempts bounds the attempts of one call when PostgreSQL reports a
// serialization failure or a deadlock (default 50; the timeout bounds them
// too).
func WithMaxAttempts(n int) Option { return func(c *config) { c.maxAttempts = n } }

// WithPruneInterval sets how often the background pruner runs (default 1m);
// 0 disables it (Prune can still be called).
func WithPruneInterval(d time.Duration) Option { return func(c *config) { c.pruneInterval = d } }

// WithMaxConns sets the pool size (default: pgxpool's, or pool_max_conns in
// the URL).
func WithMaxConns(n int32) Option { return func(c *config) { c.maxConns = n } }

// WithCoalescing turns on or off the queueing of single-bucket Fillups while
// every batch slot is busy (WithBatchSlots), to send what queued as one database call
// (default on; see coalesce.go and docs/postgres.md). Multi-bucket Fillups
// always go on their own.
func WithCoalescing(on bool) Option { return func(c *config) { c.coalesce = on } }

// WithBatchSlots sets how many coalesced batches of single-bucket Fillups are
// at the database at once (default DefaultBatchSlots, and never more than the
// pool's connections; see coalesce.go).
func WithBatchSlots(n int) Option { return func(c *config) { c.batchSlots = n } }

// WithLogger sets the logger for warnings (default slog.Default()).
func WithLogger(l *slog.Logger) Option { return func(c *config) { c.log = l } }

// WithTracer installs a pgx query tracer on every connection (tests count
// round trips with it).
func WithTracer(t pgx.QueryTracer) Option { return func(c *config) { c.tracer = t } }

// WithPoolConfig lets the caller adjust the pgxpool configuration after the
// store has set it up (dialer, pool sizes, hooks). Tests use it to count
// network writes.
func WithPoolConfig(f func(*pgxpool.Config)) Option { return func(c *config) { c.poolHook = f } }

var schemaRE = regexp.MustCompile(`^[a-z_][a-z0-9_]{0,62}$`)

func newConfig(opts []Option) (*config, error) {
	c := &config{
		isolation:      string(ReadCommitted),
		timeout:        DefaultTimeout,
		connectTimeout: DefaultConnectTimeout,
		maxAttempts:    DefaultMaxAttempts,
		pruneInterval:  DefaultPruneInterval,
		pruneBatch:     DefaultPruneBatch,
		coalesce:       true,
		setBatch:       true,
		batchSlots:     DefaultBatchSlots,
		log:            slog.Default(),
	}
	for _, o := range opts {
		o(c)
	}
	if _, err := ParseIsolation(c.isolation); err != nil {
		return nil, err
	}
	if c.schema != "" && !schemaRE.MatchString(c.schema) {
		return nil, fmt.Errorf("schema %q: want [a-z_][a-z0-9_]*", c.schema)
	}
	if c.batchSlots < 1 {
		return nil, errors.New("batch slots must be at least 1")
	}
	if c.timeout <= 0 || c.maxAttempts < 1 {
		return nil, errors.New("timeout and max attempts must be positive")
	}
	return c, nil
}

// poolConfig builds the pgxpool configuration: timeouts, search_path,
// isolation level.
func poolConfig(url string, c *config) (*pgxpool.Config, error) {
	pc, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, fmt.Errorf("postgres url: %w", err)
	}
	cc := pc.ConnConfig
	if cc.ConnectTimeout == 0 {
		cc.ConnectTimeout = c.connectTimeout
	}
	if c.schema != "" {
		cc.RuntimeParams["search_path"] = c.schema
	}
	cc.RuntimeParams["statement_timeout"] = strconv.FormatInt(c.timeout.Milliseconds(), 10)
	cc.RuntimeParams["idle_in_transaction_session_timeout"] = strconv.FormatInt((2 * c.timeout).Milliseconds(), 10)
	if c.isolation == string(Serializable) {
		cc.RuntimeParams["default_transaction_isolation"] = "serializable"
	} else {
		cc.RuntimeParams["default_transaction_isolation"] = "read committed"
	}
	if c.tracer != nil {
		cc.Tracer = c.tracer
	}
	if c.maxConns > 0 {
		pc.MaxConns = c.maxConns
	}
	if c.poolHook != nil {
		c.poolHook(pc)
	}
	return pc, nil
}

// Store is the PostgreSQL store. Create it with Open; it is safe for
// concurrent use, also by many processes sharing one database.
type Store struct {
	pool *pgxpool.Pool
	cfg  *config

	stats counters
	// co sends single-bucket Fillups in batches (coalesce.go).
	co         *groupcommit.Batcher[*fillCall]
	multiLocks keyLocks   // SERIALIZABLE: multi-bucket Fillups of a bucket one at a time (keylock.go)
	terms      termsIndex // the limits and their overrides, to resolve terms in Go (terms.go)
	holds      holdRefs   // the buckets of holds reserved here (holdrefs.go)

	kick      chan struct{}
	stop      chan struct{}
	done      chan struct{}
	closeOnce sync.Once
	pruneMu   sync.Mutex
	cursor    pruneCursor
}

// Open connects to the database at url (a postgres:// URL or DSN), applies
// the migrations under an advisory lock and returns the store. The pool
// connects lazily and recovers by itself when the database comes back.
func Open(ctx context.Context, url string, opts ...Option) (*Store, error) {
	c, err := newConfig(opts)
	if err != nil {
		return nil, err
	}
	pc, err := poolConfig(url, c)
	if err != nil {
		return nil, err
	}
	if err := runMigrations(ctx, pc, c); err != nil {
		return nil, err
	}
	s := &Store{cfg: c, kick: make(chan struct{}, 1), stop: make(chan struct{}), done: make(chan struct{})}
	next := pc.ConnConfig.OnNotice
	pc.ConnConfig.OnNotice = func(conn *pgconn.PgConn, n *pgconn.Notice) {
		s.onNotice(n)
		if next != nil {
			next(conn, n)
		}
	}
	pool, err := pgxpool.NewWithConfig(ctx, pc)
	if err != nil {
		return nil, fmt.Errorf("postgres pool: %w", err)
	}
	s.pool = pool
	s.co = groupcommit.New(min(int(pool.Config().MaxConns), c.batchSlots), maxBatch, s.runBatch, newFillRule())
	if c.pruneInterval > 0 {
		go s.pruneLoop()
	} else {
		close(s.done)
	}
	return s, nil
}

// Migrate applies the migrations to the database at url and returns; it is
// what `budgetd migrate` runs. Concurrent calls are safe.
func Migrate(ctx context.Context, url string, opts ...Option) error {
	c, err := newConfig(opts)
	if err != nil {
		return err
	}
	pc, err := poolConfig(url, c)
	if err != nil {
		return err
	}
	return runMigrations(ctx, pc, c)
}

func runMigrations(ctx context.Context, pc *pgxpool.Config, c *config) error {
	cc := pc.ConnConfig.Copy()
	cc.Tracer = nil
	conn, err := pgx.ConnectConfig(ctx, cc)
	if err != nil {
		return fmt.Errorf("postgres migrate: %v: %w", err, ledger.ErrUnavailable)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	if err := migrate(ctx, conn, c.schema); err != nil {
		return fmt.Errorf("postgres migrate: %w", translate(ctx, err))
	}
	return nil
}

// onNotice counts and logs the clock steps the functions report (a bucket's
// stored time ahead of now, taken as now; see ClockStep).
func (s *Store) onNotice(n *pgconn.Notice) {
	if n.Code != codeClockStep {
		return
	}
	s.stats.clockSteps.Add(1)
	s.cfg.log.Warn("postgres: the database clock was stepped back", "detail", n.Message)
}

// Ping reports whether the database answers within the store's timeout.
func (s *Store) Ping(ctx context.Context) error {
	cctx, cancel := context.WithTimeout(ctx, s.cfg.timeout)
	defer cancel()
	if err := s.pool.Ping(cctx); err != nil {
		return fmt.Errorf("postgres ping: %w", translate(ctx, err))
	}
	return nil
}

// Close stops the pruner and closes the pool.
func (s *Store) Close() error {
	s.closeOnce.Do(func() {
		close(s.stop)
		<-s.done
		s.pool.Close()
	})
	return nil
}

// Stats are counters since Open.
type Stats struct {
	// SerializationRetries counts attempts that failed with SQLSTATE 40001
	// (serialization failure); each is retried unless it was the last
	// attempt (then GaveUp counts it too).
	SerializationRetries uint64
	// DeadlockRetries counts attempts that failed with SQLSTATE 40P01
	// (deadlock detected), retried likewise.
	DeadlockRetries uint64
	// IdempotencyRetries counts attempts rolled back because a duplicate
	// request with the same Idempotency-Key committed first; the retry
	// replays that request's answer.
	IdempotencyRetries uint64
	// GaveUp counts calls that still failed so after the last attempt.
	GaveUp uint64
	// Unavailable counts calls that failed with ledger.ErrUnavailable.
	Unavailable uint64
	// Batches counts the database calls of coalesced Fillups, and Batched
	// the Fillups they decided: Batched/Batches is the mean batch size.
	Batches, Batched uint64
	// ClockSteps counts the buckets found with a stored time more than
	// ClockStep ahead of the database clock (taken as now).
	ClockSteps uint64
	// PeriodTables counts the tables of period starts recomputed because
	// the database's clock had passed the end of a periodic limit's table.
	PeriodTables uint64
	// StaleTerms counts the decisions whose terms, resolved in Go, were
	// found stale (the limit or its overrides changed, or the instant left
	// their span) and TermsLoads the limits read into the index; Settled
	// the buckets settled in Go at the end of a temporary rule change
	// (terms.go).
	StaleTerms, TermsLoads, Settled uint64
	// SetBatches counts the batches decided set-wise (WithSetBatch), and
	// SetFallbacks those its read sent on through budgetd_fillup.
	SetBatches, SetFallbacks uint64
}

type counters struct {
	serialization, deadlock, idempotency, gaveUp, unavailable atomic.Uint64
	batches, batched                                          atomic.Uint64
	clockSteps                                                atomic.Uint64
	periodTables                                              atomic.Uint64 // tables of period starts recomputed
	staleTerms, settled                                       atomic.Uint64
	setBatches, setFallbacks                                  atomic.Uint64 // batches decided set-wise, and those sent on after its read (setbatch.go)
}

// Stats returns the store's counters.
func (s *Store) Stats() Stats {
	return Stats{
		SerializationRetries: s.stats.serialization.Load(),
		DeadlockRetries:      s.stats.deadlock.Load(),
		IdempotencyRetries:   s.stats.idempotency.Load(),
		GaveUp:               s.stats.gaveUp.Load(),
		Unavailable:          s.stats.unavailable.Load(),
		Batches:              s.stats.batches.Load(),
		Batched:              s.stats.batched.Load(),
		ClockSteps:           s.stats.clockSteps.Load(),
		PeriodTables:         s.stats.periodTables.Load(),
		StaleTerms:           s.stats.staleTerms.Load(),
		TermsLoads:           s.terms.loads.Load(),
		Settled:              s.stats.settled.Load(),
		SetBatches:           s.stats.setBatches.Load(),
		SetFallbacks:         s.stats.setFallbacks.Load(),
	}
}

// nowArg is the "now" parameter of the server functions: NULL (the database
// clock) unless a test pinned the clock (a zero reading of the hook is the
// database clock too).
func (s *Store) nowArg() any {
	if s.cfg.now == nil {
		return nil
	}
	t := s.cfg.now()
	if t.IsZero() {
		return nil
	}
	return t.UTC().Truncate(time.Microsecond)
}

// queryJSON runs one statement that returns one jsonb value, with retries,
// and decodes it into out.
func (s *Store) queryJSON(ctx context.Context, op string, out any, sql string, args ...any) error {
	var raw []byte
	err := s.do(ctx, op, func(ctx context.Context) error {
		return s.pool.QueryRow(ctx, sql, args...).Scan(&raw)
	})
	if err != nil {
		return err
	}
	if err := json.Unmarshal(raw, out); err != nil {
		return fmt.Errorf("postgres %s: decoding %s: %w", op, raw, err)
	}
	return nil
}

// PutLimit creates or updates a limit, keeping its buckets: those of a
// limit with overrides are settled in Go first (changeTerms), the others by
// budgetd_put_limit.
func (s *Store) PutLimit(ctx context.Context, l ledger.Limit) (ledger.Limit, error) {
	var sql string
	var args []any
	mode, g := storedMode(l.Mode, l.Grace)
	grace := g.String()
	ths, sig := thresholdArgs(l.Thresholds)
	switch {
	case l.Window != nil:
		sql = `SELECT budgetd_put_limit($1, $2, NULL, NULL, $3, $4,
			p_window_length_us => $5, p_window_precision_us => $6, p_record_denials => $7, p_mode => $8, p_grace => $9,
			p_thresholds => $10, p_th_sig => $11)`
		args = []any{l.Name, l.Capacity.String(), l.History, s.nowArg(), l.Window.Length.Microseconds(), l.Window.Precision.Microseconds(), l.RecordDenials, mode, grace, ths, sig}
	case l.Period != nil:
		starts := periodTable(*l.Period, s.goNow())
		var startDay any
		if l.Period.StartDay != 0 {
			startDay = l.Period.StartDay
		}
		var rolloverMax *string
		if l.Rollover != nil {
			m := l.Rollover.Max.String()
			rolloverMax = &m
		}
		sql = "SELECT budgetd_put_limit($1, $2, NULL, NULL, $3, $4, $5, $6, $7, $8, p_record_denials => $9, p_mode => $10, p_grace => $11, p_thresholds => $12, p_th_sig => $13, p_rollover_max => $14)"
		args = []any{l.Name, l.Capacity.String(), l.History, s.nowArg(), l.Period.Every, l.Period.TZ, startDay, starts, l.RecordDenials, mode, grace, ths, sig, rolloverMax}
	default:
		sql = "SELECT budgetd_put_limit($1, $2, $3, $4, $5, $6, p_record_denials => $7, p_mode => $8, p_grace => $9, p_thresholds => $10, p_th_sig => $11)"
		args = []any{l.Name, l.Capacity.String(), l.LeakAmount.String(), l.LeakPer.Microseconds(), l.History, s.nowArg(), l.RecordDenials, mode, grace, ths, sig}
	}
	var raw []byte
	err := s.changeTerms(ctx, "put limit", l.Name, "", func(ledger.Limit, *ovset.Set) ledger.Limit { return l },
		func(ctx context.Context, tx pgx.Tx) error { return tx.QueryRow(ctx, sql, args...).Scan(&raw) })
	if err != nil {
		return ledger.Limit{}, err
	}
	var doc limitDoc
	if err := json.Unmarshal(raw, &doc); err != nil {
		return ledger.Limit{}, fmt.Errorf("postgres put limit: decoding %s: %w", raw, err)
	}
	return doc.limit(), nil
}

// ServesRollover marks the store as a ledger.RolloverStore: the server
// functions add a bucket's rollover to its capacity (budgetd_with_rollover)
// and keep its carry at its writes (docs/postgres.md "Rollover").
func (s *Store) ServesRollover() {}

// GetLimit returns a limit or ledger.ErrLimitNotFound.
func (s *Store) GetLimit(ctx context.Context, name string) (ledger.Limit, error) {
	var doc limitDoc
	err := s.queryJSON(ctx, "get limit", &doc, "SELECT budgetd_limit_json(budgetd_limit($1))", name)
	if err != nil {
		return ledger.Limit{}, err
	}
	return doc.limit(), nil
}

// ListLimits returns up to n limits with names after after, by name.
func (s *Store) ListLimits(ctx context.Context, after string, n int) ([]ledger.Limit, error) {
	var docs []limitDoc
	err := s.queryJSON(ctx, "list limits", &docs, `SELECT coalesce(jsonb_agg(budgetd_limit_json(l) ORDER BY l.name), '[]')
		FROM (SELECT * FROM limits WHERE name > $1 ORDER BY name LIMIT $2) l`, after, n)
	if err != nil {
		return nil, err
	}
	out := make([]ledger.Limit, len(docs))
	for i, d := range docs {
		out[i] = d.limit()
	}
	return out, nil
}

// DeleteLimit removes a limit. Its buckets, holds, history and idempotency
// records become invisible at once (they belong to the limit's id, which a
// re-created name does not reuse) and are deleted by the pruner in bounded
// batches.
func (s *Store) DeleteLimit(ctx context.Context, name string) error {
	var id int64
	err := s.do(ctx, "delete limit", func(ctx context.Context) error {
		return s.pool.QueryRow(ctx, `WITH d AS (DELETE FROM limits WHERE name = $1 RETURNING id)
			INSERT INTO deleted_limits (id) SELECT id FROM d RETURNING id`, name).Scan(&id)
	})
	if errors.Is(err, pgx.ErrNoRows) {
		return fmt.Errorf("limit %q: %w", name, ledger.ErrLimitNotFound)
	}
	if err != nil {
		return err
	}
	select {
	case s.kick <- struct{}{}:
	default:
	}
	return nil
}
