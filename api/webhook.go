package api

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"strings"
)

// WebhookSecretKey returns the HMAC key of a webhook secret, as budgetd
// reads its --webhook-secret-file and the client's verifier reads the same
// secret: surrounding white space is not part of it; "whsec_…" is the
// base64 of the key after the prefix, as Standard Webhooks writes secrets;
// any other secret is the key as it is.
func WebhookSecretKey(secret string) ([]byte, error) {
	secret = strings.TrimSpace(secret)
	key := []byte(secret)
	if rest, ok := strings.CutPrefix(secret, "whsec_"); ok {
		k, err := base64.StdEncoding.DecodeString(rest)
		if err != nil {
			return nil, fmt.Errorf("budgetd webhook: secret whsec_… is not base64: %w", err)
		}
		key = k
	}
	if len(key) == 0 {
		return nil, errors.New("budgetd webhook: empty secret")
	}
	return key, nil
}

// WebhookMAC is HMAC-SHA256 of "id.timestamp.body" under key: what the
// webhook-signature header carries (timestamp is the webhook-timestamp
// header, Unix seconds).
func WebhookMAC(key []byte, id, timestamp string, body []byte) []byte {
	m := hmac.New(sha256.New, key)
	m.Write([]byte(id))
	m.Write([]byte{'.'})
	m.Write([]byte(timestamp))
	m.Write([]byte{'.'})
	m.Write(body)
	return m.Sum(nil)
}

// WebhookSignature is the webhook-signature header budgetd sends: "v1,"
// and the base64 of WebhookMAC.
func WebhookSignature(key []byte, id, timestamp string, body []byte) string {
	return "v1," + base64.StdEncoding.EncodeToString(WebhookMAC(key, id, timestamp, body))
}
