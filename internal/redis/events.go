package redis

import (
	"context"
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/budgetd/budgetd/internal/ledger"
	goredis "github.com/redis/go-redis/v9"
	"golang.org/x/sync/errgroup"
)

// Threshold events (docs/redis.md, "Threshold events"). A write that emits
// events appends them, in the same function call, to the outbox stream of
// its bucket's slot (P:ev:{<s>}); one bucket's events are in that stream in
// the order of its writes. Events reads the global log P:evlog:{P}, after
// first sealing into it what the outboxes hold beyond the sealed ids kept in
// P:evcur:{P}: one function call per batch of a slot appends the events to
// the log and moves the slot's sealed id, compare-and-set, so each event
// enters the log exactly once, also with several sealers (budgetd
// instances) or a crash between the steps.

// DefaultEventRetention is how long the global log keeps an event.
const DefaultEventRetention = ledger.EventRetention

// WithEventRetention sets how long events are kept (DefaultEventRetention),
// counted from when they are sealed into the global log.
func WithEventRetention(d time.Duration) Option { return func(s *Store) { s.eventRetention = d } }

const (
	// discoveryEvery is how often Events scans every master for outbox
	// streams that hold unsealed entries, to hint their slots in
	// P:evslots:{P}: at the first call of the process and then at most this
	// often, so a lost hint delays an event by about this long.
	discoveryEvery = 30 * time.Second
	// discoveryTimeout bounds one discovery.
	discoveryTimeout = time.Minute
	// sealBatch is the most outbox entries one seal call moves.
	sealBatch = 256
	// sealRounds bounds the seal calls of one slot in one Events call.
	sealRounds = 16
	// sealConcurrency bounds the slots sealed at once.
	sealConcurrency = 8
)

// eventFields are the fields of an outbox or log entry, in the order the
// seal function takes them (EV in budgetd.lua).
var eventFields = [...]string{"t", "at", "l", "k", "th", "u", "c", "ps"}

// hint records, best effort, that the outboxes of slots have events to
// seal. A lost hint (an error here, a crash before it) only delays the
// events until the next discovery.
func (s *Store) hint(ctx context.Context, slots ...int) {
	members := make([]any, len(slots))
	for i, sl := range slots {
		members[i] = sl
	}
	if err := s.client.SAdd(ctx, s.k.eventSlots(), members...).Err(); err != nil {
		s.log.Warn("redis: could not hint the event sealer; the events are found by the next discovery", "err", err)
	}
}

// Events lists up to n events after cursor (an id of the global log), after
// sealing what the outboxes hold.
func (s *Store) Events(ctx context.Context, cursor string, n int) ([]ledger.OutboxEvent, string, error) {
	if cursor != "" && !validEventID(cursor) {
		return nil, "", &ledger.InvalidError{Code: ledger.CodeInvalidRequest, Field: "after", Reason: "is not a cursor this store gave"}
	}
	ctx, cancel := context.WithTimeoutCause(ctx, s.callTimeout, errCallTimeout)
	defer cancel()
	if err := s.sealSome(ctx); err != nil {
		return nil, "", err
	}
	if n <= 0 {
		return nil, cursor, nil
	}
	msgs, err := s.client.XRangeN(ctx, s.k.eventLog(), after(cursor), "+", int64(n)).Result()
	if err != nil {
		return nil, "", s.fail(ctx, "events", err)
	}
	if len(msgs) == 0 {
		return nil, cursor, nil
	}
	out := make([]ledger.OutboxEvent, len(msgs))
	for i, m := range msgs {
		if out[i], err = parseEvent(m); err != nil {
			return nil, "", err
		}
	}
	return out, msgs[len(msgs)-1].ID, nil
}

// sealSome seals within half of ctx's time (the call's): what it did not
// reach stays for the next call (each seal step is complete on its own),
// and the caller reads the log in any case.
func (s *Store) sealSome(ctx context.Context) error {
	sctx, cancel := context.WithTimeout(ctx, s.callTimeout/2)
	defer cancel()
	if err := s.seal(sctx); err != nil && (ctx.Err() != nil || sctx.Err() == nil) {
		return err
	}
	return nil
}

// BucketEvents lists the newest events of a bucket, newest first, after
// sealing: the ids from the bucket's index (kept by the seal function), then
// the events from the log (an id the log no longer keeps is skipped).
func (s *Store) BucketEvents(ctx context.Context, ref ledger.BucketRef, n int) ([]ledger.OutboxEvent, error) {
	ctx, cancel := context.WithTimeoutCause(ctx, s.callTimeout, errCallTimeout)
	defer cancel()
	if err := s.sealSome(ctx); err != nil {
		return nil, err
	}
	if n <= 0 {
		return nil, nil
	}
	ids, err := s.client.LRange(ctx, s.k.bucketEvents(ref), 0, int64(n)-1).Result()
	if err != nil {
		return nil, s.fail(ctx, "bucket events", err)
	}
	if len(ids) == 0 {
		return nil, nil
	}
	p := s.client.Pipeline()
	reads := make([]*goredis.XMessageSliceCmd, len(ids))
	for i, id := range ids {
		reads[i] = p.XRange(ctx, s.k.eventLog(), id, id)
	}
	if _, err := p.Exec(ctx); err != nil {
		return nil, s.fail(ctx, "bucket events", err)
	}
	var out []ledger.OutboxEvent
	for _, r := range reads {
		for _, m := range r.Val() {
			ev, err := parseEvent(m)
			if err != nil {
				return nil, err
			}
			out = append(out, ev)
		}
	}
	return out, nil
}

// validEventID reports whether id is a stream id ms-seq that XRANGE takes
// as an exclusive start.
func validEventID(id string) bool {
	ms, seq, ok := strings.Cut(id, "-")
	_, err1 := strconv.ParseUint(ms, 10, 64)
	q, err2 := strconv.ParseUint(seq, 10, 64)
	return ok && err1 == nil && err2 == nil && q < math.MaxUint64 && !strings.HasPrefix(ms, "+") && !strings.HasPrefix(seq, "+")
}

// parseEvent reads an entry of the global log.
func parseEvent(m goredis.XMessage) (ledger.OutboxEvent, error) {
	f := func(k string) string { v, _ := m.Values[k].(string); return v }
	bad := func() (ledger.OutboxEvent, error) {
		return ledger.OutboxEvent{}, fmt.Errorf("redis: bad event %s: %v", m.ID, m.Values)
	}
	ev := ledger.OutboxEvent{ID: m.ID, Threshold: f("th")}
	switch f("t") {
	case "c":
		ev.Type = ledger.EventThresholdCrossed
	case "r":
		ev.Type = ledger.EventThresholdRecovered
	default:
		return bad()
	}
	var err error
	if ev.Time, err = parseMicros(f("at")); err != nil {
		return bad()
	}
	key, ok := decodeKey(f("k"))
	if !ok {
		return bad()
	}
	ev.Bucket = ledger.BucketRef{Limit: f("l"), Key: key}
	if ev.Used, err = fromUnits(f("u")); err != nil {
		return bad()
	}
	if ev.Capacity, err = fromUnits(f("c")); err != nil {
		return bad()
	}
	if ps := f("ps"); ps != "" {
		if ev.PeriodStart, err = parseMicros(ps); err != nil {
			return bad()
		}
	}
	return ev, nil
}

// discover starts, when it is due and none runs, a discovery: a SCAN of
// every master for outbox streams, hinting the slots whose outbox holds
// entries after its sealed id. It runs on its own (its time is not a
// call's: a large keyspace takes long to scan) and returns a channel closed
// when the discovery running, if any, ends.
func (s *Store) discover() <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.discovering != nil {
		return s.discovering
	}
	if !s.discovered.IsZero() && time.Since(s.discovered) < discoveryEvery {
		return nil
	}
	done := make(chan struct{})
	s.discovering, s.discovered = done, time.Now()
	go func() {
		defer close(done)
		ctx, cancel := context.WithTimeout(context.Background(), discoveryTimeout)
		defer cancel()
		err := s.discoverNow(ctx)
		s.mu.Lock()
		s.discovering = nil
		if err != nil {
			s.discovered = time.Time{} // again at the next call
		}
		s.mu.Unlock()
		if err != nil {
			s.log.Warn("redis: discovery of event outboxes failed; retried at the next events read", "err", err)
		}
	}()
	return done
}

// discoverNow hints every slot whose outbox holds entries after the slot's
// sealed id.
func (s *Store) discoverNow(ctx context.Context) error {
	var (
		mu    sync.Mutex // masters are scanned in parallel
		slots []int
	)
	err := s.scanKeys(ctx, s.k.prefix+":ev:*", func(_ context.Context, _ goredis.Cmdable, ks []string) error {
		mu.Lock()
		defer mu.Unlock()
		for _, k := range ks {
			slots = append(slots, slotOf(k))
		}
		return nil
	})
	if err != nil || len(slots) == 0 {
		return err
	}
	cur, err := s.client.HGetAll(ctx, s.k.eventCursor()).Result()
	if err != nil {
		return err
	}
	p := s.client.Pipeline()
	reads := make([]*goredis.XMessageSliceCmd, len(slots))
	for i, sl := range slots {
		reads[i] = p.XRangeN(ctx, s.k.outbox(sl), after(cur[strconv.Itoa(sl)]), "+", 1)
	}
	if _, err := p.Exec(ctx); err != nil {
		return err
	}
	var found []any
	for i, r := range reads {
		if len(r.Val()) > 0 {
			found = append(found, slots[i])
		}
	}
	if len(found) == 0 {
		return nil
	}
	return s.client.SAdd(ctx, s.k.eventSlots(), found...).Err()
}

// after is the exclusive XRANGE start after a stream id ("" for none).
func after(id string) string {
	if id == "" {
		return "-"
	}
	return "(" + id
}

// seal moves into the global log every outbox entry that is not in it yet,
// for the hinted slots, after waiting (within ctx) for a discovery that is
// due or running.
func (s *Store) seal(ctx context.Context) error {
	if done := s.discover(); done != nil {
		select {
		case <-done:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	members, err := s.client.SMembers(ctx, s.k.eventSlots()).Result()
	if err != nil {
		return s.fail(ctx, "events", err)
	}
	hinted := map[int]bool{}
	for _, m := range members {
		if sl, err := strconv.Atoi(m); err == nil && sl >= 0 && sl < 16384 {
			hinted[sl] = true
		}
	}
	if len(hinted) == 0 {
		return nil
	}
	list := make([]int, 0, len(hinted))
	for sl := range hinted {
		list = append(list, sl)
	}
	sort.Ints(list)
	cur, err := s.client.HGetAll(ctx, s.k.eventCursor()).Result()
	if err != nil {
		return s.fail(ctx, "events", err)
	}
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(sealConcurrency)
	for _, sl := range list {
		g.Go(func() error { return s.sealSlot(gctx, sl, cur[strconv.Itoa(sl)]) })
	}
	return g.Wait()
}

// sealSlot seals the outbox of a hinted slot after seen, the sealed id
// read. Once the outbox holds nothing more the slot loses its hint and is
// read once more: an event appended meanwhile is then either read here or
// hinted again (its writer hints after appending).
func (s *Store) sealSlot(ctx context.Context, slot int, seen string) error {
	ob, hinted := s.k.outbox(slot), true
	for range sealRounds {
		msgs, err := s.client.XRangeN(ctx, ob, after(seen), "+", sealBatch).Result()
		if err != nil {
			return s.fail(ctx, "events", err)
		}
		if len(msgs) == 0 {
			if !hinted {
				return nil
			}
			if err := s.client.SRem(ctx, s.k.eventSlots(), slot).Err(); err != nil {
				return s.fail(ctx, "events", err)
			}
			hinted = false
			continue
		}
		last := msgs[len(msgs)-1].ID
		args := make([]any, 0, 6+len(eventFields)*len(msgs))
		args = append(args, s.eventRetention.Milliseconds(), slot, seen, last, s.k.bucketEventsBase(), ledger.MaxBucketEvents)
		for _, m := range msgs {
			for _, f := range eventFields {
				v, _ := m.Values[f].(string)
				args = append(args, v)
			}
		}
		n, err := s.batch.do(ctx, &fcall{fn: fn("seal"), keys: []string{s.k.eventLog(), s.k.eventCursor()}, args: args}).Int64()
		if err != nil {
			return s.fail(ctx, "events", err)
		}
		if n == 0 {
			// Another sealer moved the slot on: continue from where it is.
			v, err := s.client.HGet(ctx, s.k.eventCursor(), strconv.Itoa(slot)).Result()
			if err != nil && err != goredis.Nil {
				return s.fail(ctx, "events", err)
			}
			seen = v
			continue
		}
		seen = last
		// The sealed entries are in the log: drop them from the outbox
		// (best effort; what stays is never sealed again).
		if err := s.client.XTrimMinID(ctx, ob, nextStreamID(last)).Err(); err != nil {
			s.log.Warn("redis: could not trim an event outbox", "err", err)
		}
	}
	if !hinted {
		// Rounds ran out with the hint dropped: hint again for the rest.
		s.hint(ctx, slot)
	}
	return nil
}

// nextStreamID is the smallest stream id after id (ms-seq).
func nextStreamID(id string) string {
	ms, seq, _ := strings.Cut(id, "-")
	q, _ := strconv.ParseUint(seq, 10, 64)
	if q == math.MaxUint64 {
		m, _ := strconv.ParseUint(ms, 10, 64)
		return strconv.FormatUint(m+1, 10) + "-0"
	}
	return ms + "-" + strconv.FormatUint(q+1, 10)
}
