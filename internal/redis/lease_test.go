package redis

import (
	"testing"

	"github.com/budgetd/budgetd/internal/ledger/ledgertest"
)

func TestLease(t *testing.T) {
	for _, env := range []string{"BUDGETD_TEST_REDIS", "BUDGETD_TEST_REDIS_CLUSTER"} {
		t.Run(env, func(t *testing.T) { ledgertest.Lease(t, openTest(t, serverURL(t, env))) })
	}
}
