// Package redis is budgetd's Redis store: buckets, holds, history and
// idempotency records live in Redis (standalone or Redis Cluster), and every
// decision is one call of a Redis function (FCALL) that runs the bucket rule on exact integers.
//
// Amounts are integers in units of 10^-12 kept as decimal strings; the functions
// do multi-limb integer arithmetic, never floating point (only a bucket's TTL
// is estimated in doubles, with a margin), so every answer equals the pure
// rule of package bucket. docs/redis.md describes the key layout, the
// representation, TTLs, durability and outage behaviour.
package redis

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/budgetd/budgetd/internal/ledger"
	goredis "github.com/redis/go-redis/v9"
)

var _ ledger.Store = (*Store)(nil)

// prefixRE bounds key prefixes: no braces (hash tags), no glob characters
// (DeleteLimit scans by pattern) and no colon (one prefix cannot nest in
// another's keys).
var prefixRE = regexp.MustCompile(`^[A-Za-z0-9_.-]{1,64}$`)

// Timeouts bound every call, so a store whose Redis is down fails fast.
const (
	dialTimeout          = 2 * time.Second
	ioTimeout            = 2 * time.Second
	poolTimeout          = 3 * time.Second
	dialerRetries        = 2
	defaultLimitCacheTTL = time.Second
	// callTimeout is the one deadline of a store call: an outcome or
	// ErrUnavailable within it, however long the call queued in the batcher.
	callTimeout = 2 * time.Second
)

// errCallTimeout is the cause of a call's own deadline (callTimeout), told
// apart from the caller's context ending.
var errCallTimeout = errors.New("redis: call deadline")

// rediser is the client: *goredis.Client or *goredis.ClusterClient.
type rediser = goredis.UniversalClient

// Store is the Redis store. Open returns one; it is safe for concurrent use.
type Store struct {
	client  rediser
	batch   *batcher // every function call goes through it
	cluster bool
	// slotCheck: refuse multi-bucket calls across slots (always in a cluster).
	slotCheck bool
	// eachNode runs fn on every master (one for standalone Redis).
	eachNode func(ctx context.Context, fn func(ctx context.Context, c goredis.Cmdable) error) error

	k   keys
	now func() time.Time // nil: Redis TIME inside each function
	log *slog.Logger
	// clockSteps counts the replies that found a bucket's stored time more
	// than ledger.ClockStep ahead of now (taken as now).
	clockSteps atomic.Uint64
	// periodSkew is the store's clock minus budgetd's (ns), as last seen
	// when a table of period starts missed; tables are made around
	// budgetd's clock plus it.
	periodSkew atomic.Int64
	eviction   string
	cacheTTL   time.Duration
	// waitReplicas > 0: every write is acknowledged only once that many
	// replicas have it (WAIT), within waitTimeout (WithWaitReplicas).
	waitReplicas int
	waitTimeout  time.Duration
	// callTimeout bounds each call (limit lookups, its wait in the batcher
	// and at Redis).
	callTimeout time.Duration

	eventRetention time.Duration // WithEventRetention
	keepArg        string        // eventRetention in ms, as the functions take it

	mu          sync.Mutex
	discovered  time.Time              // when Events last started a discovery of outbox streams (events.go)
	discovering chan struct{}          // closed when the running discovery ends; nil when none runs
	limits      map[string]cachedLimit // by name
	gens        map[int64]string       // generation → name
	ovSets      map[int64]*ovSet       // generation → its overrides as last loaded (kept across forgetAll)
	// ovLoad serializes whole reads of a limit's overrides, so calls that
	// find the same set missing read it once.
	ovLoad sync.Mutex
	// ovChange (a lock of capacity one) serializes this instance's changes
	// of overrides: each checks the limit's version, which every change
	// bumps, so concurrent changes through one instance would otherwise
	// fail each other's check until retryStale gives up.
	ovChange chan struct{}
}

type cachedLimit struct {
	l       ledger.Limit
	gen     int64
	version string // bumped by every PutLimit
	fetched time.Time
	args    limitArgs
	at      time.Time // the clock its period tables were made around
	// ov is the definition's override counter (bumped by every change of
	// an override), ovs the limit's overrides loaded at it or later (nil:
	// none), and ovArgs the script arguments of each override's terms
	// (pattern and update time → limitArgs), formatted on first use.
	ov     string
	ovs    *ovSet
	ovArgs *ovArgs
}

// Option configures a Store.
type Option func(*Store)

// WithPrefix sets the prefix of every Redis key (default "budgetd"). It may not
// contain braces or glob characters.
func WithPrefix(p string) Option { return func(s *Store) { s.k.prefix = p } }

// WithClock is a test hook: the functions take "now" from it instead of Redis
// TIME.
func WithClock(now func() time.Time) Option { return func(s *Store) { s.now = now } }

// WithEvictionCheck sets what Open does when Redis may evict keys
// (maxmemory-policy other than noeviction): "refuse" (default) fails Open,
// "warn" logs a warning and goes on.
func WithEvictionCheck(mode string) Option { return func(s *Store) { s.eviction = mode } }

// WithSlotCheck makes a standalone store refuse multi-bucket calls whose
// buckets are in different hash slots (ledger.ErrCrossSlot), as Redis Cluster
// must, so callers find untagged keys before they move to a cluster. Redis
// Cluster always checks.
func WithSlotCheck() Option { return func(s *Store) { s.slotCheck = true } }

// WithCallTimeout sets the one deadline of each store call (default 2s): its
// limit lookup, its wait in the pipeline queue and at Redis. A call that
// reaches it fails with ledger.ErrUnavailable.
func WithCallTimeout(d time.Duration) Option { return func(s *Store) { s.callTimeout = d } }

// WithLogger sets the logger for warnings (default slog.Default()).
func WithLogger(l *slog.Logger) Option { return func(s *Store) { s.log = l } }

// WithLimitCacheTTL sets how long a limit definition read from Redis is used
// without reading it again (default 1s; 0 reads it on every call, which costs
// a second round trip). Changes made through this Store apply at once; those
// made by other processes within this time.
func WithLimitCacheTTL(d time.Duration) Option { return func(s *Store) { s.cacheTTL = d } }

// WithWaitReplicas makes every write wait for n replicas (Redis's WAIT,
// sent on the connection of the write, after it) for at most timeout: a
// call is answered only once its write reached them, and one whose WAIT
// saw fewer fails with ledger.ErrUnavailable (the write is on the primary:
// a retry with the same Idempotency-Key replays it). Standalone and
// Sentinel only: on Cluster a keyless WAIT cannot be sent to the write's
// node (docs/redis.md "Waiting for replicas"). 0 (the default): writes
// are acknowledged by the primary alone.
func WithWaitReplicas(n int, timeout time.Duration) Option {
	return func(s *Store) { s.waitReplicas, s.waitTimeout = n, timeout }
}

// IsURL reports whether url names a Redis store: redis://, rediss://,
// redis+cluster:// or rediss+cluster://.
func IsURL(url string) bool {
	for _, p := range []string{"redis://", "rediss://", "redis+cluster://", "rediss+cluster://"} {
		if strings.HasPrefix(url, p) {
			return true
		}
	}
	return false
}

// Open connects to Redis and checks that it answers and that it will not
// evict keys. url is redis://[user:pass@]host:port/db (or rediss://) for a
// standalone server and redis+cluster://[user:pass@]host1:port1,host2:port2
// (or rediss+cluster://) for Redis Cluster.
func Open(ctx context.Context, url string, opts ...Option) (*Store, error) {
	s := &Store{
		k:        keys{prefix: "budgetd"},
		log:      slog.Default(),
		eviction: "refuse",
		cacheTTL: defaultLimitCacheTTL,
		limits:   map[string]cachedLimit{},
		gens:     map[int64]string{},
		ovSets:   map[int64]*ovSet{},
		ovChange: make(chan struct{}, 1),

		callTimeout:    callTimeout,
		eventRetention: DefaultEventRetention,
	}
	for _, o := range opts {
		o(s)
	}
	if s.eventRetention <= 0 {
		return nil, fmt.Errorf("redis: event retention %s: want a positive duration", s.eventRetention)
	}
	s.keepArg = strconv.FormatInt(s.eventRetention.Milliseconds(), 10)
	if !prefixRE.MatchString(s.k.prefix) {
		return nil, fmt.Errorf("redis: key prefix %q: want 1-64 characters of [A-Za-z0-9_.-]", s.k.prefix)
	}
	if s.eviction != "refuse" && s.eviction != "warn" {
		return nil, fmt.Errorf("redis: eviction check %q: want refuse or warn", s.eviction)
	}
	if s.waitReplicas < 0 || s.waitReplicas > 0 && (s.waitTimeout <= 0 || s.waitTimeout >= s.callTimeout) {
		return nil, fmt.Errorf("redis: waiting for %d replicas for %s: want 0 replicas, or some for a positive time shorter than a call's deadline (%s)",
			s.waitReplicas, s.waitTimeout, s.callTimeout)
	}
	if err := s.connect(url); err != nil {
		return nil, err
	}
	if s.cluster && s.waitReplicas > 0 {
		s.client.Close()
		return nil, errors.New("redis: waiting for replicas is for a standalone primary or Sentinel, not Cluster (docs/redis.md \"Waiting for replicas\")")
	}
	s.batch = newBatcher(s.client, s.callTimeout, s.loadLibrary, maxInflight, maxBatch)
	s.batch.waitReplicas, s.batch.waitTimeout = s.waitReplicas, s.waitTimeout
	if err := s.client.Ping(ctx).Err(); err != nil {
		s.client.Close()
		return nil, s.fail(ctx, "ping", err)
	}
	if err := s.checkVersion(ctx); err != nil {
		s.client.Close()
		return nil, err
	}
	if err := s.checkConfig(ctx); err != nil {
		s.client.Close()
		return nil, err
	}
	if err := s.loadLibrary(ctx); err != nil {
		s.client.Close()
		return nil, s.fail(ctx, "load library", err)
	}
	return s, nil
}

func (s *Store) connect(rawURL string) error {
	if rest, ok := strings.CutPrefix(rawURL, "redis+cluster://"); ok {
		return s.connectCluster(rest, false)
	}
	if rest, ok := strings.CutPrefix(rawURL, "rediss+cluster://"); ok {
		return s.connectCluster(rest, true)
	}
	if u, err := url.Parse(rawURL); err == nil && u.Query().Has("master_name") {
		return s.connectSentinel(rawURL)
	}
	o, err := goredis.ParseURL(rawURL)
	if err != nil {
		return fmt.Errorf("redis: %w", err)
	}
	// Bounded timeouts unless the URL sets its own (dial_timeout=…).
	bounded(&o.DialTimeout, &o.ReadTimeout, &o.WriteTimeout, &o.PoolTimeout, &o.DialerRetries)
	o.MaxRetries = -1              // a lost reply must not run a function twice
	o.ContextTimeoutEnabled = true // a call's deadline bounds its I/O
	s.single(goredis.NewClient(o))
	return nil
}

// single makes c, a client of one primary (a server's, or Sentinel's), the
// store's: every node-wide step runs on it.
func (s *Store) single(c *goredis.Client) {
	s.client = c
	s.eachNode = func(ctx context.Context, fn func(context.Context, goredis.Cmdable) error) error { return fn(ctx, c) }
}

// bounded sets the timeouts and dial retries a URL left unset (0) to the
// store's own.
func bounded(dial, read, write, pool *time.Duration, retries *int) {
	for _, d := range []struct {
		p   *time.Duration
		def time.Duration
	}{{dial, dialTimeout}, {read, ioTimeout}, {write, ioTimeout}, {pool, poolTimeout}} {
		if *d.p == 0 {
			*d.p = d.def
		}
	}
	if *retries == 0 {
		*retries = dialerRetries
	}
}

// connectSentinel connects through Redis Sentinel (go-redis's failover URL:
// redis://sentinel1:26379?master_name=NAME&addr=sentinel2:26379…): the
// Sentinels name the primary, and after a failover the client asks them
// again, so budgetd follows a promoted replica without a restart. Every call
// goes to the primary: the options that read from replicas are refused, a
// replica's answer being possibly behind the primary's (docs/redis.md
// "Sentinel").
func (s *Store) connectSentinel(rawURL string) error {
	o, err := goredis.ParseFailoverURL(rawURL)
	if err != nil {
		return fmt.Errorf("redis: sentinel url: %w", err)
	}
	if o.MasterName == "" {
		return errors.New("redis: sentinel url: master_name is empty")
	}
	if o.ReplicaOnly || o.RouteByLatency || o.RouteRandomly {
		return errors.New("redis: sentinel url: replica_only, route_by_latency and route_randomly would serve calls from replicas; budgetd reads and writes the primary only")
	}
	bounded(&o.DialTimeout, &o.ReadTimeout, &o.WriteTimeout, &o.PoolTimeout, &o.DialerRetries)
	o.MaxRetries = -1              // a lost reply must not run a function twice
	o.ContextTimeoutEnabled = true // a call's deadline bounds its I/O
	s.single(goredis.NewFailoverClient(o))
	return nil
}

func (s *Store) connectCluster(rest string, useTLS bool) error {
	u, err := url.Parse("redis://" + rest)
	if err != nil {
		return fmt.Errorf("redis: cluster url: %w", err)
	}
	var addrs []string
	for _, a := range strings.Split(u.Host, ",") {
		if a = strings.TrimSpace(a); a != "" {
			addrs = append(addrs, a)
		}
	}
	if len(addrs) == 0 {
		return errors.New("redis: cluster url names no host")
	}
	o := &goredis.ClusterOptions{
		Addrs:       addrs,
		DialTimeout: dialTimeout, ReadTimeout: ioTimeout, WriteTimeout: ioTimeout,
		PoolTimeout: poolTimeout, DialerRetries: dialerRetries,
		MaxRetries: -1, ContextTimeoutEnabled: true,
	}
	if u.User != nil {
		o.Username = u.User.Username()
		o.Password, _ = u.User.Password()
	}
	if useTLS {
		o.TLSConfig = &tls.Config{MinVersion: tls.VersionTLS12}
	}
	c := goredis.NewClusterClient(o)
	s.client = c
	s.cluster = true
	s.slotCheck = true
	s.eachNode = func(ctx context.Context, fn func(context.Context, goredis.Cmdable) error) error {
		return c.ForEachMaster(ctx, func(ctx context.Context, n *goredis.Client) error { return fn(ctx, n) })
	}
	return nil
}

// checkVersion refuses servers older than Redis 7.0, which have no Functions
// (and no FCALL_RO, which makes "Inspect writes nothing" a guarantee of the
// server).
func (s *Store) checkVersion(ctx context.Context) error {
	return s.eachNode(ctx, func(ctx context.Context, c goredis.Cmdable) error {
		info, err := c.Info(ctx, "server").Result()
		if err != nil {
			return s.fail(ctx, "info", err)
		}
		for _, line := range strings.Split(info, "\n") {
			if v, ok := strings.CutPrefix(strings.TrimSpace(line), "redis_version:"); ok {
				major, _, _ := strings.Cut(v, ".")
				if n, err := strconv.Atoi(major); err == nil && n < 7 {
					return fmt.Errorf("redis: server version %s is too old; budgetd needs Redis 7.0 or later", v)
				}
			}
		}
		return nil
	})
}

// startupConfig is what Open reads of every master's config, in one
// CONFIG GET (Redis 7.0 takes several parameters).
var startupConfig = []any{"config", "get", "maxmemory-policy", "appendonly", "aof-load-truncated"}

// checkConfig reads the config of every master once and checks it: the
// eviction policy (checkEviction) and how a torn AOF is loaded
// (checkTornAOF). A master that does not show its config is warned about
// eviction and not about the AOF.
func (s *Store) checkConfig(ctx context.Context) error {
	return s.eachNode(ctx, func(ctx context.Context, c goredis.Cmdable) error {
		cmd := goredis.NewMapStringStringCmd(ctx, startupConfig...)
		_, err := c.Pipelined(ctx, func(p goredis.Pipeliner) error { return p.Process(ctx, cmd) })
		if err == nil {
			err = cmd.Err()
		}
		if err != nil {
			s.log.Warn("redis: cannot read maxmemory-policy; make sure it is noeviction, or budgets may be lost", "err", err)
			return nil
		}
		res := cmd.Val()
		s.checkTornAOF(res)
		return s.checkEviction(res)
	})
}

// checkEviction checks a master's maxmemory-policy: any policy but
// noeviction may evict budget keys (volatile-* too: buckets have TTLs).
func (s *Store) checkEviction(config map[string]string) error {
	policy, ok := config["maxmemory-policy"]
	if !ok {
		s.log.Warn("redis: maxmemory-policy is not readable; make sure it is noeviction, or budgets may be lost")
		return nil
	}
	if policy == "noeviction" {
		return nil
	}
	if s.eviction == "warn" {
		s.log.Warn("REDIS MAY EVICT BUDGET KEYS: maxmemory-policy is not noeviction; accepted spend can be forgotten under memory pressure",
			"maxmemory-policy", policy)
		return nil
	}
	return fmt.Errorf("redis: maxmemory-policy is %q, which can evict budget keys; set it to noeviction (or start with the eviction check set to warn)", policy)
}

// checkTornAOF warns when a master keeps an AOF that it loads with
// aof-load-truncated yes (Redis's default): after a crash that tore the AOF
// inside one script's MULTI/EXEC block, Redis 7.0 cuts the file there and
// leaves the MULTI open, and the next load applies a part of that script's
// writes, such as a history entry without its level (docs/redis.md,
// "Durability").
func (s *Store) checkTornAOF(config map[string]string) {
	if config["appendonly"] != "yes" || config["aof-load-truncated"] != "yes" {
		return
	}
	s.log.Warn("redis: AOF is loaded with aof-load-truncated yes, which can bring back a part of a script torn by a crash; "+
		"set aof-load-truncated no and run redis-check-aof --fix when Redis refuses a torn AOF (docs/redis.md, Durability)",
		"aof-load-truncated", "yes")
}

// Ping reports whether Redis answers. A cluster answers when some master
// does: with one master down, calls on its slots fail with ErrUnavailable
// while the others go on, so readiness does not turn a partial outage into a
// total one.
func (s *Store) Ping(ctx context.Context) error {
	err := s.client.Ping(ctx).Err()
	if err != nil && s.cluster {
		var mu sync.Mutex
		ok := false
		_ = s.eachNode(ctx, func(ctx context.Context, c goredis.Cmdable) error {
			if c.Ping(ctx).Err() == nil {
				mu.Lock()
				ok = true
				mu.Unlock()
			}
			return nil
		})
		if ok {
			err = nil
		}
	}
	if err != nil {
		return s.fail(ctx, "ping", err)
	}
	return nil
}

// Close closes the connections.
func (s *Store) Close() error { return s.client.Close() }

// fail translates a client error: the errors of a caller's context pass
// through; a Redis that did not answer (see didNotAnswer; the call's own
// deadline too) is ledger.ErrUnavailable (the outcome of a write may be
// unknown); an error already translated keeps its meaning. Anything else —
// a script error, a reply of the wrong type — is a bug, not an outage: it is
// returned as it is, and the HTTP layer answers a generic 500 and logs it.
func (s *Store) fail(ctx context.Context, op string, err error) error {
	if ctx.Err() != nil && !errors.Is(context.Cause(ctx), errCallTimeout) {
		return ctx.Err()
	}
	if ctx.Err() != nil || didNotAnswer(err) {
		return fmt.Errorf("redis %s: %w: %v", op, ledger.ErrUnavailable, err)
	}
	return fmt.Errorf("redis %s: %w", op, err)
}

// didNotAnswer reports whether err says that Redis did not answer: no
// connection (refused, reset, closed mid-call, a closed client or a pool
// with none free), a deadline, or a server that answered that it cannot
// serve now (loading its data set, busy with a script, a cluster down or
// reconfiguring, a read-only replica after failover, out of memory, too
// many clients, failing to persist, the library not loaded, a password
// refused).
func didNotAnswer(err error) bool {
	var netErr net.Error
	switch {
	case errors.Is(err, ledger.ErrUnavailable),
		errors.Is(err, context.DeadlineExceeded), errors.Is(err, context.Canceled),
		errors.As(err, &netErr),
		errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF),
		errors.Is(err, syscall.ECONNREFUSED), errors.Is(err, syscall.ECONNRESET), errors.Is(err, syscall.EPIPE),
		errors.Is(err, goredis.ErrClosed), errors.Is(err, goredis.ErrPoolTimeout), errors.Is(err, goredis.ErrPoolExhausted),
		goredis.IsLoadingError(err), goredis.IsReadOnlyError(err), goredis.IsClusterDownError(err),
		goredis.IsTryAgainError(err), goredis.IsMasterDownError(err), goredis.IsMaxClientsError(err),
		goredis.IsOOMError(err), goredis.IsNoReplicasError(err),
		goredis.IsAuthError(err): // a password rotated under a running budgetd: Redis refuses the connection
		return true
	}
	if _, ok := goredis.IsMovedError(err); ok {
		return true // redirects ran out while the cluster moved slots
	}
	if _, ok := goredis.IsAskError(err); ok {
		return true
	}
	for _, prefix := range []string{"BUSY", "MISCONF", "UNBLOCKED", "Function not found", "ERR max number of clients"} {
		if goredis.HasErrorPrefix(err, prefix) {
			return true
		}
	}
	return false
}

// nowArg is the argument that carries the test clock ("" means Redis TIME,
// as does a zero reading of the hook).
func (s *Store) nowArg() string {
	if s.now == nil {
		return ""
	}
	t := s.now()
	if t.IsZero() {
		return ""
	}
	return fmt.Sprint(t.UnixMicro())
}
