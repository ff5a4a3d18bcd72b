package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	commonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/shopspring/decimal"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/budgetd/budgetd/internal/ledger"
)

// The Envoy rate-limit service under a store's kill -9 (issue 46; SPEC
// "Behind Envoy"). A budgetd of its own, started with --grpc-addr and a
// limits file whose envoy member maps the domain "chaos", takes
// ShouldRateLimit calls from many clients, each call two descriptors
// charged together: the client's own user bucket (limit chaos-grpc-user,
// with history) and the one team bucket they share (chaos-grpc-team).
// While the store is killed with SIGKILL and restarted, p.faults times, a
// call must be OK, OVER_LIMIT or UNAVAILABLE and nothing else, and after
// each restart calls must be OK again (the next fault waits for that).
// Then the clients charge larger costs until the team's bucket denies
// them, and the audit reads every bucket:
//
//   - each user's history, in id order, is its client's calls: every OK
//     answer's charge once and in order (nothing acknowledged lost, never
//     an OK for a charge that was not made), nothing that was OVER_LIMIT,
//     and each UNAVAILABLE answer's charge at most once. The protocol has
//     no idempotency key for a retry to settle a call with: a call whose
//     store reply died with the store (committed, then killed) is
//     UNAVAILABLE yet charged, as SPEC and docs/envoy.md say; the history
//     tells which, and the row counts them;
//   - each user's level is its history's sum, and the team's level is the
//     sum over the users: every call charged both buckets or neither (all
//     or nothing);
//   - no over-admission: the OK answers' costs add up to at most each
//     bucket's capacity, and no level is above it.
//
// A client's successive calls cost different amounts (its k-th call in
// the fault phase 1 + k mod 100), so that an UNAVAILABLE call cannot be
// mistaken for a neighbour in the history. On the memory store (no store
// process to kill) the same load and audit run without faults.

// grpcDomain is the domain the scenario's calls name.
const grpcDomain = "chaos"

// grpcLimitsFile is the limits file of the scenario's budgetd: only the
// envoy mapping (the scenario creates the limits over HTTP, as the others
// do).
const grpcLimitsFile = `envoy:
  - domain: chaos
    descriptors:
      - entries: [{key: user}]
        limit: chaos-grpc-user
        bucket: "{user}"
      - entries: [{key: team}]
        limit: chaos-grpc-team
        bucket: "{team}"
`

// The scenario's limits and costs: the team's capacity is far above what
// the fault phase charges (costs of 1 to 100) and is then filled with
// costs of fillMin to fillMax; a user's is a quarter of it, so that the
// team's bucket is the one that fills.
const (
	grpcClients = 64
	grpcTeamCap = 100_000_000
	grpcUserCap = grpcTeamCap / 4
	fillMin     = 10_000
	fillMax     = 100_000
)

// grpcSent is one call of a client that may have charged: OK, or with no
// definite answer (UNAVAILABLE, or any other failure).
type grpcSent struct {
	cost int64
	ok   bool
}

// grpcBooks is what the clients of the gRPC scenario were told.
type grpcBooks struct {
	sent        [][]grpcSent // per client, in order; each written by its client only
	okCalls     atomic.Int64
	over        atomic.Int64
	unavailable atomic.Int64
	other       atomic.Int64

	mu        sync.Mutex
	otherSeen []string    // the first few answers that were neither
	restarted []time.Time // when each fault's restart returned
	firstOK   []time.Time // the first OK of a call sent after it
}

func (bk *grpcBooks) noteOther(s string) {
	bk.other.Add(1)
	bk.mu.Lock()
	defer bk.mu.Unlock()
	if len(bk.otherSeen) < 5 {
		bk.otherSeen = append(bk.otherSeen, s)
	}
}

// okAt books an OK answer of a call sent at sent: the first one sent after
// the latest restart times that restart.
func (bk *grpcBooks) okAt(sent time.Time) {
	bk.mu.Lock()
	defer bk.mu.Unlock()
	if n := len(bk.restarted); n > 0 && bk.firstOK[n-1].IsZero() && sent.After(bk.restarted[n-1]) {
		bk.firstOK[n-1] = time.Now()
	}
}

// grpcRun starts a budgetd with --grpc-addr on the store at url and runs
// the scenario; st nil (memory) runs it without faults.
func grpcRun(ctx context.Context, bin, url, tmp string, st store, name string, p params) (row result, err error) {
	row.name = "gRPC: kill -9 " + name + " under load"
	if st == nil {
		row.name = "gRPC: ShouldRateLimit under load"
	}
	file := filepath.Join(tmp, "grpc-limits.yaml")
	if err := os.WriteFile(file, []byte(grpcLimitsFile), 0o644); err != nil {
		return row, err
	}
	port, err := freePort()
	if err != nil {
		return row, err
	}
	gport, err := freePort()
	if err != nil {
		return row, err
	}
	gaddr := fmt.Sprintf("127.0.0.1:%d", gport)
	b := &budgetd{bin: bin, storeURL: url, port: port, extraArgs: []string{"--grpc-addr", gaddr, "--limits-file", file}}
	if name == "mysql" && p.mysqlCache != "" {
		b.extraArgs = append(b.extraArgs, "--mysql-cache", p.mysqlCache)
	}
	if err := b.Start(ctx); err != nil {
		return row, err
	}
	defer b.Kill()
	a := newAPI(b.base(), 8)
	conn, err := grpc.NewClient(gaddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return row, err
	}
	defer conn.Close()
	faults, d := p.faults, p.faultDur
	var fault func(context.Context) error
	if st != nil {
		fault = faultKillStore(st)
	} else {
		faults, d = 0, min(d, 10*time.Second)
	}
	return grpcFaultRun(ctx, a, rlsv3.NewRateLimitServiceClient(conn), row, d, faults, fault)
}

// grpcFaultRun is the load, the faults and the audit (see above).
func grpcFaultRun(ctx context.Context, a *api, c rlsv3.RateLimitServiceClient, row result, d time.Duration, faults int, fault func(context.Context) error) (result, error) {
	if err := a.putLimit(ctx, "chaos-grpc-team", fmt.Sprint(grpcTeamCap), false); err != nil {
		return row, err
	}
	if err := a.putLimit(ctx, "chaos-grpc-user", fmt.Sprint(grpcUserCap), true); err != nil {
		return row, err
	}
	bk := &grpcBooks{sent: make([][]grpcSent, grpcClients)}
	var filling atomic.Bool
	// The fill phase ends when every client has been denied (or after 2
	// minutes, a failure).
	fillCtx, stopFill := context.WithCancel(ctx)
	defer stopFill()
	var wg sync.WaitGroup
	for i := range grpcClients {
		wg.Go(func() { grpcClient(fillCtx, c, bk, i, &filling) })
	}
	start := time.Now()
	every := d / time.Duration(faults+1)
	for f := range faults {
		select {
		case <-ctx.Done():
			stopFill()
			wg.Wait()
			return row, ctx.Err()
		case <-time.After(time.Until(start.Add(every * time.Duration(f+1)))):
		}
		if err := fault(ctx); err != nil {
			stopFill()
			wg.Wait()
			return row, fmt.Errorf("fault %d: %w", f+1, err)
		}
		bk.mu.Lock()
		bk.restarted = append(bk.restarted, time.Now())
		bk.firstOK = append(bk.firstOK, time.Time{})
		bk.mu.Unlock()
		row.faults++
		// The next fault waits for calls to be OK again: a store's
		// recovery may take most of the interval.
		_ = waitUntil(ctx, time.Minute, "an OK call after the restart", func() bool {
			bk.mu.Lock()
			defer bk.mu.Unlock()
			return !bk.firstOK[f].IsZero()
		})
	}
	time.Sleep(time.Until(start.Add(d)))
	filling.Store(true)
	fillDone := make(chan struct{})
	go func() { wg.Wait(); close(fillDone) }()
	select {
	case <-fillDone:
	case <-time.After(2 * time.Minute):
		stopFill()
		<-fillDone
		row.fail("the team's bucket was not filled within 2m of the fault phase")
	}
	row.calls = bk.okCalls.Load() + bk.over.Load() + bk.unavailable.Load() + bk.other.Load()
	return grpcAudit(ctx, a, bk, row)
}

// grpcClient is client i: it charges its user and the team until ctx ends
// or, once filling, until it is denied.
func grpcClient(ctx context.Context, c rlsv3.RateLimitServiceClient, bk *grpcBooks, i int, filling *atomic.Bool) {
	rng := rand.New(rand.NewPCG(uint64(i), 46))
	wait := 20 * time.Millisecond
	for k := int64(0); ctx.Err() == nil; k++ {
		fill := filling.Load()
		cost := 1 + k%100
		if fill {
			cost = fillMin + rng.Int64N(fillMax-fillMin)
		}
		code := grpcCall(ctx, c, bk, i, cost)
		switch code {
		case codes.OK:
			wait = 20 * time.Millisecond
		case codes.ResourceExhausted: // OVER_LIMIT: nothing charged
			if fill {
				return
			}
			continue
		case codes.Unavailable:
			// The store is down: back off as a gateway's retry would.
			time.Sleep(wait)
			wait = min(2*wait, 500*time.Millisecond)
		}
		bk.sent[i] = append(bk.sent[i], grpcSent{cost: cost, ok: code == codes.OK})
		if code != codes.OK && code != codes.Unavailable && bk.other.Load() > 100 {
			return
		}
	}
}

// grpcCall sends one call of cost for client i's user and books its
// answer; the code is OK, ResourceExhausted for OVER_LIMIT, or the call's
// error's.
func grpcCall(ctx context.Context, c rlsv3.RateLimitServiceClient, bk *grpcBooks, i int, cost int64) codes.Code {
	cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	sent := time.Now()
	resp, err := c.ShouldRateLimit(cctx, &rlsv3.RateLimitRequest{
		Domain: grpcDomain,
		Descriptors: []*commonv3.RateLimitDescriptor{
			{Entries: []*commonv3.RateLimitDescriptor_Entry{{Key: "user", Value: userKey(i)}}},
			{Entries: []*commonv3.RateLimitDescriptor_Entry{{Key: "team", Value: "team"}}},
		},
		HitsAddend: uint32(cost),
	})
	code := status.Code(err)
	switch {
	case err == nil && resp.GetOverallCode() == rlsv3.RateLimitResponse_OK:
		bk.okCalls.Add(1)
		bk.okAt(sent)
	case err == nil && resp.GetOverallCode() == rlsv3.RateLimitResponse_OVER_LIMIT:
		bk.over.Add(1)
		code = codes.ResourceExhausted
	case err == nil:
		bk.noteOther("overall_code " + resp.GetOverallCode().String())
		code = codes.Unknown
	case code == codes.Unavailable:
		bk.unavailable.Add(1)
	case ctx.Err() != nil:
		// The fill phase was stopped: the call's fate is unknown.
	default:
		bk.noteOther(err.Error())
	}
	return code
}

func userKey(i int) string { return fmt.Sprintf("u%02d", i) }

// grpcAudit compares every bucket with the answers (see above).
func grpcAudit(ctx context.Context, a *api, bk *grpcBooks, row result) (result, error) {
	// The limits leak 1 per 87600h: a few millionths over a run.
	slack := decimal.New(1, -3)
	var okSum, unknownCharged, chargedCalls int64
	charged := decimal.Zero // what the users' histories hold
	for i := range grpcClients {
		h, err := a.history(ctx, "chaos-grpc-user", userKey(i))
		if err != nil {
			return row, err
		}
		if len(h) >= ledger.HistoryPerBucket {
			// Older entries may have been trimmed: the match would call them lost.
			row.fail("user %s: %d history entries, budgetd keeps at most %d: the run is too long for its audit", userKey(i), len(h), ledger.HistoryPerBucket)
			continue
		}
		amounts, err := fillupAmounts(h)
		if err != nil {
			row.fail("user %s: %v", userKey(i), err)
			continue
		}
		m := matchHistory(bk.sent[i], amounts)
		okSum += m.ok
		unknownCharged += m.unknownCharged
		chargedCalls += m.chargedCalls
		if m.lost > 0 {
			row.lost += m.lost
			row.fail("user %s: %d OK answers' charges are not in its history (%s)", userKey(i), m.lost, m.first)
		}
		if m.phantom > 0 {
			row.phantom += m.phantom
			row.fail("user %s: %d history entries are no call's that may have charged (%s)", userKey(i), m.phantom, m.first)
		}
		if m.ok > grpcUserCap {
			row.overAdmitted += m.ok - grpcUserCap
			row.fail("user %s: OK answers charged %d against a capacity of %d", userKey(i), m.ok, grpcUserCap)
		}
		sum := decimal.NewFromInt(m.ok + m.unknownCharged)
		charged = charged.Add(sum)
		st, err := a.bucket(ctx, "chaos-grpc-user", userKey(i))
		if err != nil {
			return row, err
		}
		if st.Level.Sub(sum).Abs().GreaterThan(slack) {
			row.fail("user %s: level %s, its history holds %s", userKey(i), st.Level, sum)
		}
	}
	team, err := a.bucket(ctx, "chaos-grpc-team", "team")
	if err != nil {
		return row, err
	}
	if team.Level.Sub(charged).Abs().GreaterThan(slack.Mul(decimal.NewFromInt(grpcClients))) {
		row.fail("not all or nothing: the team's level is %s, the users' charges add up to %s", team.Level, charged)
	}
	if okSum > grpcTeamCap || team.Level.GreaterThan(decimal.NewFromInt(grpcTeamCap)) {
		row.overAdmitted += max(okSum-grpcTeamCap, 0)
		row.fail("team: OK answers charged %d and the level is %s, against a capacity of %d", okSum, team.Level, grpcTeamCap)
	}

	bk.mu.Lock()
	defer bk.mu.Unlock()
	var slowest time.Duration
	for i, at := range bk.restarted {
		if bk.firstOK[i].IsZero() {
			row.fail("no call was OK within 1m of restart %d", i+1)
			continue
		}
		slowest = max(slowest, bk.firstOK[i].Sub(at))
	}
	if n := bk.other.Load(); n > 0 {
		row.fail("%d answers were neither a decision nor UNAVAILABLE, first: %v", n, bk.otherSeen)
	}
	if row.faults > 0 && bk.unavailable.Load() == 0 {
		row.fail("no call was UNAVAILABLE while the store was down")
	}
	row.note = fmt.Sprintf("%d clients, 2 descriptors a call; %d OK, %d OVER_LIMIT, %d UNAVAILABLE, of which history shows %d charged all the same (cost %d); team filled to %s/%d",
		grpcClients, bk.okCalls.Load(), bk.over.Load(), bk.unavailable.Load(), chargedCalls, unknownCharged, team.Level.Round(0), grpcTeamCap)
	if row.faults > 0 {
		row.note += fmt.Sprintf("; first OK at most %s after a restart", slowest.Round(time.Millisecond))
	}
	return row, nil
}

// fillupAmounts is a history's fillup amounts in id order: the only
// entries a user's bucket may have (denials are not recorded).
func fillupAmounts(h []historyEntry) ([]int64, error) {
	type entry struct{ id, amount int64 }
	es := make([]entry, 0, len(h))
	for _, e := range h {
		id, err := strconv.ParseInt(e.ID, 10, 64)
		if err != nil {
			return nil, fmt.Errorf("entry %q: not a numeric id", e.ID)
		}
		if e.Event != "fillup" || !e.Amount.IsInteger() {
			return nil, fmt.Errorf("entry %s: %s of %s, not a fillup of a whole cost", e.ID, e.Event, e.Amount)
		}
		es = append(es, entry{id, e.Amount.IntPart()})
	}
	slices.SortFunc(es, func(x, y entry) int { return int(x.id - y.id) })
	out := make([]int64, len(es))
	for i, e := range es {
		out[i] = e.amount
	}
	return out, nil
}

// historyMatch is how a client's calls and its user's history agree.
type historyMatch struct {
	ok                           int64 // the OK answers' costs
	unknownCalls                 int64 // calls without a definite answer
	chargedCalls, unknownCharged int64 // those of them the history holds, and their cost
	lost, phantom                int64 // OK answers not in the history; entries no call made
	first                        string
}

// matchHistory walks a client's calls and its bucket's entries in order:
// an OK call must be the next entry, a call without a definite answer is
// the next entry when that has its cost (successive calls never cost the
// same), and entries left over were made by no call.
func matchHistory(sent []grpcSent, amounts []int64) historyMatch {
	var m historyMatch
	j := 0
	for k, s := range sent {
		hit := j < len(amounts) && amounts[j] == s.cost
		switch {
		case s.ok:
			m.ok += s.cost
			if hit {
				j++
			} else {
				m.lost++
				if m.first == "" {
					m.first = fmt.Sprintf("call %d, cost %d", k, s.cost)
				}
			}
		default:
			m.unknownCalls++
			if hit {
				m.unknownCharged += s.cost
				m.chargedCalls++
				j++
			}
		}
	}
	if j < len(amounts) {
		m.phantom = int64(len(amounts) - j)
		if m.first == "" {
			m.first = fmt.Sprintf("entry %d of %d, amount %d", j+1, len(amounts), amounts[j])
		}
	}
	return m
}
