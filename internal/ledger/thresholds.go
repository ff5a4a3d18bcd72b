package ledger

import (
	"hash/fnv"
	"strconv"
	"strings"
	"time"

	"github.com/budgetd/budgetd/internal/bucket"
	"github.com/shopspring/decimal"
)

// Threshold is a point on a bucket's use that emits an event when a write
// reaches it: a share of the effective capacity (Percent, 80 for "80%") or
// an amount (Amount). Exactly one of the two is non-zero.
type Threshold struct {
	Percent decimal.Decimal
	Amount  decimal.Decimal
}

// Bounds of thresholds.
const (
	// MaxThresholds is the most thresholds a limit may list.
	MaxThresholds = 8
)

// MaxThresholdPercent is the largest percentage threshold: 200%.
var MaxThresholdPercent = decimal.NewFromInt(200)

// String writes t as a limit document has it: "80%" or "4500".
func (t Threshold) String() string {
	if !t.Percent.IsZero() {
		return t.Percent.String() + "%"
	}
	return t.Amount.String()
}

// Level is the use at which t is reached in a bucket of the given
// effective capacity: capacity × Percent / 100, or Amount. It is exact: a
// capacity has at most 6 fractional digits and a percentage 2.
func (t Threshold) Level(capacity decimal.Decimal) decimal.Decimal {
	if !t.Percent.IsZero() {
		return capacity.Mul(t.Percent).Shift(-2)
	}
	return t.Amount
}

// ParseThreshold reads "80%" (a percentage, above 0 and at most 200, at
// most 2 decimals) or "4500.00" (an amount, above 0, as amounts are), or
// returns an error naming field.
func ParseThreshold(field, s string) (Threshold, error) {
	if strings.HasSuffix(s, "%") {
		p, ok := parsePercent(s)
		if !ok || p.Sign() <= 0 || p.GreaterThan(MaxThresholdPercent) {
			return Threshold{}, invalid(CodeInvalidRequest, field, "%q is not a percentage above 0%% and at most 200%% with at most 2 decimals", clip(s))
		}
		return Threshold{Percent: p}, nil
	}
	a, err := ParseAmount(field, s)
	if err != nil {
		return Threshold{}, invalid(CodeInvalidRequest, field, "%q is neither a percentage like \"80%%\" nor an amount like \"4500.00\"", clip(s))
	}
	if a.Sign() <= 0 {
		return Threshold{}, invalid(CodeInvalidRequest, field, "a threshold is above 0")
	}
	return Threshold{Amount: a}, nil
}

// ValidateThresholds refuses more than MaxThresholds, a threshold out of
// range and two thresholds that are the same ("80%" twice, or "80" and
// "80.00"), naming the field thresholds[i].
func ValidateThresholds(ts []Threshold) error {
	if len(ts) > MaxThresholds {
		return invalid(CodeInvalidRequest, "thresholds", "a limit has at most %d thresholds, not %d", MaxThresholds, len(ts))
	}
	for i, t := range ts {
		field := "thresholds[" + strconv.Itoa(i) + "]"
		if _, err := ParseThreshold(field, t.String()); err != nil || (t.Percent.IsZero() == t.Amount.IsZero()) {
			return invalid(CodeInvalidRequest, field, "a threshold is a percentage above 0%% and at most 200%% or an amount above 0")
		}
		for _, u := range ts[:i] {
			if u.Percent.Equal(t.Percent) && u.Amount.Equal(t.Amount) {
				return invalid(CodeInvalidRequest, field, "%s is listed twice", t)
			}
		}
	}
	return nil
}

// ThresholdSig is a digest of a list of thresholds, 0 for none: what a
// bucket's Marks were computed for.
func ThresholdSig(ts []Threshold) uint32 {
	if len(ts) == 0 {
		return 0
	}
	h := fnv.New32a()
	for _, t := range ts {
		h.Write([]byte(t.String()))
		h.Write([]byte{','})
	}
	return h.Sum32() | 1
}

// Marks is what a bucket keeps of its thresholds: bit i of Above says that
// threshold i of the list whose ThresholdSig is Sig is reached, and Period
// is the start (Unix microseconds) of the calendar period the marks belong
// to (0 for a limit that is not periodic).
type Marks struct {
	Sig    uint32
	Above  uint8
	Period int64
}

// Crossing is one threshold event a write caused: threshold Index of the
// limit was reached (Crossed) or left.
type Crossing struct {
	Index   int
	Crossed bool
}

// Cross is the rule of threshold events. A write took a bucket of limit l
// from use before (level + held at now, before the write) to use after;
// marks are what the bucket kept. It returns the marks to keep and the
// events to emit, in the order of the thresholds:
//   - marks kept for another list of thresholds (a PUT changed them) are
//     first recomputed from before, without events;
//   - on a periodic limit, marks of an earlier period re-arm (all clear),
//     without events;
//   - then every threshold that after reaches and was not marked is
//     crossed, and every marked one that after no longer reaches is left.
//
// periodStart is the start of the period that contains now (zero for
// another kind); capacity is the bucket's effective capacity.
func Cross(l Limit, marks Marks, before, after decimal.Decimal, capacity decimal.Decimal, periodStart time.Time) (Marks, []Crossing) {
	sig := ThresholdSig(l.Thresholds)
	if sig == 0 {
		return Marks{}, nil
	}
	reaches := func(i int, use decimal.Decimal) bool { return use.GreaterThanOrEqual(l.Thresholds[i].Level(capacity)) }
	return crossMarks(sig, len(l.Thresholds), marks, periodStart,
		func(i int) bool { return reaches(i, before) }, func(i int) bool { return reaches(i, after) })
}

// crossMarks is the rule of Cross over n thresholds whose list has
// signature sig, given whether the use before and after the write reaches
// threshold i.
func crossMarks(sig uint32, n int, marks Marks, periodStart time.Time, before, after func(i int) bool) (Marks, []Crossing) {
	var period int64
	if !periodStart.IsZero() {
		period = periodStart.UnixMicro()
	}
	switch {
	case marks.Sig != sig:
		// Marks of another list (or none): what the use before reaches is
		// marked, without events, in whatever period they were kept.
		marks = Marks{Sig: sig, Period: period}
		for i := range n {
			if before(i) {
				marks.Above |= 1 << i
			}
		}
	case marks.Period != period:
		// Marks of an earlier period re-arm.
		marks = Marks{Sig: sig, Period: period}
	}
	var out []Crossing
	for i := range n {
		reached, was := after(i), marks.Above&(1<<i) != 0
		switch {
		case reached && !was:
			marks.Above |= 1 << i
			out = append(out, Crossing{Index: i, Crossed: true})
		case !reached && was:
			marks.Above &^= 1 << i
			out = append(out, Crossing{Index: i})
		}
	}
	return marks, out
}

// UsedAt is level + held of a bucket's state at now, as decisions count it.
func UsedAt(l Limit, s bucket.State, now time.Time) decimal.Decimal {
	d := bucket.CanAccept(l.Rule(), s, now, bucket.Amount{})
	return d.Level.Add(d.Held).Decimal()
}

// The types of events (api.EventThresholdCrossed and
// api.EventThresholdRecovered are their copies on the wire).
const (
	// EventThresholdCrossed: a write took a bucket's use (level + held) to
	// a threshold it had not reached.
	EventThresholdCrossed = "threshold.crossed"
	// EventThresholdRecovered: a write found a bucket's use below a
	// threshold it had reached.
	EventThresholdRecovered = "threshold.recovered"
)

// OutboxEvent is an event a write emitted, kept by the store in the same
// atomic step as the write: its store-assigned ID, Type, the store's Time
// of the write, the bucket, the Threshold as the limit lists it, the bucket's
// Used (level + held) after the write and its effective Capacity, and the
// start of the period for a periodic limit (zero otherwise).
type OutboxEvent struct {
	ID          string
	Type        string
	Time        time.Time
	Bucket      BucketRef
	Threshold   string
	Used        decimal.Decimal
	Capacity    decimal.Decimal
	PeriodStart time.Time
}

// NewEvents turns the crossings of one write into events (IDs left for the
// store to assign).
func NewEvents(l Limit, ref BucketRef, cs []Crossing, now time.Time, used, capacity decimal.Decimal, periodStart time.Time) []OutboxEvent {
	out := make([]OutboxEvent, len(cs))
	for i, c := range cs {
		typ := EventThresholdRecovered
		if c.Crossed {
			typ = EventThresholdCrossed
		}
		out[i] = OutboxEvent{Type: typ, Time: now, Bucket: ref, Threshold: l.Thresholds[c.Index].String(), Used: used, Capacity: capacity, PeriodStart: periodStart}
	}
	return out
}
