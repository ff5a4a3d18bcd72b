package client_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/budgetd/budgetd/api"
	"github.com/budgetd/budgetd/client"
	"github.com/shopspring/decimal"
)

// A batch import asks first how many rows tenant t42 may insert now, then
// charges what fits and says when the rest can follow.
func Example_rowCountPreCheck() {
	srv, _ := startBudgetd()
	defer srv.Close()
	ctx := context.Background()
	c, _ := client.New(srv.URL)
	c.PutLimit(ctx, "tenant-rows", client.LimitSpec{Capacity: dec("100000"), Leak: &client.Leak{Amount: dec("100000"), Per: time.Hour}})
	c.Fillup(ctx, "tenant-rows", "t42", dec("90000")) // earlier imports this hour

	batch := dec("25000")
	d, err := c.CanAccept(ctx, "tenant-rows", "t42", batch)
	if err != nil {
		fmt.Println("budgetd:", err)
		return
	}
	if d.Accepted {
		c.Fillup(ctx, "tenant-rows", "t42", batch)
		fmt.Println("inserting all", batch, "rows")
		return
	}
	now := d.Remaining.Floor() // split the batch: what fits now goes now
	if f, _ := c.Fillup(ctx, "tenant-rows", "t42", now); f.Accepted {
		fmt.Println("inserting", now, "rows now")
	}
	rest := batch.Sub(now)
	later, _ := c.CanAccept(ctx, "tenant-rows", "t42", rest)
	fmt.Println("the other", rest, "rows fit in", later.RetryAfterDuration())
	// Output:
	// inserting 10000 rows now
	// the other 15000 rows fit in 9m0s
}

// A team may spend 5,000.00 per calendar month, Berlin time, to the cent. A
// spend that does not fit is denied (a value, not an error) and nothing is
// charged; the budget starts again at midnight of the 1st in Berlin.
func Example_spendCap() {
	srv, _ := startBudgetd()
	defer srv.Close()
	ctx := context.Background()
	c, _ := client.New(srv.URL)
	c.PutLimit(ctx, "team-spend", client.LimitSpec{Capacity: dec("5000.00"), Period: &client.Period{Every: api.Month, TZ: "Europe/Berlin"}})

	berlin, _ := time.LoadLocation("Europe/Berlin")
	for _, spend := range []string{"4999.99", "0.02", "0.01"} {
		d, err := c.Fillup(ctx, "team-spend", "team-a", dec(spend))
		switch {
		case err != nil:
			fmt.Println("budgetd:", err)
		case d.Accepted:
			fmt.Println("spent", spend, "- remaining", d.Remaining)
		default:
			fmt.Println("denied", spend, "- remaining", d.Remaining, "- the budget resets", d.ResetsAt.In(berlin).Format("2 Jan 15:04 MST"))
		}
	}
	// The client refuses amounts it cannot send exactly.
	_, err := c.Fillup(ctx, "team-spend", "team-a", dec("0.0000001"))
	var problem *client.Error
	if errors.As(err, &problem) {
		fmt.Println("refused:", problem.Code, problem.Field)
	}
	// Output:
	// spent 4999.99 - remaining 0.01
	// denied 0.02 - remaining 0.01 - the budget resets 1 Feb 00:00 CET
	// spent 0.01 - remaining 0
	// refused: invalid_amount cost
}

// A long job holds its estimated cost first, then commits what it actually
// cost, or releases the hold when it fails.
func Example_reserveThenCommit() {
	srv, _ := startBudgetd()
	defer srv.Close()
	ctx := context.Background()
	c, _ := client.New(srv.URL)
	c.PutLimit(ctx, "llm-dollars", client.LimitSpec{Capacity: dec("10"), Leak: &client.Leak{Amount: dec("10"), Per: 24 * time.Hour}})

	run := func(job string, work func() (decimal.Decimal, error)) {
		hold, d, err := c.Reserve(ctx, "llm-dollars", "team-a", dec("2.00"), 10*time.Minute)
		if err != nil || !d.Accepted {
			fmt.Println(job, "not started:", err, d.RetryAfterDuration())
			return
		}
		cost, err := work()
		if err != nil {
			r, _ := c.Release(ctx, hold.ID)
			fmt.Println(job, "failed, hold", r.Reservation.State, "- level", r.Bucket.Level)
			return
		}
		r, err := c.Commit(ctx, hold.ID, &cost, false)
		if err != nil {
			fmt.Println(job, "commit:", err)
			return
		}
		fmt.Println(job, "hold", r.Reservation.State, *r.Reservation.CommittedAmount, "- level", r.Bucket.Level)
	}
	run("summary", func() (decimal.Decimal, error) { return dec("0.37"), nil })
	run("translation", func() (decimal.Decimal, error) { return decimal.Zero, errors.New("model timed out") })
	// Output:
	// summary hold committed 0.37 - level 0.37
	// translation failed, hold released - level 0.37
}
