package redis

import "github.com/budgetd/budgetd/internal/ledger"

// Rollover is decided in the bucket's own function (carry in budgetd.lua):
// the limit's max and capacity travel with its other arguments
// (rolloverArg), the bucket keeps its carry in its hash (field r), and the
// function answers the carry beside the level (snapJSON.snapshot), so a
// decision stays one function call on one hash slot, in Redis Cluster too.
// A written bucket of a limit with rollover above zero has no TTL: it
// passes rollover on into every next period (ledger.Limit.PassesOn).

var _ ledger.RolloverStore = (*Store)(nil)

// ServesRollover marks the Redis store as a ledger.RolloverStore.
func (s *Store) ServesRollover() {}
