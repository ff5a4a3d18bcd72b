package main

import (
	"context"
	"fmt"

	"github.com/budgetd/budgetd/client"
)

// healthCmd runs budgetd health: it asks the server whether it serves calls
// and exits 0 when it does (printing "ready" unless -q), 4 when it does not
// or cannot be reached. It is the container image's health check, which
// has no shell or curl to call.
func (c *cli) healthCmd(ctx context.Context, cl *client.Client) error {
	if err := c.want("health", 0, 0); err != nil {
		return err
	}
	if err := cl.Ready(ctx); err != nil {
		return err
	}
	if !c.quiet {
		fmt.Fprintln(c.stdout, "ready")
	}
	return nil
}
