// Package mysql is budgetd's MySQL/MariaDB store (docs/mysql.md): a versioned
// state store under the exact Go engine of package bucket.
//
// A bucket row holds the state that package bucket returned last and a
// version. A decision reads the rows it needs together with the database's
// clock, decides in Go with the same functions as the memory store, and writes
// the new states with a compare-and-set on their versions, their history
// entries and the checks of the limits it read, in one multi-statement
// transaction. A write that finds a version changed fails as a whole and the
// decision runs again, then with its bucket rows locked (SELECT … FOR
// UPDATE), so a hot bucket is serialised rather than retried without end.
// The answers are the memory store's by construction: there is no second
// implementation of the rule in SQL.
package mysql

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"database/sql"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/budgetd/budgetd/internal/groupcommit"
	"github.com/budgetd/budgetd/internal/ledger"
)

// Isolation levels the store runs its write transactions at.
const (
	RepeatableRead = "repeatable-read"
	ReadCommitted  = "read-committed"
)

// Store is the MySQL/MariaDB store. Call Open.
type Store struct {
	db         *sql.DB
	clock      func() time.Time
	isolation  string
	attempts   int
	lockWait   time.Duration
	timeout    time.Duration                    // the bound on every call (WithTimeout)
	cache      *decisionCache                   // nil when off (WithCache; on by default)
	groupOff   bool                             // WithGroupCommit(false)
	groupSlots int                              // batches at the database at once (groupSlots)
	seedRows   int                              // rows of one read of seedKnown (knownSeedPage)
	warmOff    bool                             // seedKnown keeps no rows in the cache (a test's)
	batcher    *groupcommit.Batcher[*groupCall] // nil when group commit is off (groupcommit.go)
	group      groupStats
	ovs        overrideCache                                                     // the limits' overrides it read (overrides.go)
	dial       func(ctx context.Context, network, addr string) (net.Conn, error) // tests count round trips with it

	// The background pruner (prune.go).
	pruneInterval time.Duration
	pruneBatch    int
	pruneMu       sync.Mutex  // one Prune at a time
	cursor        pruneCursor // where the bucket scan resumes, under pruneMu
	pruneStop     chan struct{}
	pruneKick     chan struct{} // wakes the background pruner (DeleteLimit)
	pruneDone     chan struct{}
	closeOnce     sync.Once
}

// Option configures a Store.
type Option func(*Store)

// WithClock replaces the database's clock: a non-zero reading is the
// decision's "now" (tests pin time with it); a zero reading falls back to
// the database's UTC_TIMESTAMP(6).
func WithClock(now func() time.Time) Option { return func(s *Store) { s.clock = now } }

// WithIsolation sets the isolation level of the store's transactions:
// RepeatableRead (the server's default) or ReadCommitted.
func WithIsolation(level string) Option { return func(s *Store) { s.isolation = level } }

// DefaultLockWait is how long a statement waits for a row lock before the
// server gives up with a lock-wait timeout (1205), which the store retries.
const DefaultLockWait = 5 * time.Second

// WithLockWait sets the sessions' innodb_lock_wait_timeout (whole seconds,
// at least 1; DefaultLockWait), so that a decision stuck behind a lock gives
// up, runs again and, after the bounded attempts, fails with 503.
func WithLockWait(d time.Duration) Option { return func(s *Store) { s.lockWait = d } }

// DefaultTimeout bounds every store call, as PostgreSQL's does.
const DefaultTimeout = 5 * time.Second

// WithTimeout bounds every store call, retries included (default 5s): a call
// the server does not answer within it fails with ledger.ErrUnavailable (503)
// and its connection is closed by the driver, never reused. The bound is a
// context deadline only: the driver's readTimeout/writeTimeout are not set,
// because they would also cut the migration lock's long GET_LOCK wait.
func WithTimeout(d time.Duration) Option { return func(s *Store) { s.timeout = d } }

// bound gives a call its deadline: the store's timeout from now on, or the
// caller's if that is sooner.
func (s *Store) bound(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, s.timeout)
}

// maxAttempts bounds how often a decision runs again after a conflict, a
// deadlock (1213) or a lock-wait timeout (1205) before the call fails with
// ledger.ErrUnavailable (503).
const maxAttempts = 8

// ParseURL reads a mysql://USER:PASSWORD@HOST:PORT/DATABASE URL into the
// driver's configuration, with the session settings that the store's
// answers rely on (strict SQL mode, UTC). Query parameters: tls (false,
// true, skip-verify, preferred), tls-ca (a PEM file of the CA to trust;
// implies tls=true), socket (a Unix socket path, instead of HOST:PORT) and
// timeout (dial timeout, a Go duration, 10s by default).
func ParseURL(raw string) (*mysql.Config, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return nil, fmt.Errorf("mysql URL: %w", err)
	}
	if u.Scheme != "mysql" {
		return nil, fmt.Errorf("mysql URL: scheme must be mysql://, not %q", u.Scheme)
	}
	cfg := mysql.NewConfig()
	if u.User == nil || u.User.Username() == "" {
		return nil, errors.New("mysql URL: missing user (mysql://USER:PASSWORD@HOST:PORT/DATABASE)")
	}
	cfg.User = u.User.Username()
	cfg.Passwd, _ = u.User.Password()
	cfg.DBName = strings.TrimPrefix(u.Path, "/")
	if cfg.DBName == "" || strings.Contains(cfg.DBName, "/") {
		return nil, errors.New("mysql URL: missing or malformed database name (mysql://USER:PASSWORD@HOST:PORT/DATABASE)")
	}
	cfg.Net, cfg.Addr = "tcp", u.Host
	if u.Port() == "" && u.Hostname() != "" {
		cfg.Addr = net.JoinHostPort(u.Hostname(), "3306")
	}
	cfg.Timeout = 10 * time.Second
	q := u.Query()
	for k, vs := range q {
		v := vs[len(vs)-1]
		switch k {
		case "tls":
			switch v {
			case "true", "false", "skip-verify", "preferred":
				cfg.TLSConfig = v
			default:
				return nil, fmt.Errorf("mysql URL: tls=%q: must be true, false, skip-verify or preferred", v)
			}
		case "tls-ca":
			pem, err := os.ReadFile(v)
			if err != nil {
				return nil, fmt.Errorf("mysql URL: tls-ca: %w", err)
			}
			pool := x509.NewCertPool()
			if !pool.AppendCertsFromPEM(pem) {
				return nil, fmt.Errorf("mysql URL: tls-ca: %s holds no PEM certificate", v)
			}
			cfg.TLS = &tls.Config{RootCAs: pool, ServerName: u.Hostname(), MinVersion: tls.VersionTLS12}
		case "socket":
			cfg.Net, cfg.Addr = "unix", v
		case "timeout":
			d, err := time.ParseDuration(v)
			if err != nil || d <= 0 {
				return nil, fmt.Errorf("mysql URL: timeout=%q: must be a positive duration such as 10s", v)
			}
			cfg.Timeout = d
		default:
			return nil, fmt.Errorf("mysql URL: unknown parameter %q (known: tls, tls-ca, socket, timeout)", k)
		}
	}
	if cfg.Net == "tcp" && u.Hostname() == "" {
		return nil, errors.New("mysql URL: missing host (or a socket parameter)")
	}
	// One round trip per write needs several statements in one call, and so
	// parameters interpolated by the driver (prepared statements hold one).
	cfg.MultiStatements = true
	cfg.InterpolateParams = true
	// The session settings that answers depend on are the store's, not the
	// server's: strict mode (an out-of-range DECIMAL is an error, never a
	// rounded or clipped value) and UTC.
	cfg.Params = map[string]string{
		"sql_mode":   "'STRICT_ALL_TABLES,NO_ZERO_DATE,NO_ZERO_IN_DATE,ERROR_FOR_DIVISION_BY_ZERO,NO_ENGINE_SUBSTITUTION,NO_AUTO_VALUE_ON_ZERO'",
		"time_zone":  "'+00:00'",
		"autocommit": "1",
	}
	cfg.Collation = "utf8mb4_bin"
	return cfg, nil
}

// Open connects to the database of url, checks the server, applies the
// schema (Migrate) and returns the store.
func Open(ctx context.Context, rawURL string, opts ...Option) (*Store, error) {
	cfg, err := ParseURL(rawURL)
	if err != nil {
		return nil, err
	}
	s := &Store{isolation: RepeatableRead, clock: func() time.Time { return time.Time{} }, attempts: maxAttempts, lockWait: DefaultLockWait, timeout: DefaultTimeout, groupSlots: groupSlots, seedRows: knownSeedPage,
		cache:         newDecisionCache(DefaultCacheEntries, DefaultCacheBytes),
		pruneInterval: DefaultPruneInterval, pruneBatch: DefaultPruneBatch, pruneStop: make(chan struct{}), pruneKick: make(chan struct{}, 1), pruneDone: make(chan struct{})}
	for _, o := range opts {
		o(s)
	}
	if s.isolation != RepeatableRead && s.isolation != ReadCommitted {
		return nil, fmt.Errorf("mysql: isolation %q: must be %s or %s", s.isolation, RepeatableRead, ReadCommitted)
	}
	if s.timeout <= 0 {
		return nil, fmt.Errorf("mysql: timeout %s: must be positive", s.timeout)
	}
	s.batcher = s.newBatcher()
	// Establishing a connection (dial and handshake) is part of a call, so
	// it cannot take longer than the call's bound either.
	cfg.Timeout = min(cfg.Timeout, s.timeout)
	cfg.Params["innodb_lock_wait_timeout"] = strconv.Itoa(max(1, int(s.lockWait/time.Second)))
	if s.dial != nil {
		cfg.DialFunc = s.dial
	}
	conn, err := mysql.NewConnector(cfg)
	if err != nil {
		return nil, fmt.Errorf("mysql: %w", err)
	}
	s.db = sql.OpenDB(conn)
	s.db.SetMaxOpenConns(64)
	s.db.SetMaxIdleConns(64)
	s.db.SetConnMaxIdleTime(5 * time.Minute)
	if err := s.checkServer(ctx, cfg.DBName); err != nil {
		s.db.Close()
		return nil, err
	}
	if err := migrate(ctx, s.db, cfg.DBName); err != nil {
		s.db.Close()
		return nil, err
	}
	s.seedKnown(ctx)
	if s.pruneInterval > 0 {
		go s.pruneLoop()
	} else {
		close(s.pruneDone)
	}
	return s, nil
}

// supported says whether a VERSION() string names a server the store runs
// on, and what to do otherwise.
func supported(version string) error {
	num, _, _ := strings.Cut(version, "-")
	parts := strings.SplitN(num, ".", 3)
	if len(parts) < 2 {
		return fmt.Errorf("mysql: cannot read the server version %q", version)
	}
	major, err1 := strconv.Atoi(parts[0])
	minor, err2 := strconv.Atoi(parts[1])
	if err1 != nil || err2 != nil {
		return fmt.Errorf("mysql: cannot read the server version %q", version)
	}
	mariadb := strings.Contains(strings.ToLower(version), "mariadb")
	switch {
	case mariadb && (major < 10 || major == 10 && minor < 6):
		return fmt.Errorf("mysql: MariaDB %s is too old: budgetd needs MariaDB 10.6 or later", num)
	case !mariadb && major < 8:
		return fmt.Errorf("mysql: MySQL %s is too old: budgetd needs MySQL 8.0 or later (or MariaDB 10.6 or later)", num)
	}
	return nil
}

// Ping reports whether the database answers.
func (s *Store) Ping(ctx context.Context) error {
	ctx, cancel := s.bound(ctx)
	defer cancel()
	if err := s.db.PingContext(ctx); err != nil {
		return classify(err)
	}
	return nil
}

// Close stops the background pruner and closes the connection pool.
func (s *Store) Close() error {
	s.closeOnce.Do(func() { close(s.pruneStop) })
	<-s.pruneDone
	return s.db.Close()
}

// errConflict is a write that found what its decision read changed: the
// decision runs again.
var errConflict = errors.New("mysql: conflicting write")

// MySQL error numbers the store tells apart.
const (
	erDupEntry       = 1062
	erLockWaitTimout = 1205
	erDeadlock       = 1213
	erSignal         = 1644 // budgetd_assert
	erTooManyConns   = 1040
	erServerShutdown = 1053
	erQueryTimeout   = 3024 // MySQL max_execution_time
	erStatementTime  = 1969 // MariaDB max_statement_time
)

// classify wraps what means "the store did not answer" in
// ledger.ErrUnavailable, a conflict in errConflict, and leaves the rest (a
// bug) as it is.
func classify(err error) error {
	if err == nil || errors.Is(err, context.Canceled) {
		return err
	}
	if errors.Is(err, context.DeadlineExceeded) {
		// The store's deadline (or the caller's, sooner): no answer in time.
		// The driver has closed the connection, so it is never reused.
		return fmt.Errorf("mysql: no answer within the deadline; the outcome is unknown: %w: %w", ledger.ErrUnavailable, err)
	}
	var me *mysql.MySQLError
	if errors.As(err, &me) {
		switch me.Number {
		case erSignal, erDupEntry, erDeadlock, erLockWaitTimout:
			return fmt.Errorf("%w: %w", errConflict, err)
		case erTooManyConns, erServerShutdown, erQueryTimeout, erStatementTime:
			return fmt.Errorf("%w: %w", ledger.ErrUnavailable, err)
		}
		return err
	}
	var ne net.Error
	if errors.As(err, &ne) || errors.Is(err, mysql.ErrInvalidConn) || errors.Is(err, sql.ErrConnDone) ||
		strings.Contains(err.Error(), "bad connection") || strings.Contains(err.Error(), "connection refused") {
		return fmt.Errorf("%w: %w", ledger.ErrUnavailable, err)
	}
	return err
}

// Migrate connects to the database of rawURL, checks the server as Open
// does and brings the schema up to date, then closes (budgetd migrate).
func Migrate(ctx context.Context, rawURL string) error {
	s, err := Open(ctx, rawURL, WithPruneInterval(0))
	if err != nil {
		return err
	}
	return s.Close()
}
