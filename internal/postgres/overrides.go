package postgres

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"time"

	"github.com/budgetd/budgetd/internal/ledger"
	"github.com/budgetd/budgetd/internal/ovset"
	"github.com/jackc/pgx/v5"
	"github.com/shopspring/decimal"
)

// overrideDoc is an override as budgetd_override_json writes it.
type overrideDoc struct {
	Pattern     string           `json:"pattern"`
	Capacity    *decimal.Decimal `json:"capacity"`
	LeakAmount  *decimal.Decimal `json:"leak_amount"`
	LeakPerUS   *int64           `json:"leak_per_us"`
	TZ          *string          `json:"tz"`
	StartDay    *int             `json:"start_day"`
	WindowLenUS *int64           `json:"window_length_us"`
	ExpiresUS   *int64           `json:"expires_us"`
	CreatedUS   int64            `json:"created_us"`
	UpdatedUS   int64            `json:"updated_us"`
}

func (d overrideDoc) override() ledger.Override {
	o := ledger.Override{Pattern: d.Pattern, CreatedAt: fromUS(d.CreatedUS), UpdatedAt: fromUS(d.UpdatedUS)}
	if d.Capacity != nil {
		o.Capacity = decimal.NewNullDecimal(*d.Capacity)
	}
	if d.LeakAmount != nil && d.LeakPerUS != nil {
		o.LeakAmount, o.LeakPer = *d.LeakAmount, time.Duration(*d.LeakPerUS)*time.Microsecond
	}
	if d.TZ != nil {
		o.TZ = *d.TZ
	}
	if d.StartDay != nil {
		o.StartDay = *d.StartDay
	}
	if d.WindowLenUS != nil {
		o.WindowLength = time.Duration(*d.WindowLenUS) * time.Microsecond
	}
	if d.ExpiresUS != nil {
		o.ExpiresAt = fromUS(*d.ExpiresUS)
	}
	return o
}

// overrideCols are the columns of an override a listing reads (NULL when
// none applies).
type overrideCols struct {
	pattern, capacity, leakAmount, tz *string
	leakPerUS, windowUS               *int64
	startDay                          *int32
}

// override returns the override the columns hold, parsing its numbers with p.
func (c overrideCols) override(p *numParser) ledger.Override {
	o := ledger.Override{Pattern: *c.pattern}
	if c.capacity != nil {
		o.Capacity = decimal.NewNullDecimal(p.num(*c.capacity))
	}
	if c.leakAmount != nil && c.leakPerUS != nil {
		o.LeakAmount, o.LeakPer = p.num(*c.leakAmount), time.Duration(*c.leakPerUS)*time.Microsecond
	}
	if c.tz != nil {
		o.TZ = *c.tz
	}
	if c.startDay != nil {
		o.StartDay = int(*c.startDay)
	}
	if c.windowUS != nil {
		o.WindowLength = time.Duration(*c.windowUS) * time.Microsecond
	}
	return o
}

// periodKey names the period a table of period starts is made for, as
// budgetd_period_key does.
func periodKey(p ledger.Period) string {
	sd := ""
	if p.StartDay != 0 {
		sd = strconv.Itoa(p.StartDay)
	}
	return p.Every + " " + p.TZ + " " + sd
}

// PutOverride creates or replaces an override (budgetd_put_override),
// validated against the limit and the database's clock as they are just
// before.
func (s *Store) PutOverride(ctx context.Context, limit string, o ledger.Override) (ledger.Override, error) {
	var l limitDoc
	var nowUS int64
	var raw []byte
	err := s.do(ctx, "get limit", func(ctx context.Context) error {
		return s.pool.QueryRow(ctx, "SELECT budgetd_limit_json(budgetd_limit($1)), budgetd_us(coalesce($2, budgetd_clock()))", limit, s.nowArg()).Scan(&raw, &nowUS)
	})
	if err != nil {
		return ledger.Override{}, err
	}
	if err := json.Unmarshal(raw, &l); err != nil {
		return ledger.Override{}, fmt.Errorf("postgres put override: decoding %s: %w", raw, err)
	}
	lim := l.limit()
	if err := ledger.ValidateOverride(lim, o, fromUS(nowUS)); err != nil {
		return ledger.Override{}, err
	}
	var capacity, leakAmount, leakPer, tz, startDay, starts, key, wlen, wprec, expires any
	if o.Capacity.Valid {
		capacity = o.Capacity.Decimal.String()
	}
	if o.LeakPer != 0 {
		leakAmount, leakPer = o.LeakAmount.String(), o.LeakPer.Microseconds()
	}
	if o.TZ != "" || o.StartDay != 0 {
		if o.TZ != "" {
			tz = o.TZ
		}
		if o.StartDay != 0 {
			startDay = o.StartDay
		}
		p := *o.Apply(lim).Period
		starts, key = periodTable(p, s.goNow()), periodKey(p)
	}
	if o.WindowLength != 0 {
		w := o.Apply(lim).Window
		wlen, wprec = w.Length.Microseconds(), w.Precision.Microseconds()
	}
	if !o.ExpiresAt.IsZero() {
		expires = o.ExpiresAt
	}
	var doc *overrideDoc
	err = s.changeOverride(ctx, "put override", limit, o.Pattern, &doc, func(set *ovset.Set) { set.Put(o) },
		`SELECT budgetd_put_override($1, $2, $3, false, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13)`,
		limit, o.Pattern, s.nowArg(), capacity, leakAmount, leakPer, tz, startDay, starts, key, wlen, wprec, expires)
	if err != nil {
		return ledger.Override{}, err
	}
	if doc == nil {
		return ledger.Override{}, fmt.Errorf("postgres put override: no answer: %w", errBadAnswer)
	}
	return doc.override(), nil
}

// GetOverride returns an unexpired override.
func (s *Store) GetOverride(ctx context.Context, limit, pattern string) (ledger.Override, error) {
	var doc *overrideDoc
	// The limit's id is in the answer, so that budgetd_limit runs (and
	// raises for an unknown limit) whatever the plan.
	err := s.queryJSON(ctx, "get override", &doc, `SELECT CASE WHEN l.id IS NULL THEN NULL ELSE coalesce(
		       (SELECT budgetd_override_json(o) FROM overrides o
		         WHERE o.limit_id = l.id AND o.pattern = $2
		           AND (o.expires_at IS NULL OR o.expires_at > coalesce($3::timestamptz, budgetd_clock()))), 'null') END
		  FROM (SELECT (budgetd_limit($1)).id) l`,
		limit, pattern, s.nowArg())
	if err != nil {
		return ledger.Override{}, err
	}
	if doc == nil {
		return ledger.Override{}, fmt.Errorf("override %q of %q: %w", pattern, limit, ledger.ErrOverrideNotFound)
	}
	return doc.override(), nil
}

// ListOverrides lists up to n unexpired overrides with patterns > after, in
// byte order: one range scan of the primary key.
func (s *Store) ListOverrides(ctx context.Context, limit, after string, n int) ([]ledger.Override, error) {
	var docs []overrideDoc
	err := s.queryJSON(ctx, "list overrides", &docs, `SELECT CASE WHEN l.id IS NULL THEN NULL ELSE
		       (SELECT coalesce(jsonb_agg(budgetd_override_json(o) ORDER BY o.pattern), '[]')
		          FROM (SELECT o.* FROM overrides o
		                 WHERE o.limit_id = l.id AND o.pattern > $2::text COLLATE "C"
		                   AND (o.expires_at IS NULL OR o.expires_at > coalesce($4::timestamptz, budgetd_clock()))
		                 ORDER BY o.pattern LIMIT $3) o) END
		  FROM (SELECT (budgetd_limit($1)).id) l`, limit, after, n, s.nowArg())
	if err != nil {
		return nil, err
	}
	out := make([]ledger.Override, len(docs))
	for i, d := range docs {
		out[i] = d.override()
	}
	return out, nil
}

// DeleteOverride removes an unexpired override (budgetd_put_override).
func (s *Store) DeleteOverride(ctx context.Context, limit, pattern string) error {
	var doc *overrideDoc
	err := s.changeOverride(ctx, "delete override", limit, pattern, &doc, func(set *ovset.Set) { set.Delete(pattern) },
		`SELECT coalesce(budgetd_put_override($1, $2, $3, true), 'null')`, limit, pattern, s.nowArg())
	if err != nil {
		return err
	}
	if doc == nil {
		return fmt.Errorf("override %q of %q: %w", pattern, limit, ledger.ErrOverrideNotFound)
	}
	return nil
}

// refreshOverrideTables gives every override of the periodic limit id that
// sets tz or start_day a table of period starts around now for the limit's
// period as it is, one computation per distinct (tz, start_day).
func (s *Store) refreshOverrideTables(ctx context.Context, id int64, every, limitTZ string, limitStartDay *int, now time.Time) error {
	rows, err := s.pool.Query(ctx, `SELECT DISTINCT period_tz, period_start_day FROM overrides
		WHERE limit_id = $1 AND (period_tz IS NOT NULL OR period_start_day IS NOT NULL)`, id)
	if err != nil {
		return err
	}
	type combo struct {
		tz       *string
		startDay *int
	}
	var combos []combo
	for rows.Next() {
		var c combo
		if err := rows.Scan(&c.tz, &c.startDay); err != nil {
			rows.Close()
			return err
		}
		combos = append(combos, c)
	}
	if err := rows.Err(); err != nil {
		return err
	}
	for _, c := range combos {
		p := ledger.Period{Every: every, TZ: limitTZ}
		if limitStartDay != nil {
			p.StartDay = *limitStartDay
		}
		if c.tz != nil {
			p.TZ = *c.tz
		}
		if c.startDay != nil {
			p.StartDay = *c.startDay
		}
		if _, err := s.pool.Exec(ctx, `UPDATE overrides SET period_starts = $4, period_key = $5
			WHERE limit_id = $1 AND period_tz IS NOT DISTINCT FROM $2 AND period_start_day IS NOT DISTINCT FROM $3`,
			id, c.tz, c.startDay, periodTable(p, now), periodKey(p)); err != nil {
			return err
		}
	}
	return nil
}

// changeOverride runs the statement sql of a PUT or DELETE of the
// override pattern (budgetd_put_override), after settling the buckets it
// covers (changeTerms), and decodes its answer into out; change makes the
// same change on the limit's overrides in Go.
func (s *Store) changeOverride(ctx context.Context, op, limit, pattern string, out any, change func(*ovset.Set), sql string, args ...any) error {
	var raw []byte
	err := s.changeTerms(ctx, op, limit, pattern, func(l ledger.Limit, set *ovset.Set) ledger.Limit {
		change(set)
		return l
	}, func(ctx context.Context, tx pgx.Tx) error { return tx.QueryRow(ctx, sql, args...).Scan(&raw) })
	if err != nil {
		return err
	}
	if err := json.Unmarshal(raw, out); err != nil {
		return fmt.Errorf("postgres %s: decoding %s: %w", op, raw, err)
	}
	return nil
}
