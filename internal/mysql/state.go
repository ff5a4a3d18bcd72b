package mysql

import (
	"database/sql"
	"encoding/json"
	"fmt"
	"time"

	"github.com/budgetd/budgetd/internal/bucket"
	"github.com/budgetd/budgetd/internal/ledger"
)

// bucketRow is a bucket as a decision read it: its state, the version the
// decision's write compares with, and hseq, the last history entry id it
// gave. exists is false for a bucket never written (version 0).
type bucketRow struct {
	key     string
	exists  bool
	version uint64
	hseq    uint64
	last    int64 // last_us
	state   bucket.State
	marks   ledger.Marks   // the threshold marks (ledger.Watch)
	stored  mark           // the mark of marks as read, its row's th_marked and entry in budgetd_marked
	grants  []ledger.Grant // its grants, oldest first, expired ones until the next grant or revocation
	carry   ledger.Carry   // the rollover of a limit with rollover (ledger.CarryAt), kept from its first write of a period
}

// scanner is a *sql.Row or *sql.Rows.
type scanner interface{ Scan(dest ...any) error }

// scan reads bkey, version, level, updated_us, extra, hseq, last_us.
func (b *bucketRow) scan(r scanner) error {
	var key []byte
	var level string
	var updated int64
	var extra sql.NullString
	if err := r.Scan(&key, &b.version, &level, &updated, &extra, &b.hseq, &b.last); err != nil {
		return err
	}
	b.key, b.exists = string(key), true
	return b.decode(level, updated, extra)
}

// decode sets b's state from its columns.
func (b *bucketRow) decode(level string, updated int64, extra sql.NullString) error {
	lv, ok := bucket.ParseAmount(level)
	if !ok {
		return fmt.Errorf("mysql: bucket %q: level %q", b.key, level)
	}
	b.state = bucket.State{Level: lv}
	if updated != 0 {
		b.state.Updated = time.UnixMicro(updated).UTC()
	}
	if !extra.Valid {
		return nil
	}
	var x extraJSON
	if err := json.Unmarshal([]byte(extra.String), &x); err != nil {
		return fmt.Errorf("mysql: bucket %q: extra: %w", b.key, err)
	}
	for _, h := range x.Holds {
		a, ok := bucket.ParseAmount(h.Amount)
		if !ok {
			return fmt.Errorf("mysql: bucket %q: hold amount %q", b.key, h.Amount)
		}
		b.state.Holds = append(b.state.Holds, bucket.Hold{ID: h.ID, Amount: a, ExpiresAt: time.UnixMicro(h.ExpiresUS).UTC()})
	}
	for _, sl := range x.Slots {
		a, ok := bucket.ParseAmount(sl.Sum)
		if !ok {
			return fmt.Errorf("mysql: bucket %q: slot sum %q", b.key, sl.Sum)
		}
		b.state.Slots = append(b.state.Slots, bucket.Slot{Index: sl.Index, Sum: a})
	}
	if x.Marks != nil {
		b.marks = *x.Marks
		b.stored = markOf(b.marks)
	}
	b.grants = x.Grants
	if c := x.Carry; c != nil {
		u, ok := bucket.ParseAmount(c.Unused)
		if !ok {
			return fmt.Errorf("mysql: bucket %q: carry %q", b.key, c.Unused)
		}
		b.carry = ledger.Carry{Unused: u, Period: c.PeriodUS}
	}
	return nil
}

// extraJSON is the extra column: what few buckets have, amounts as exact
// decimal strings.
type extraJSON struct {
	Holds  []holdJSON     `json:"holds,omitempty"`
	Slots  []slotJSON     `json:"slots,omitempty"`
	Marks  *ledger.Marks  `json:"marks,omitempty"`
	Grants []ledger.Grant `json:"grants,omitempty"`
	Carry  *carryJSON     `json:"carry,omitempty"`
}

// carryJSON is a bucket's ledger.Carry: the capacity it left unused at the
// end of the period before (uncapped) and the start of the period it is
// received in.
type carryJSON struct {
	Unused   string `json:"u"`
	PeriodUS int64  `json:"p"`
}

type holdJSON struct {
	ID        string `json:"id"`
	Amount    string `json:"a"`
	ExpiresUS int64  `json:"x"`
}

type slotJSON struct {
	Index int64  `json:"i"`
	Sum   string `json:"s"`
}

// encodeState returns the columns of st with marks m, grants gs and the
// rollover carry c: level, updated_us and extra (NULL when there are no
// holds, slots, marks, grants or carry). A carry of nothing is not kept
// (memory.bucketRec.setCarry): ledger.CarryAt reads it as none.
func encodeState(st bucket.State, m ledger.Marks, gs []ledger.Grant, c ledger.Carry) (level string, updated int64, extra sql.NullString, err error) {
	level = st.Level.String()
	if !st.Updated.IsZero() {
		updated = st.Updated.UnixMicro()
	}
	if len(st.Holds) == 0 && len(st.Slots) == 0 && m == (ledger.Marks{}) && len(gs) == 0 && c.Unused.IsZero() {
		return level, updated, extra, nil
	}
	x := extraJSON{Grants: gs}
	if m != (ledger.Marks{}) {
		x.Marks = &m
	}
	if !c.Unused.IsZero() {
		x.Carry = &carryJSON{Unused: c.Unused.String(), PeriodUS: c.Period}
	}
	for _, h := range st.Holds {
		x.Holds = append(x.Holds, holdJSON{ID: h.ID, Amount: h.Amount.String(), ExpiresUS: h.ExpiresAt.UnixMicro()})
	}
	for _, sl := range st.Slots {
		x.Slots = append(x.Slots, slotJSON{Index: sl.Index, Sum: sl.Sum.String()})
	}
	b, err := json.Marshal(x)
	if err != nil {
		return "", 0, extra, err
	}
	return level, updated, sql.NullString{String: string(b), Valid: true}, nil
}
