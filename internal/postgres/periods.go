package postgres

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"time"

	"github.com/budgetd/budgetd/internal/ledger"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// periodTableLen is how many period starts a periodic limit's table holds:
// 63 periods from the one before now (two months of days, a year of weeks,
// five years of months). The functions find "now" in it by binary search; a
// now past its end makes the store compute a new table around that now
// (refreshPeriodTable) and try the call again, once per 62 periods at most.
const periodTableLen = 64

// periodTable returns the starts (µs since the epoch) of periodTableLen
// consecutive periods of p, the first being the period before the one that
// contains now, computed with budgetd's own time-zone database: the database
// never computes a calendar, so every store draws the same boundaries.
func periodTable(p ledger.Period, now time.Time) []int64 {
	return p.StartsAround(now, periodTableLen)
}

// goNow is budgetd's own clock (or the pinned one of a test), used only to
// place a table of period starts: the database's clock decides which period
// now is in.
func (s *Store) goNow() time.Time {
	if s.cfg.now != nil {
		if t := s.cfg.now(); !t.IsZero() {
			return t
		}
	}
	return time.Now()
}

// periodTableMiss reports whether err is budgetd_period_start's
// period_table, with the limit's id and the database's now from its detail
// ("<id> <now µs>").
func periodTableMiss(err error) (id int64, now time.Time, ok bool) {
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || pgErr.Code != codePeriodTable {
		return 0, time.Time{}, false
	}
	a, b, found := strings.Cut(pgErr.Detail, " ")
	id, err1 := strconv.ParseInt(a, 10, 64)
	us, err2 := strconv.ParseInt(b, 10, 64)
	if !found || err1 != nil || err2 != nil {
		return 0, time.Time{}, false
	}
	return id, fromUS(us), true
}

// refreshPeriodTable gives the periodic limit id a table of period starts
// around now (the database's clock when the table missed). A limit that a
// concurrent PUT changed meanwhile is left alone (its new table is the PUT's).
func (s *Store) refreshPeriodTable(ctx context.Context, id int64, now time.Time) error {
	var p ledger.Period
	var startDay *int
	err := s.pool.QueryRow(ctx, "SELECT period_every, period_tz, period_start_day FROM limits WHERE id = $1 AND period_every IS NOT NULL", id).
		Scan(&p.Every, &p.TZ, &startDay)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil // deleted, or no longer periodic: the retry will tell
	}
	if err != nil {
		return err
	}
	if startDay != nil {
		p.StartDay = *startDay
	}
	_, err = s.pool.Exec(ctx, `UPDATE limits SET period_starts = $2
		WHERE id = $1 AND period_every = $3 AND period_tz = $4 AND period_start_day IS NOT DISTINCT FROM $5`,
		id, periodTable(p, now), p.Every, p.TZ, startDay)
	if err != nil {
		return err
	}
	return s.refreshOverrideTables(ctx, id, p.Every, p.TZ, startDay, now)
}
