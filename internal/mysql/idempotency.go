package mysql

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/shopspring/decimal"

	"github.com/budgetd/budgetd/internal/ledger"
)

// idemRow is the idempotency record a decision writes with its changes.
type idemRow struct {
	id      []byte
	hash    string
	limits  string
	outcome string
}

// idemID is the record id of (scope, key).
func idemID(idem ledger.Idempotency) []byte {
	h := sha256.New()
	h.Write([]byte(idem.Scope))
	h.Write([]byte{0})
	h.Write([]byte(idem.Key))
	return h.Sum(nil)
}

// errReplayed ends an attempt that found its key's record; the record's
// outcome is in the replay it wraps.
type errReplayed struct{ outcome string }

func (e *errReplayed) Error() string { return "mysql: replayed" }

// lookupIdem reads idem's record by a current read: nil when there is none,
// errReplayed with its outcome, or ErrIdempotencyKeyReused.
func lookupIdem(ctx context.Context, conn *sql.Conn, idem ledger.Idempotency) error {
	var hash, outcome string
	err := conn.QueryRowContext(ctx, "SELECT hash, outcome FROM budgetd_idempotency WHERE id = ? LOCK IN SHARE MODE", idemID(idem)).Scan(&hash, &outcome)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return nil
	case err != nil:
		return classify(err)
	case hash != idem.Hash:
		return ledger.ErrIdempotencyKeyReused
	}
	return &errReplayed{outcome: outcome}
}

// snapJSON is a Snapshot as a record keeps it: the limit's spec and the
// state's columns, exact text.
type snapJSON struct {
	Name      string `json:"n"`
	Spec      string `json:"p"`
	CreatedUS int64  `json:"c"`
	UpdatedUS int64  `json:"u"`
	Level     string `json:"l"`
	StateUS   int64  `json:"t"`
	Extra     string `json:"x,omitempty"`
	HasExtra  bool   `json:"hx,omitempty"`
	NowUS     int64  `json:"w"`
	Override  string `json:"o,omitempty"`
	Grants    string `json:"g,omitempty"`
	Received  string `json:"rv,omitempty"` // the rollover received
}

func encodeSnap(s ledger.Snapshot) (snapJSON, error) {
	spec, err := encodeSpec(s.Limit)
	if err != nil {
		return snapJSON{}, err
	}
	level, updated, extra, err := encodeState(s.State, ledger.Marks{}, nil, ledger.Carry{})
	if err != nil {
		return snapJSON{}, err
	}
	return snapJSON{Name: s.Limit.Name, Spec: spec, CreatedUS: s.Limit.CreatedAt.UnixMicro(), UpdatedUS: s.Limit.UpdatedAt.UnixMicro(),
		Level: level, StateUS: updated, Extra: extra.String, HasExtra: extra.Valid, NowUS: s.Now.UnixMicro(),
		Override: s.Limit.Override, Grants: s.Limit.Grants.String(), Received: s.Limit.Received.String()}, nil
}

func (j snapJSON) decode() (ledger.Snapshot, error) {
	l, err := decodeSpec(j.Name, j.Spec, j.CreatedUS, j.UpdatedUS)
	if err != nil {
		return ledger.Snapshot{}, err
	}
	l.Override = j.Override
	if j.Grants != "" {
		if l.Grants, err = decimal.NewFromString(j.Grants); err != nil {
			return ledger.Snapshot{}, err
		}
	}
	if j.Received != "" {
		if l.Received, err = decimal.NewFromString(j.Received); err != nil {
			return ledger.Snapshot{}, err
		}
	}
	b := bucketRow{}
	if err := b.decode(j.Level, j.StateUS, sql.NullString{String: j.Extra, Valid: j.HasExtra}); err != nil {
		return ledger.Snapshot{}, err
	}
	return ledger.Snapshot{Limit: l, State: b.state, Now: time.UnixMicro(j.NowUS).UTC()}, nil
}

// outcomeJSON is any outcome as a record keeps it.
type outcomeJSON struct {
	Accepted    bool                `json:"a,omitempty"`
	Snaps       []snapJSON          `json:"s"`
	Entries     []string            `json:"e,omitempty"`
	Removed     decimal.Decimal     `json:"r"`
	Reservation *ledger.Reservation `json:"h,omitempty"`
	Refusal     string              `json:"f,omitempty"`
	Grant       *ledger.Grant       `json:"gr,omitempty"`
}

// recordIdem adds the record of out (one of the store's outcome types) to
// v.idems, to be written with v's changes.
func (v *view) recordIdem(idem ledger.Idempotency, out any) error {
	if idem.Key == "" {
		return nil
	}
	var o outcomeJSON
	add := func(s ledger.Snapshot, entry string) error {
		j, err := encodeSnap(s)
		o.Snaps, o.Entries = append(o.Snaps, j), append(o.Entries, entry)
		return err
	}
	var err error
	switch x := out.(type) {
	case *ledger.FillupOutcome:
		o.Accepted = x.Accepted
		for _, it := range x.Items {
			if err = add(it.Snapshot, it.EntryID); err != nil {
				return err
			}
		}
	case *ledger.DrainOutcome:
		o.Removed, err = x.Removed, add(x.Snapshot, x.EntryID)
	case *ledger.ReserveOutcome:
		o.Accepted, o.Reservation, err = x.Accepted, &x.Reservation, add(x.Snapshot, x.EntryID)
	case *ledger.ResolveOutcome:
		o.Reservation, o.Refusal, err = &x.Reservation, x.Refusal, add(x.Snapshot, "")
	case *ledger.GrantOutcome:
		o.Grant, err = &x.Grant, add(x.Snapshot, x.EntryID)
	default:
		return fmt.Errorf("mysql: no record of %T", out)
	}
	if err != nil {
		return err
	}
	text, err := json.Marshal(o)
	if err != nil {
		return err
	}
	limits := ","
	for _, l := range v.limits {
		limits += strconv.FormatUint(l.id, 10) + ","
	}
	v.idems = append(v.idems, &idemRow{id: idemID(idem), hash: idem.Hash, limits: limits, outcome: string(text)})
	return nil
}

// replay decodes a record's outcome into out, marked Replayed.
func replay(text string, out any) error {
	var o outcomeJSON
	if err := json.Unmarshal([]byte(text), &o); err != nil {
		return fmt.Errorf("mysql: idempotency record: %w", err)
	}
	snaps := make([]ledger.Snapshot, len(o.Snaps))
	for i, j := range o.Snaps {
		var err error
		if snaps[i], err = j.decode(); err != nil {
			return err
		}
	}
	one := func() (ledger.Snapshot, string) {
		if len(snaps) == 0 {
			return ledger.Snapshot{}, ""
		}
		return snaps[0], o.Entries[0]
	}
	switch x := out.(type) {
	case *ledger.FillupOutcome:
		*x = ledger.FillupOutcome{Accepted: o.Accepted, Replayed: true, Items: make([]ledger.ItemOutcome, len(snaps))}
		for i := range snaps {
			x.Items[i] = ledger.ItemOutcome{Snapshot: snaps[i], EntryID: o.Entries[i]}
		}
	case *ledger.DrainOutcome:
		s, e := one()
		*x = ledger.DrainOutcome{Removed: o.Removed, Snapshot: s, EntryID: e, Replayed: true}
	case *ledger.ReserveOutcome:
		s, e := one()
		*x = ledger.ReserveOutcome{Accepted: o.Accepted, Snapshot: s, EntryID: e, Replayed: true}
		if o.Reservation != nil {
			x.Reservation = *o.Reservation
		}
	case *ledger.ResolveOutcome:
		s, _ := one()
		*x = ledger.ResolveOutcome{Snapshot: s, Refusal: o.Refusal, Replayed: true}
		if o.Reservation != nil {
			x.Reservation = *o.Reservation
		}
	case *ledger.GrantOutcome:
		s, e := one()
		*x = ledger.GrantOutcome{Snapshot: s, EntryID: e, Replayed: true}
		if o.Grant != nil {
			x.Grant = *o.Grant
		}
	default:
		return fmt.Errorf("mysql: no record of %T", out)
	}
	return nil
}

// replayed finishes a decision that may have found its record: the
// record's outcome replaces out.
func replayed(err error, out any) error {
	var rp *errReplayed
	if errors.As(err, &rp) {
		return replay(rp.outcome, out)
	}
	return err
}
