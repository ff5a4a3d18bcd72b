package main

import "testing"

// TestMatchHistory: the gRPC scenario's audit finds an OK answer whose
// charge is missing, an entry no call made (a charge doubled), and tells
// which calls without a definite answer were charged.
func TestMatchHistory(t *testing.T) {
	ok := func(c int64) grpcSent { return grpcSent{cost: c, ok: true} }
	unk := func(c int64) grpcSent { return grpcSent{cost: c} }
	for _, tc := range []struct {
		name                  string
		sent                  []grpcSent
		amounts               []int64
		lost, phantom         int64
		charged, chargedCalls int64
	}{
		{"every OK once", []grpcSent{ok(1), ok(2), ok(3)}, []int64{1, 2, 3}, 0, 0, 0, 0},
		{"UNAVAILABLE charged and not", []grpcSent{ok(1), unk(2), unk(3), ok(4)}, []int64{1, 3, 4}, 0, 0, 3, 1},
		{"an OK not charged", []grpcSent{ok(1), ok(2), ok(3)}, []int64{1, 3}, 1, 0, 0, 0},
		{"a charge doubled", []grpcSent{ok(1), ok(2)}, []int64{1, 2, 2}, 0, 1, 0, 0},
		{"an OVER_LIMIT charged", []grpcSent{ok(1), ok(3)}, []int64{1, 2, 3}, 1, 2, 0, 0},
	} {
		m := matchHistory(tc.sent, tc.amounts)
		if m.lost != tc.lost || m.phantom != tc.phantom || m.unknownCharged != tc.charged || m.chargedCalls != tc.chargedCalls {
			t.Errorf("%s: lost %d phantom %d charged %d in %d calls, want %d %d %d %d", tc.name,
				m.lost, m.phantom, m.unknownCharged, m.chargedCalls, tc.lost, tc.phantom, tc.charged, tc.chargedCalls)
		}
	}
}
