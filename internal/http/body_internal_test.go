package http

import (
	"math/rand/v2"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/budgetd/budgetd/internal/ledger"
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

// decodedItems reads a multi-bucket body as encoding/json does: the items
// the handler gets without plainItems.
func decodedItems(body []byte) ([]multiItem, error) {
	var mb multiBody
	if err := decodeBody(body, &mb); err != nil {
		return nil, err
	}
	items := make([]multiItem, len(mb.Items))
	for i, raw := range mb.Items {
		if err := decodeStrict(raw, &items[i], "items["+strconv.Itoa(i)+"]."); err != nil {
			return nil, err
		}
	}
	return items, nil
}

// The fast path of multi-bucket bodies reads what the decoder reads: every
// body it takes, the decoder takes with the same items (no meta), and it
// leaves every other form to the decoder.
func TestPlainItems(t *testing.T) {
	item := `{"limit":"bench","key":"k1","cost":"1"}`
	bodies := []string{
		`{"items":[` + item + `]}`,
		`{"items":[` + item + `,{"key":"team-7","cost":"0.5","limit":"bench"},{"cost":"2","limit":"org","key":"o/1 ü"}]}`,
		" \n{ \"items\" :\t[ { \"limit\" : \"a\" , \"key\" : \"b\" , \"cost\" : \"3\" } ] }\r\n",
		`{"items":[` + strings.Repeat(item+",", ledger.MaxItems-1) + item + `]}`,
		`{"items":[{"limit":"","key":"","cost":""}]}`,
		`{"items":[{"limit":"l","key":"k","cost":"x1e3"}]}`,
	}
	refused := []string{
		`{"items":[]}`, `{"items":[{}]}`, `{}`, ``, `null`, `[]`,
		`{"items":[` + strings.Repeat(item+",", ledger.MaxItems) + item + `]}`,
		`{"items":[{"limit":"l","key":"k","cost":"1","meta":{"a":"b"}}]}`,
		`{"items":[{"limit":"l","key":"k","cost":1}]}`,
		`{"items":[{"limit":"l","key":"k\u0031","cost":"1"}]}`,
		`{"items":[{"limit":"l","key":"k\"","cost":"1"}]}`,
		`{"items":[{"Limit":"l","key":"k","cost":"1"}]}`,
		`{"items":[{"limit":"l","key":"k","cost":"1","key":"j"}]}`,
		`{"items":[{"limit":"l","key":"k"}]}`,
		`{"items":[{"limit":"l","key":"k","cost":"1"}],"items":[]}`,
		`{"items":[{"limit":"l","key":"k","cost":"1"}]}x`,
		`{"items":[{"limit":"l","key":"k","cost":"1"},]}`,
		`{"items":[{"limit":"l","key":"k","cost":"1"}]` + "\v}",
		`{"items":[{"limit":"l","key":"` + "\xff" + `","cost":"1"}]}`,
		`{"items":[{"limit":"l","key":"` + "\x01" + `","cost":"1"}]}`,
		`{"items":[{"limit":null,"key":"k","cost":"1"}]}`,
		`{"items":[{"limit":"l","key":"k","cost":"1"}`,
	}
	for _, body := range refused {
		if _, ok := plainItems(body, nil); ok {
			t.Errorf("the fast path took %q", body)
		}
	}
	// Random bodies near the common form: one to three characters of the
	// bodies above changed, dropped or doubled.
	r := rand.New(rand.NewPCG(2, 2))
	alphabet := []byte(" \t\n{}[]:,\"\\0123456789.limtkeycosu\xc3\xbc\xff")
	seeds := slices.Clone(bodies)
	for range 30_000 {
		b := []byte(seeds[r.IntN(len(seeds))])
		for range 1 + r.IntN(3) {
			if len(b) == 0 {
				break
			}
			at := r.IntN(len(b))
			switch r.IntN(3) {
			case 0:
				b[at] = alphabet[r.IntN(len(alphabet))]
			case 1:
				b = append(b[:at], b[at+1:]...)
			default:
				b = append(b[:at+1], b[at:]...)
			}
		}
		bodies = append(bodies, string(b))
	}
	took := 0
	for _, body := range bodies {
		if samePlainItems(t, body) {
			took++
		}
	}
	if took < 1000 {
		t.Fatalf("the fast path took only %d bodies", took)
	}
}

// samePlainItems fails t unless the decoder reads body as plainItems does,
// when plainItems takes it; it reports whether plainItems took it.
func samePlainItems(t *testing.T, body string) bool {
	t.Helper()
	got, ok := plainItems(body, nil)
	if !ok {
		return false
	}
	want, err := decodedItems([]byte(body))
	if err != nil {
		t.Fatalf("%q: the fast path took it, the decoder refuses: %v", body, err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("%q:\nfast path %+v\n  decoder %+v", body, got, want)
	}
	return true
}

// FuzzPlainItems: whatever body the fast path of multi-bucket bodies takes,
// the decoder reads alike.
func FuzzPlainItems(f *testing.F) {
	for _, s := range []string{`{"items":[{"limit":"l","key":"k","cost":"1"}]}`, " {\"items\" : [ {\"cost\":\"2\",\"key\":\"ü\",\"limit\":\"x\"} ] } ",
		`{"items":[{"limit":"l","key":"k","cost":"1"},{"limit":"l","key":"k2","cost":"0.5"}]}`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, body string) { samePlainItems(t, body) })
}
