package http

import (
	"strconv"

	"github.com/budgetd/budgetd/internal/quota"
	"github.com/labstack/echo/v4"
)

// headerInt writes a whole number for a header (already clamped).
func headerInt(n int64) string { return strconv.FormatInt(n, 10) }

// setRateLimit sets RateLimit-Policy and RateLimit on an answer
// (quota.AppendFields: one list member per limit of the call).
func setRateLimit(c echo.Context, qs ...quota.Quota) {
	// Both fields are written into one pooled buffer, policy then state,
	// and become one string and one two-element slice: two allocations.
	bp := bufPool.Get().(*[]byte)
	b, split := quota.AppendFields((*bp)[:0], qs...)
	both := string(b)
	*bp = b
	bufPool.Put(bp)
	vals := []string{both[:split], both[split:]}
	h := c.Response().Header()
	h["Ratelimit-Policy"] = vals[0:1:1]
	h["Ratelimit"] = vals[1:2:2]
}
