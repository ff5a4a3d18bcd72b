package redis

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/budgetd/budgetd/internal/ledger"
)

// periodTableLen is how many period starts the Go side passes with each call
// on a periodic limit: from the period before the one containing budgetd's
// clock, seven periods ahead. The function finds the store's clock in it; a
// miss (clocks far apart, or a limit cached across a reset) answers
// period_table with the store's clock, and the call is made again with a
// table around it.
const periodTableLen = 8

// periodTable is the table of period starts of p around at, as the functions
// read it: microseconds since the epoch, comma-separated. The boundaries come
// from budgetd's own time-zone database (internal/calendar), never Redis's.
func periodTable(p ledger.Period, at time.Time) string {
	var b strings.Builder
	for i, us := range p.StartsAround(at, periodTableLen) {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(strconv.FormatInt(us, 10))
	}
	return b.String()
}

// errPeriodTable: the store's clock was outside the table of period starts
// passed for a periodic limit (the call is made again around that clock).
var errPeriodTable = errors.New("the store's clock is outside the table of period starts")

// periodTableError is errPeriodTable with the store's clock (now).
type periodTableError struct{ now time.Time }

func (e *periodTableError) Error() string {
	return fmt.Sprintf("redis: %v (%s)", errPeriodTable, e.now.Format(time.RFC3339Nano))
}

func (e *periodTableError) Unwrap() error { return errPeriodTable }

// goNow is budgetd's clock (or a test's pinned one): only where a table of
// period starts is centred; the store's clock decides the period.
func (s *Store) goNow() time.Time {
	if s.now != nil {
		if t := s.now(); !t.IsZero() {
			return t
		}
	}
	return time.Now()
}
