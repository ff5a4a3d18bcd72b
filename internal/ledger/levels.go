package ledger

import (
	"context"
	"time"

	"github.com/budgetd/budgetd/internal/bucket"
	"github.com/shopspring/decimal"
)

// Bounds of a level series (GET …/buckets/{key}/levels).
const (
	DefaultLevelPoints = 200
	MaxLevelPoints     = 1000
	// MaxReplay is the most history entries a level series replays: the
	// newest ones. An older bucket's series is marked incomplete.
	MaxReplay = 10 * MaxPage
)

// LevelPoint is one point of a level series: the bucket's level and held
// amount at At. A point with an Event is the bucket just after that history
// event; the point before it, at the same instant, is the bucket just before,
// so that a line through the points in order draws each step.
type LevelPoint struct {
	At    time.Time
	Level bucket.Amount
	Held  bucket.Amount
	Event Event // "" for a sample, a period start or the instant a bucket leaks empty
}

// LevelSeries is a bucket's level over [From, To], replayed from its history
// with the rule of package bucket.
type LevelSeries struct {
	Points   []LevelPoint
	Capacity bucket.Amount
	From, To time.Time
	// PeriodStart and ResetsAt bound the period containing To, for a
	// periodic limit; zero otherwise.
	PeriodStart, ResetsAt time.Time
	// Complete reports whether the replay started from the bucket's first
	// history entry (or, for a periodic limit, from before the start of the
	// period containing From) and ends at the bucket's level now. It is
	// false for a limit that keeps no history (the series is then empty),
	// and when older entries were not read (more than MaxReplay) or were
	// pruned, or the rule changed: the replay then starts from the least
	// level that ends at the level now, and holds made before the oldest
	// entry read are not counted.
	Complete bool
}

// LevelQuery asks for a level series: from and to zero mean the oldest
// history entry replayed (an hour before to when there is none before to)
// and the store's now.
type LevelQuery struct {
	From, To time.Time
	Points   int
}

// Levels returns a bucket's level series: its history replayed, oldest
// first, with the rule of package bucket under the limit as it is now (a
// limit whose rule was changed is replayed under the new one). The series
// has a point before and after every event in the window, a point before
// and after every period start, the instant a leaky bucket leaks empty, and
// q.Points evenly spaced samples from From to To. It writes nothing.
func (s *Service) Levels(ctx context.Context, ref BucketRef, q LevelQuery) (LevelSeries, error) {
	if err := validateRef(ref); err != nil {
		return LevelSeries{}, err
	}
	if q.Points == 0 {
		q.Points = DefaultLevelPoints
	}
	if q.Points < 2 || q.Points > MaxLevelPoints {
		return LevelSeries{}, invalid(CodeInvalidRequest, "points", "must be a whole number from 2 to %d", MaxLevelPoints)
	}
	sn, err := s.store.Inspect(ctx, ref)
	if err != nil {
		return LevelSeries{}, err
	}
	if q.To.IsZero() {
		q.To = sn.Now
	}
	if q.To.After(sn.Now) {
		return LevelSeries{}, invalid(CodeInvalidRequest, "to", "must not be after now")
	}
	if !q.From.IsZero() && !q.From.Before(q.To) {
		return LevelSeries{}, invalid(CodeInvalidRequest, "from", "must be before to")
	}
	rule := sn.Limit.Rule()
	out := LevelSeries{Capacity: rule.Capacity, To: q.To, From: q.From}
	if rule.Period != nil {
		out.PeriodStart, out.ResetsAt = rule.Period.Bounds(q.To)
	}
	if !sn.Limit.History {
		if out.From.IsZero() {
			out.From = q.To.Add(-time.Hour)
		}
		out.Points = []LevelPoint{}
		return out, nil
	}
	// Read the history newest first, down to what the window needs.
	var since time.Time // entries before it cannot change the window (periodic)
	if rule.Period != nil && !q.From.IsZero() {
		since, _ = rule.Period.Bounds(q.From)
	}
	var entries []Entry
	cursor, complete := "", false
	for len(entries) < MaxReplay {
		page, next, err := s.store.History(ctx, ref, cursor, MaxPage)
		if err != nil {
			return LevelSeries{}, err
		}
		entries = append(entries, page...)
		if next == "" || (!since.IsZero() && len(page) > 0 && page[len(page)-1].Time.Before(since)) {
			complete = true
			break
		}
		cursor = next
	}
	out.Complete = complete
	for i, j := 0, len(entries)-1; i < j; i, j = i+1, j-1 {
		entries[i], entries[j] = entries[j], entries[i]
	}
	if out.From.IsZero() {
		out.From = q.To.Add(-time.Hour)
		if len(entries) > 0 && entries[0].Time.Before(q.To) {
			out.From = entries[0].Time
		}
	}
	var start bucket.Amount
	if len(entries) > 0 {
		// The replay must end where the bucket is. When it does not, older
		// entries were not read (the newest MaxReplay, or pruned) or the
		// rule changed: start from the least level that ends there.
		target := bucket.LevelAt(rule, sn.State, sn.Now)
		if replayEnd(rule, start, entries, sn.Now) != target {
			out.Complete = false
			start = startLevel(rule, entries, sn.Now, target)
		}
	}
	out.Points = Replay(rule, start, entries, out.From, out.To, q.Points)
	return out, nil
}

// replayEnd is the level at at of a bucket whose level was start just before
// entries[0] and that then saw entries.
func replayEnd(l bucket.Limit, start bucket.Amount, entries []Entry, at time.Time) bucket.Amount {
	return replayEndOf(l, start, entries, amountsOf(entries), at)
}

// replayEndOf is replayEnd with the entries' amounts converted once.
func replayEndOf(l bucket.Limit, start bucket.Amount, entries []Entry, amounts []bucket.Amount, at time.Time) bucket.Amount {
	r := replay{l: l, holds: map[string]bucket.Amount{}}
	r.begin(start, entries)
	for i, e := range entries {
		r.apply(e, amounts[i])
	}
	return bucket.LevelAt(l, r.s, at)
}

// startLevel is the least level before entries[0] (to LevelScale digits)
// from which the entries end at target at at, found by bisection; the
// replay's end grows with its start. It is zero when no start reaches
// target (a period start in between, say).
func startLevel(l bucket.Limit, entries []Entry, at time.Time, target bucket.Amount) bucket.Amount {
	amounts := amountsOf(entries)
	end := func(start bucket.Amount) bucket.Amount { return replayEndOf(l, start, entries, amounts, at) }
	hi := target.Decimal()
	for _, e := range entries {
		if e.Event == EventDrain {
			hi = hi.Add(e.Amount)
		}
	}
	if l.Period == nil {
		hi = hi.Add(bucket.Leaked(l, at.Sub(entries[0].Time)).Decimal())
	}
	hi = decimal.Min(hi, MaxLevel.Mul(decimal.NewFromInt(2)))
	if end(Amount(hi)).LessThan(target) {
		return bucket.Amount{}
	}
	lo, two := decimal.Zero, decimal.NewFromInt(2)
	unit := decimal.New(1, -bucket.LevelScale)
	for hi.Sub(lo).GreaterThan(unit) {
		mid := lo.Add(hi).Div(two).Truncate(bucket.LevelScale)
		if end(Amount(mid)).LessThan(target) {
			lo = mid
		} else {
			hi = mid
		}
	}
	if end(Amount(lo)).GreaterThanOrEqual(target) {
		return Amount(lo)
	}
	return Amount(hi)
}

// Replay is the level series of a bucket under rule l whose history,
// oldest first, is entries, and whose level just before entries[0] was
// start: see Service.Levels. It is pure.
//
// Each event does to the bucket what the store did: fillup, reserved,
// committed and released settle the level to their time (the leak rounded
// down from the last write, or the period's reset) and add their amount
// (a fillup's cost, a commit's charge); a drain settles and removes its
// amount; the holds of reserved entries count as held until their
// committed, released or expired entry.
func Replay(l bucket.Limit, start bucket.Amount, entries []Entry, from, to time.Time, points int) []LevelPoint {
	r := replay{l: l, holds: map[string]bucket.Amount{}, from: from, to: to}
	r.begin(start, entries)
	span := to.Sub(from)
	samples := make([]time.Time, points)
	for i := range samples {
		samples[i] = from.Add(time.Duration(int64(span) / int64(points-1) * int64(i))).Truncate(time.Microsecond)
	}
	samples[points-1] = to
	next := 0 // the next sample to emit
	for _, e := range entries {
		if e.Time.After(to) {
			break
		}
		if e.Event == EventGranted || e.Event == EventRevoked {
			continue // a change of capacity, not of the level
		}
		next = r.until(e.Time, samples, next)
		if !e.Time.Before(from) {
			r.emit(e.Time, "")
		}
		r.apply(e, Amount(e.Amount))
		if !e.Time.Before(from) {
			r.emit(e.Time, e.Event)
		}
	}
	r.until(to.Add(time.Microsecond), samples, next)
	return r.out
}

type replay struct {
	l        bucket.Limit
	s        bucket.State
	holds    map[string]bucket.Amount
	held     bucket.Amount
	from, to time.Time
	out      []LevelPoint
}

// begin sets the bucket to level start just before entries[0].
func (r *replay) begin(start bucket.Amount, entries []Entry) {
	if start.Sign() > 0 && len(entries) > 0 {
		r.s = bucket.State{Level: start, Updated: entries[0].Time}
	}
}

func (r *replay) emit(at time.Time, ev Event) {
	r.out = append(r.out, LevelPoint{At: at, Level: bucket.LevelAt(r.l, r.s, at), Held: r.held, Event: ev})
}

// until emits the points of the window strictly before t that the state
// as it is now draws: the samples, the period starts (level before and
// after) and the instant the level reaches zero. It returns the next
// sample.
func (r *replay) until(t time.Time, samples []time.Time, next int) int {
	type mark struct {
		at    time.Time
		reset bool
	}
	var marks []mark
	if r.s.Level.Sign() > 0 && !r.s.Updated.IsZero() {
		if r.l.Window != nil {
			// The level drops each time a slot stops counting.
			for _, end := range bucket.SlotEnds(r.l, r.s) {
				if end.Before(t) && !end.Before(r.from) && !end.After(r.to) {
					marks = append(marks, mark{end, true})
				}
			}
		} else if r.l.Period != nil {
			// The level drops to zero at the first period start after the
			// last write.
			_, end := r.l.Period.Bounds(r.s.Updated)
			if end.Before(t) && !end.Before(r.from) && !end.After(r.to) {
				marks = append(marks, mark{end, true})
			}
		} else if wait := bucket.LeakTime(r.l, r.s.Level).Duration(); wait > 0 && wait < time.Duration(1<<62) {
			if zero := r.s.Updated.Add(wait); zero.Before(t) && zero.After(r.from) && !zero.After(r.to) {
				marks = append(marks, mark{zero, false})
			}
		}
	}
	for next < len(samples) && samples[next].Before(t) {
		at := samples[next]
		next++
		same := false
		for len(marks) > 0 && !marks[0].at.After(at) {
			r.mark(marks[0].at, marks[0].reset)
			same = same || marks[0].at.Equal(at)
			marks = marks[1:]
		}
		if same {
			continue // the mark is this sample
		}
		r.emit(at, "")
	}
	for _, m := range marks {
		r.mark(m.at, m.reset)
	}
	return next
}

func (r *replay) mark(at time.Time, reset bool) {
	if reset {
		r.out = append(r.out, LevelPoint{At: at, Level: bucket.LevelAt(r.l, r.s, at.Add(-time.Microsecond)), Held: r.held})
	}
	r.emit(at, "")
}

// amountsOf converts the entries' amounts to the rule's once.
func amountsOf(entries []Entry) []bucket.Amount {
	out := make([]bucket.Amount, len(entries))
	for i, e := range entries {
		out[i] = Amount(e.Amount)
	}
	return out
}

// apply does to the bucket what entry e, of amount a, did.
func (r *replay) apply(e Entry, a bucket.Amount) {
	switch e.Event {
	case EventFillup:
		r.s = bucket.Charge(r.l, r.s, e.Time, a)
	case EventDrain:
		r.settle(e.Time)
		_, r.s = bucket.Drain(r.l, r.s, e.Time, a)
	case EventReserved:
		r.settle(e.Time)
		r.holds[e.ReservationID] = a
		r.held = r.held.Add(a)
	case EventCommitted:
		r.settle(e.Time)
		r.unhold(e.ReservationID)
		r.s = bucket.Charge(r.l, r.s, e.Time, a)
	case EventReleased:
		r.settle(e.Time)
		r.unhold(e.ReservationID)
	case EventExpired:
		r.unhold(e.ReservationID)
	}
}

// settle is what a writing transition does first: the level leaks (or
// resets) to at and the bucket counts as written at at.
func (r *replay) settle(at time.Time) {
	r.s, _ = bucket.Settle(r.l, r.s, at)
}

func (r *replay) unhold(id string) {
	if a, ok := r.holds[id]; ok {
		r.held = r.held.Sub(a)
		delete(r.holds, id)
	}
}
