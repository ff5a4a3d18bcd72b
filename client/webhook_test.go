package client

import (
	"errors"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/shopspring/decimal"
)

// The test vector of the Standard Webhooks specification (its secret,
// message id, timestamp, payload and signature), which any verifier of the
// scheme must accept.
func TestWebhookStandardVector(t *testing.T) {
	body := []byte(`{"test": 2432232314}`)
	got, err := SignWebhook("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", "msg_p5jXN8AQM9LWM0D4loKWxJek", time.Unix(1614265330, 0), body)
	if err != nil || got != "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=" {
		t.Fatalf("signature %q %v", got, err)
	}
}

func TestWebhookVerify(t *testing.T) {
	const secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
	at := time.Date(2026, 11, 25, 10, 0, 0, 0, time.UTC)
	body := []byte(`{"id":"17","type":"threshold.crossed","time":"2026-11-25T09:59:59.000001Z","limit":"team-spend","key":"team-a","threshold":"80%","used":"4012.5","capacity":"5000","period_start":null}`)
	v, err := NewWebhookVerifier(secret, 0)
	if err != nil {
		t.Fatal(err)
	}
	v.now = func() time.Time { return at }
	headers := func(id string, ts time.Time, body []byte, extra string) http.Header {
		sig, err := SignWebhook(secret, id, ts, body)
		if err != nil {
			t.Fatal(err)
		}
		h := http.Header{}
		h.Set("webhook-id", id)
		h.Set("webhook-timestamp", strconv.FormatInt(ts.Unix(), 10))
		h.Set("webhook-signature", strings.TrimSpace(extra+" "+sig))
		return h
	}
	e, err := v.Verify(headers("17", at.Add(-time.Second), body, "v1,bm90IGl0"), body)
	if err != nil || e.ID != "17" || e.Threshold != "80%" || !e.Used.Equal(decimal.RequireFromString("4012.5")) || e.PeriodStart != nil {
		t.Fatalf("a good webhook (with a second, stale signature beside it): %+v %v", e, err)
	}
	bad := []struct {
		name string
		h    http.Header
		body []byte
	}{
		{"body changed", headers("17", at, body, ""), []byte(strings.Replace(string(body), "4012.5", "12.5", 1))},
		{"too old", headers("17", at.Add(-6*time.Minute), body, ""), body},
		{"from the future", headers("17", at.Add(6*time.Minute), body, ""), body},
		{"id not the event's", headers("18", at, body, ""), body},
		{"no headers", http.Header{}, body},
	}
	other, _ := SignWebhook("whsec_"+"c2VjcmV0", "17", at, body)
	h := headers("17", at, body, "")
	h.Set("webhook-signature", other)
	bad = append(bad, struct {
		name string
		h    http.Header
		body []byte
	}{"another secret", h, body})
	for _, b := range bad {
		if _, err := v.Verify(b.h, b.body); !errors.Is(err, ErrWebhookSignature) {
			t.Errorf("%s: %v, want ErrWebhookSignature", b.name, err)
		}
	}
	if _, err := NewWebhookVerifier("whsec_!!", 0); err == nil {
		t.Error("a whsec_ secret that is not base64 was taken")
	}
	if _, err := NewWebhookVerifier("", 0); err == nil {
		t.Error("an empty secret was taken")
	}
}
