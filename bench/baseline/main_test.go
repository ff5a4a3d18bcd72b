package main

import (
	"bufio"
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/budgetd/budgetd/internal/mysql"
	"github.com/budgetd/budgetd/internal/testenv"
)

// TestMySQLModeChargesOneRowPerBucket drives the mysql mode over HTTP against
// the real server and reads the table: each fillup adds its cost to its own
// (name, key) row, in DECIMAL, and answers budgetd's decision shape.
func TestMySQLModeChargesOneRowPerBucket(t *testing.T) {
	raw := testenv.MySQLDatabase(t)
	ctx, cancel := context.WithCancel(context.Background())
	pr, pw := io.Pipe()
	done := make(chan error, 1)
	go func() { done <- run(ctx, []string{"--mode", "mysql", "--store", raw, "--addr", "127.0.0.1:0"}, pw) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("run: %v", err)
		}
	})
	line, err := bufio.NewReader(pr).ReadString('\n')
	if err != nil {
		t.Fatal(err)
	}
	go io.Copy(io.Discard, pr)
	base := strings.Fields(line)[3] // "baseline: serving on http://… in mysql mode"

	client := &http.Client{Timeout: 10 * time.Second}
	post := func(path, body string) (int, string) {
		t.Helper()
		res, err := client.Post(base+path, "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		return res.StatusCode, string(b)
	}
	for _, c := range []struct{ path, cost string }{
		{"/v1/limits/l/buckets/a/fillup", `"2"`},
		{"/v1/limits/l/buckets/a/fillup", `3`},
		{"/v1/limits/l/buckets/b/fillup", `"7"`},
	} {
		code, body := post(c.path, `{"cost":`+c.cost+`}`)
		if code != http.StatusOK || !strings.Contains(body, `"accepted":true`) || !strings.Contains(body, `"capacity":"1000000000000"`) {
			t.Fatalf("POST %s: %d %s", c.path, code, body)
		}
	}
	if code, body := post("/v1/limits/l/buckets/a/fillup", `{"cost":"1.5"}`); code != http.StatusBadRequest || !strings.Contains(body, "invalid_amount") {
		t.Fatalf("fractional cost: %d %s", code, body)
	}

	db := testenv.MySQLDB(t, raw, mysql.ParseURL)
	levels := map[string]string{}
	rows, err := db.Query("SELECT `key`, CAST(level AS CHAR) FROM baseline_bucket WHERE name = 'l'")
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	for rows.Next() {
		var k, l string
		if err := rows.Scan(&k, &l); err != nil {
			t.Fatal(err)
		}
		levels[k] = strings.TrimRight(strings.TrimRight(l, "0"), ".")
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if levels["a"] != "5" || levels["b"] != "7" || len(levels) != 2 {
		t.Fatalf("levels = %v, want a=5 b=7", levels)
	}
}
