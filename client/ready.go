package client

import (
	"context"
	"net/http"
)

// Ready asks budgetd whether it serves calls (GET /readyz): nil when it
// does; a *Error when it answers otherwise (503 store_unavailable while its
// store does not answer, after the client's retries); the transport's error
// when it cannot be reached.
func (c *Client) Ready(ctx context.Context) error {
	a, err := c.do(ctx, http.MethodGet, "/readyz", nil, nil, callOpts{})
	if err != nil {
		return err
	}
	if a.status != http.StatusOK {
		return problem(a)
	}
	return nil
}
