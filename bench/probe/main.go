// Command memsize measures what an idle bucket costs the memory store: it
// charges N buckets once (history off), collects garbage, and prints the heap
// growth per bucket. The store is used in process, through the ledger
// service, so nothing but the buckets is counted.
//
//	memsize -n 1000000
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"time"

	"github.com/budgetd/budgetd/internal/ledger"
	"github.com/budgetd/budgetd/internal/memory"
	"github.com/jackc/pgx/v5"
	"github.com/shopspring/decimal"
)

func heap() uint64 {
	var m runtime.MemStats
	for range 3 {
		runtime.GC()
	}
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

func main() {
	n := flag.Int("n", 1_000_000, "buckets")
	asJSON := flag.Bool("json", false, "print JSON")
	pgSize := flag.String("pg-size", "", "print the size of this PostgreSQL database and exit")
	flag.Parse()
	ctx := context.Background()
	if *pgSize != "" {
		if err := printPGSize(ctx, *pgSize); err != nil {
			fmt.Fprintln(os.Stderr, "memsize:", err)
			os.Exit(1)
		}
		return
	}
	st := memory.New()
	defer st.Close()
	svc := ledger.NewService(st)
	if _, err := svc.PutLimit(ctx, "mem", ledger.LimitSpec{Capacity: decimal.NewFromInt(1_000_000_000_000),
		LeakAmount: decimal.NewFromInt(1), LeakPer: 87600 * time.Hour, History: false}); err != nil {
		fmt.Fprintln(os.Stderr, "memsize:", err)
		os.Exit(1)
	}
	one := decimal.NewFromInt(1)
	before := heap()
	start := time.Now()
	for i := range *n {
		if _, err := svc.Fillup(ctx, []ledger.Item{{Bucket: ledger.BucketRef{Limit: "mem", Key: "k" + strconv.Itoa(i)}, Cost: one}}, ledger.Idempotency{}); err != nil {
			fmt.Fprintln(os.Stderr, "memsize:", err)
			os.Exit(1)
		}
	}
	took := time.Since(start)
	after := heap()
	per := float64(int64(after)-int64(before)) / float64(*n)
	if *asJSON {
		_ = json.NewEncoder(os.Stdout).Encode(map[string]any{"buckets": *n, "heap_bytes": int64(after) - int64(before), "bytes_per_bucket": per, "fillups_per_second": float64(*n) / took.Seconds()})
		runtime.KeepAlive(st)
		return
	}
	fmt.Printf("memory store: %d buckets, heap %+d bytes, %.0f bytes per idle bucket (%.0f in-process fillups/s)\n",
		*n, int64(after)-int64(before), per, float64(*n)/took.Seconds())
	runtime.KeepAlive(st)
}

func printPGSize(ctx context.Context, url string) error {
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, "VACUUM"); err != nil {
		return err
	}
	var n int64
	if err := conn.QueryRow(ctx, "SELECT pg_database_size(current_database())").Scan(&n); err != nil {
		return err
	}
	fmt.Println(n)
	return nil
}
