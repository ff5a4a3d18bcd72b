package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/budgetd/budgetd/client"
)

// webhooklat measures the time from a charge that crosses a threshold to
// the arrival of its webhook: it listens where budgetd's --webhook-url
// points, PUTs a limit with an amount threshold, charges n fresh keys
// across it one after the other (each after the previous one's webhook
// arrived and a gap, so that no two are read from the outbox together) and
// prints the arrival − send times as JSON (milliseconds).
func webhooklat(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("webhooklat", flag.ContinueOnError)
	base := fs.String("url", "", "budgetd's base URL")
	listen := fs.String("listen", "", "address budgetd's --webhook-url points at (host:port)")
	secretFile := fs.String("secret-file", "", "budgetd's --webhook-secret-file")
	n := fs.Int("n", 300, "crossings to time")
	gap := fs.Duration("gap", 20*time.Millisecond, "pause after each arrival")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *base == "" || *listen == "" || *secretFile == "" {
		return fmt.Errorf("webhooklat needs -url, -listen and -secret-file")
	}
	secret, err := os.ReadFile(*secretFile)
	if err != nil {
		return err
	}
	v, err := client.NewWebhookVerifier(strings.TrimSpace(string(secret)), 0)
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		return err
	}
	var mu sync.Mutex
	arrived := map[string]chan time.Time{} // by key
	bad := 0
	srv := &http.Server{ReadHeaderTimeout: 10 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		at := time.Now()
		body, _ := io.ReadAll(r.Body)
		e, err := v.Verify(r.Header, body)
		mu.Lock()
		defer mu.Unlock()
		if err != nil {
			bad++
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		if c, ok := arrived[e.Key]; ok {
			select {
			case c <- at:
			default: // a redelivery
			}
		}
		w.WriteHeader(http.StatusNoContent)
	})}
	go func() { _ = srv.Serve(ln) }()
	defer srv.Close()

	hc := &http.Client{Timeout: 10 * time.Second}
	call := func(method, path, body string) error {
		req, err := http.NewRequestWithContext(ctx, method, *base+path, strings.NewReader(body))
		if err != nil {
			return err
		}
		req.Header.Set("Content-Type", "application/json")
		res, err := hc.Do(req)
		if err != nil {
			return err
		}
		b, _ := io.ReadAll(res.Body)
		res.Body.Close()
		if res.StatusCode != 200 {
			return fmt.Errorf("%s %s: %d %s", method, path, res.StatusCode, b)
		}
		return nil
	}
	limit := fmt.Sprintf("bench-hook-%d", time.Now().UnixNano())
	if err := call(http.MethodPut, "/v1/limits/"+limit, `{"capacity":"1000","leak":{"amount":"1","per":"87600h"},"thresholds":["10"]}`); err != nil {
		return err
	}
	var ms []float64
	lost := 0
	for i := range *n {
		key := fmt.Sprintf("k%d", i)
		c := make(chan time.Time, 1)
		mu.Lock()
		arrived[key] = c
		mu.Unlock()
		sent := time.Now()
		if err := call(http.MethodPost, "/v1/limits/"+limit+"/buckets/"+key+"/fillup", `{"cost":"20"}`); err != nil {
			return err
		}
		t := time.NewTimer(10 * time.Second)
		select {
		case at := <-c:
			ms = append(ms, float64(at.Sub(sent).Microseconds())/1000)
		case <-t.C:
			lost++
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		}
		t.Stop()
		time.Sleep(*gap)
	}
	slices.Sort(ms)
	q := func(p float64) float64 {
		if len(ms) == 0 {
			return 0
		}
		return ms[min(len(ms)-1, int(p*float64(len(ms))))]
	}
	mu.Lock()
	defer mu.Unlock()
	return json.NewEncoder(os.Stdout).Encode(map[string]any{"n": *n, "arrived": len(ms), "lost": lost, "bad_signatures": bad,
		"p50_ms": q(0.5), "p99_ms": q(0.99), "max_ms": q(1)})
}
