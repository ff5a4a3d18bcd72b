package client

import (
	"crypto/hmac"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/budgetd/budgetd/api"
)

// DefaultWebhookTolerance is how far a webhook's timestamp may be from the
// receiver's clock, either way, before Verify refuses it (a replay).
const DefaultWebhookTolerance = 5 * time.Minute

// ErrWebhookSignature is returned (wrapped) by WebhookVerifier.Verify for a
// request that budgetd did not sign with the secret, or that is too old or
// too new: answer it with a 4xx and do not act on it.
var ErrWebhookSignature = errors.New("budgetd webhook: not verified")

// WebhookVerifier checks the webhooks budgetd sends, as the Standard
// Webhooks specification has them: headers webhook-id (the event id),
// webhook-timestamp (Unix seconds) and webhook-signature ("v1," + base64 of
// HMAC-SHA256 of "id.timestamp.body" under the secret; several
// space-separated signatures are allowed, for a secret being rotated).
type WebhookVerifier struct {
	key       []byte
	tolerance time.Duration
	now       func() time.Time
}

// NewWebhookVerifier returns a verifier for the secret budgetd signs with
// (the content of its --webhook-secret-file), read as
// api.WebhookSecretKey does: a secret "whsec_…" is the base64 of the key
// after the prefix, as Standard Webhooks writes secrets; any other secret
// is the key as it is. tolerance 0 is
// DefaultWebhookTolerance.
func NewWebhookVerifier(secret string, tolerance time.Duration) (*WebhookVerifier, error) {
	key, err := api.WebhookSecretKey(secret)
	if err != nil {
		return nil, err
	}
	if tolerance <= 0 {
		tolerance = DefaultWebhookTolerance
	}
	return &WebhookVerifier{key: key, tolerance: tolerance, now: time.Now}, nil
}

// Verify checks the headers and body of a webhook request and returns its
// event. The body must be the bytes received, unparsed. The error wraps
// ErrWebhookSignature when the request is not authentic or not timely.
func (v *WebhookVerifier) Verify(h http.Header, body []byte) (Event, error) {
	id, ts, sigs := h.Get("webhook-id"), h.Get("webhook-timestamp"), h.Get("webhook-signature")
	if id == "" || ts == "" || sigs == "" {
		return Event{}, fmt.Errorf("%w: webhook-id, webhook-timestamp and webhook-signature are required", ErrWebhookSignature)
	}
	sec, err := strconv.ParseInt(ts, 10, 64)
	if err != nil {
		return Event{}, fmt.Errorf("%w: webhook-timestamp %q is not Unix seconds", ErrWebhookSignature, ts)
	}
	if d := v.now().Sub(time.Unix(sec, 0)); d > v.tolerance || d < -v.tolerance {
		return Event{}, fmt.Errorf("%w: webhook-timestamp is %s from this clock, more than %s", ErrWebhookSignature, d.Round(time.Second), v.tolerance)
	}
	want := api.WebhookMAC(v.key, id, ts, body)
	ok := false
	for _, s := range strings.Fields(sigs) {
		ver, b64, found := strings.Cut(s, ",")
		if !found || ver != "v1" {
			continue
		}
		got, err := base64.StdEncoding.DecodeString(b64)
		if err == nil && hmac.Equal(got, want) {
			ok = true
		}
	}
	if !ok {
		return Event{}, fmt.Errorf("%w: no v1 signature matches", ErrWebhookSignature)
	}
	var d api.WebhookEvent
	if err := json.Unmarshal(body, &d); err != nil {
		return Event{}, fmt.Errorf("budgetd webhook: the signed body is not an event: %w", err)
	}
	if d.ID != id {
		return Event{}, fmt.Errorf("%w: webhook-id %q is not the event's id %q", ErrWebhookSignature, id, d.ID)
	}
	return d, nil
}

// SignWebhook returns the webhook-signature value budgetd sends for an
// event id, a timestamp and a body under secret (as NewWebhookVerifier
// reads secrets): for tests of a receiver.
func SignWebhook(secret, id string, ts time.Time, body []byte) (string, error) {
	v, err := NewWebhookVerifier(secret, 0)
	if err != nil {
		return "", err
	}
	return api.WebhookSignature(v.key, id, strconv.FormatInt(ts.Unix(), 10), body), nil
}
