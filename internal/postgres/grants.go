package postgres

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/budgetd/budgetd/internal/ledger"
	"github.com/jackc/pgx/v5"
	"github.com/shopspring/decimal"
)

var _ ledger.GrantStore = (*Store)(nil)

// grantDoc is a grant as budgetd_grant_json writes it.
type grantDoc struct {
	ID        string          `json:"id"`
	Amount    decimal.Decimal `json:"amount"`
	CreatedUS int64           `json:"created_us"`
	ExpiresUS int64           `json:"expires_us"`
}

func (d grantDoc) grant() ledger.Grant {
	return ledger.Grant{ID: d.ID, Amount: d.Amount, CreatedAt: fromUS(d.CreatedUS), ExpiresAt: fromUS(d.ExpiresUS)}
}

// grantOutcomeDoc is the answer of a grant or a revocation
// (budgetd_grant_done), the one stored for its Idempotency-Key.
type grantOutcomeDoc struct {
	snapDoc
	Grant    grantDoc `json:"grant"`
	EntryID  string   `json:"entry_id"`
	NowUS    int64    `json:"now_us"`
	Replayed bool     `json:"replayed"`
}

func (d grantOutcomeDoc) outcome(op string) (ledger.GrantOutcome, error) {
	snap, err := d.snapshot(d.NowUS)
	if err != nil {
		return ledger.GrantOutcome{}, fmt.Errorf("postgres %s: %w", op, err)
	}
	return ledger.GrantOutcome{Grant: d.Grant.grant(), EntryID: d.EntryID, Snapshot: snap, Replayed: d.Replayed}, nil
}

// AddGrant adds a grant to a bucket's capacity, in one transaction of two
// statements: budgetd_grant_begin locks the limit's row and the bucket and
// answers the bucket's terms and now (or the answer stored for the
// Idempotency-Key), the grant is validated against them as on every store
// (ledger.GrantExpiry), and budgetd_add_grant writes it at that now, the
// locks still held, so nothing can change the terms in between.
func (s *Store) AddGrant(ctx context.Context, ref ledger.BucketRef, amount decimal.Decimal, expiresAt time.Time, idem ledger.Idempotency, meta ledger.Meta) (ledger.GrantOutcome, error) {
	scope, key, hash := idemArgs(idem)
	var raw []byte
	var invalid error
	err := s.do(ctx, "add grant", func(ctx context.Context) error {
		invalid = nil
		targs, err := s.termsArgs(ctx, []string{ref.Limit}, []string{ref.Key})
		if err != nil {
			return err
		}
		return pgx.BeginTxFunc(ctx, s.pool, pgx.TxOptions{}, func(tx pgx.Tx) error {
			var begin struct {
				Replay  json.RawMessage `json:"replay"`
				LimitID int64           `json:"limit_id"`
				Created bool            `json:"created"`
				Limit   limitDoc        `json:"limit"`
				NowUS   int64           `json:"now_us"`
			}
			if err := tx.QueryRow(ctx, "SELECT budgetd_grant_begin($1, $2, $3, $4, $5, $6, $7)",
				ref.Limit, ref.Key, s.nowArg(), scope, key, hash, targs[0]).Scan(&begin); err != nil {
				return err
			}
			if begin.Replay != nil {
				raw = begin.Replay
				return nil
			}
			now := fromUS(begin.NowUS)
			// The grant's bound counts the capacity and the grants, not the
			// rollover the bucket receives (docs/terms.md "Rollover").
			terms := begin.Limit.limit()
			terms.Capacity, terms.Received = terms.Capacity.Sub(terms.Received), decimal.Decimal{}
			exp, err := ledger.GrantExpiry(terms, amount, expiresAt, now)
			if err != nil {
				invalid = err
				return errGrantInvalid
			}
			return tx.QueryRow(ctx, "SELECT budgetd_add_grant($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)",
				begin.LimitID, ref.Key, amount.String(), exp, now, begin.Created, scope, key, hash, metaArg(meta), targs[0]).Scan(&raw)
		})
	})
	if invalid != nil {
		return ledger.GrantOutcome{}, invalid
	}
	if err != nil {
		return ledger.GrantOutcome{}, err
	}
	return decodeGrantOutcome("add grant", raw)
}

// errGrantInvalid rolls back a grant that ledger.GrantExpiry refused.
var errGrantInvalid = errors.New("grant refused")

func decodeGrantOutcome(op string, raw []byte) (ledger.GrantOutcome, error) {
	var doc grantOutcomeDoc
	if err := json.Unmarshal(raw, &doc); err != nil {
		return ledger.GrantOutcome{}, fmt.Errorf("postgres %s: decoding %s: %w", op, raw, err)
	}
	return doc.outcome(op)
}

// ListGrants lists a bucket's active grants, oldest first.
func (s *Store) ListGrants(ctx context.Context, ref ledger.BucketRef) ([]ledger.Grant, error) {
	var docs *[]grantDoc
	if err := s.queryJSON(ctx, "list grants", &docs, "SELECT coalesce(budgetd_list_grants($1, $2, coalesce($3::timestamptz, budgetd_clock())), 'null')",
		ref.Limit, ref.Key, s.nowArg()); err != nil {
		return nil, err
	}
	if docs == nil {
		return nil, fmt.Errorf("limit %q: %w", ref.Limit, ledger.ErrLimitNotFound)
	}
	var out []ledger.Grant
	for _, d := range *docs {
		out = append(out, d.grant())
	}
	return out, nil
}

// RevokeGrant removes an active grant: one statement, budgetd_revoke_grant.
func (s *Store) RevokeGrant(ctx context.Context, ref ledger.BucketRef, id string, idem ledger.Idempotency, meta ledger.Meta) (ledger.GrantOutcome, error) {
	// An id that text cannot hold (a NUL, bytes that are not UTF-8) names
	// no grant: it goes as text that cannot name one either, so that the
	// answer is grant_not_found after the same lookups as for any unknown
	// id, not a driver error (issue 43). The idempotency scope holds the id.
	id, idem.Scope = textSafe(id), textSafe(idem.Scope)
	scope, key, hash := idemArgs(idem)
	var raw json.RawMessage
	if err := s.queryJSONTerms(ctx, "revoke grant", &raw, ref, "SELECT budgetd_revoke_grant($1, $2, $3, $4, $5, $6, $7, $8, $9)", func(terms *string) []any {
		return []any{ref.Limit, ref.Key, id, s.nowArg(), scope, key, hash, metaArg(meta), terms}
	}); err != nil {
		return ledger.GrantOutcome{}, err
	}
	return decodeGrantOutcome("revoke grant", raw)
}

// textSafe returns s as PostgreSQL text can hold it: each NUL and each byte
// that is not UTF-8 becomes U+FFFD. Only for names that are looked up:
// two strings may become one, and no grant id contains U+FFFD.
func textSafe(s string) string {
	if utf8.ValidString(s) && strings.IndexByte(s, 0) < 0 {
		return s
	}
	return strings.ToValidUTF8(strings.ReplaceAll(s, "\x00", "\uFFFD"), "\uFFFD")
}
