package http

import (
	"math/rand/v2"
	"testing"
)

// TestPlainCost: every body the fast path takes is read exactly as the
// strict decoder reads it, and bodies it must not take (other members,
// escapes, spaces, other types) are left to the decoder.
func TestPlainCost(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 1))
	alphabet := `0123456789.-e+/"\ ,:{}ab`
	bodies := []string{`{"cost":"1"}`, `{"cost":"12.37"}`, `{"cost":""}`, `{"cost":"1","meta":{}}`, `{"cost": "1"}`,
		`{"Cost":"1"}`, `{"cost":"\u0031"}`, `{"cost":1}`, `{"cost":"1/2"}`, `{"cost":"1"} `, `{"cost":"1"}{}`,
		`{"cost":"` + string(make([]byte, 33)) + `"}`, `{"cost":"999999999999999999999999999999999"}`}
	for range 20_000 {
		b := make([]byte, r.IntN(12))
		for i := range b {
			b[i] = alphabet[r.IntN(len(alphabet))]
		}
		bodies = append(bodies, `{"cost":"`+string(b)+`"}`)
	}
	took := 0
	for _, body := range bodies {
		text, ok := plainCost([]byte(body))
		if !ok {
			continue
		}
		took++
		var want fillupBody
		if err := decodeBody([]byte(body), &want); err != nil {
			t.Fatalf("%s: fast path took %q, the decoder refuses: %v", body, text, err)
		}
		if !want.Cost.set || want.Cost.bad || want.Cost.text != text || want.Meta.raw != nil {
			t.Fatalf("%s: fast path %q, decoder %+v", body, text, want)
		}
	}
	if took < 1000 {
		t.Fatalf("the fast path took only %d bodies", took)
	}
	for _, body := range []string{`{"cost":"1","meta":{}}`, `{"cost": "1"}`, `{"Cost":"1"}`, `{"cost":"\u0031"}`, `{"cost":1}`, `{"cost":""}`} {
		if _, ok := plainCost([]byte(body)); ok {
			t.Errorf("the fast path took %s", body)
		}
	}
}
