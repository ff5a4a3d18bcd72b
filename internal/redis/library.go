package redis

import (
	"context"
	"crypto/sha256"
	_ "embed"
	"encoding/hex"
	"fmt"
	"strings"
	"time"

	"github.com/budgetd/budgetd/internal/ledger"
	goredis "github.com/redis/go-redis/v9"
)

var (
	//go:embed lua/arith.lua
	arithLua string
	//go:embed lua/budgetd.lua
	budgetdLua string
)

// Policy constants of the store. Those of package ledger are the rule every
// store follows; the library gets all of them from here (luaConstants), and
// TestLibraryConstants fails when the Lua and these disagree.
const (
	// overrideLogLen is about how many changes of a limit's overrides its
	// log keeps (overrideLog): an instance that loaded them more changes
	// ago reads them all again.
	overrideLogLen = 10000
	// ttlSlack is added to every bucket TTL.
	ttlSlack = time.Minute
)

// Error codes: the first element of a function's answer when it refused
// (reply.go maps them to ledger errors).
const (
	codeStale         = "stale" // the limit changed since the Go side cached it
	codeReused        = "reused"
	codeNotFound      = "not_found"
	codeTooManyHolds  = "too_many_holds"
	codeLevelOverflow = "level_overflow"
	// codePeriodTable: the store's clock is outside the table of period
	// starts passed for a periodic limit; the answer carries that clock.
	codePeriodTable = "period_table"
	// codeGrantInvalid: a grant that expires by the store's clock or takes
	// the bucket's capacity past ledger.MaxAmount; the answer carries that
	// clock and the bucket's active grants.
	codeGrantInvalid  = "grant_invalid"
	codeGrantNotFound = "grant_not_found"
	// codeOverrideNotFound: no such override, or it expired by the store's
	// clock; codeOverrideExpired: an override's expires_at is not after
	// the store's clock.
	codeOverrideNotFound = "override_not_found"
	codeOverrideExpired  = "override_expired"
	// codeSwitch: the bucket was last written before an override's expiry
	// changed its rule; the answer carries the bucket's key, which Go
	// settles through the expiries (switchBucket) before it calls again.
	codeSwitch = "switch"
)

// errOverrideExpired is the refusal of an override that expires by the
// store's clock.
var errOverrideExpired = &ledger.InvalidError{Code: ledger.CodeInvalidRequest, Field: "expires_at", Reason: "is not after the store's clock"}

// codeErrors are the ledger errors of the codes (codeStale is retried).
var codeErrors = map[string]error{
	codeStale:            errStale,
	codeReused:           ledger.ErrIdempotencyKeyReused,
	codeNotFound:         ledger.ErrReservationNotFound,
	codeTooManyHolds:     ledger.ErrTooManyHolds,
	codeLevelOverflow:    ledger.ErrLevelOverflow,
	codePeriodTable:      errPeriodTable,  // answered with the store's clock: a *periodTableError
	codeGrantInvalid:     errGrantInvalid, // answered with the store's clock and grants: a *grantRefusal
	codeGrantNotFound:    ledger.ErrGrantNotFound,
	codeOverrideNotFound: ledger.ErrOverrideNotFound,
	codeOverrideExpired:  errOverrideExpired,
	codeSwitch:           errSwitch, // answered with the bucket's key: a *switchError
}

// luaConstants is the Lua that declares the constants above for the library.
func luaConstants() string {
	ms := func(d time.Duration) int64 { return d.Milliseconds() }
	var b strings.Builder
	fmt.Fprintf(&b, "local MAX_HOLDS = %d\n", ledger.MaxHolds)
	fmt.Fprintf(&b, "local MAX_LEVEL = '%s'\n", units(ledger.MaxLevel))
	fmt.Fprintf(&b, "local IDEM_MS = %d\n", ms(ledger.IdempotencyRetention))
	fmt.Fprintf(&b, "local HIST_MS = %d\n", ms(ledger.HistoryRetention))
	fmt.Fprintf(&b, "local HIST_MAX = %d\n", ledger.HistoryPerBucket)
	fmt.Fprintf(&b, "local HOLD_KEEP_MS = %d\n", ms(ledger.ClosedHoldRetention))
	fmt.Fprintf(&b, "local SLACK_MS = %d\n", ms(ttlSlack))
	fmt.Fprintf(&b, "local CLOCK_STEP_US = %d\n", ledger.ClockStep.Microseconds())
	fmt.Fprintf(&b, "local OV_LOG = %d\n", overrideLogLen)
	fmt.Fprintf(&b, "local E_STALE, E_REUSED, E_NOT_FOUND, E_TOO_MANY_HOLDS, E_LEVEL_OVERFLOW, E_PERIOD_TABLE, E_GRANT_INVALID, E_GRANT_NOT_FOUND, E_OVERRIDE_NOT_FOUND, E_OVERRIDE_EXPIRED, E_SWITCH = %q, %q, %q, %q, %q, %q, %q, %q, %q, %q, %q\n",
		codeStale, codeReused, codeNotFound, codeTooManyHolds, codeLevelOverflow, codePeriodTable, codeGrantInvalid, codeGrantNotFound, codeOverrideNotFound, codeOverrideExpired,
		codeSwitch)
	return b.String()
}

// library is the Functions library: its name carries a digest of its code,
// and so do its functions' names (fn), so budgetd versions with different
// libraries can share a Redis during an upgrade, each calling its own.
var library = func() (l struct{ name, src, version string }) {
	body := luaConstants() + arithLua + "\n" + budgetdLua
	h := sha256.Sum256([]byte(body))
	l.version = hex.EncodeToString(h[:6])
	l.name = "budgetd_" + l.version
	l.src = "#!lua name=" + l.name + "\nlocal V = '_" + l.version + "'\n" + body
	return l
}()

// fn is the name of a library function.
func fn(op string) string { return "budgetd_" + op + "_" + library.version }

// loadLibrary loads the library on every master where it is missing. Open
// calls it; the batcher calls it again when a server answers that a
// function does not exist (a restarted or flushed server, a new node).
func (s *Store) loadLibrary(ctx context.Context) error {
	return s.eachNode(ctx, func(ctx context.Context, c goredis.Cmdable) error {
		err := c.FunctionLoad(ctx, library.src).Err()
		if err != nil && !strings.Contains(err.Error(), "already exists") {
			return fmt.Errorf("redis: FUNCTION LOAD: %w", err)
		}
		return nil
	})
}
