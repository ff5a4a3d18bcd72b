package redis

import (
	"crypto/sha256"
	"encoding/hex"
	"strconv"
	"strings"
	"sync"

	"github.com/budgetd/budgetd/internal/ledger"
)

// Key layout (see docs/redis.md). P is the prefix and g the generation of a
// limit: a number from a counter that a limit gets when it is created, so a
// re-created limit never sees the keys of the deleted one.
//
//	P:lim:{P}:d:<name>   hash   the limit definition (capacity, leak, history, mode m and grace gr, times, generation g, version v)
//	P:lim:{P}:idx        zset   limit names, for listing in order
//	P:lim:{P}:gen        string the generation counter
//	P:lim:{P}:gens       hash   generation → limit name
//	P:<g>:b:<k>          hash   bucket: level "l", updated "u", history counter "n", one "h<id>" field per active hold,
//	                            a window bucket's slots "w", one "G<id>" field per grant (grants.go)
//	P:<g>:x:<k>          zset   bucket history, score = time in µs
//	P:<g>:i:<k>:<sha>    string idempotency record of a bucket call
//	P:<g>:r:{<s>}<id>    hash   a hold; <s> is a short string that hashes to the bucket's slot
//	P:<g>:i:{<s>}<id>:<sha>     idempotency record of a commit or release
//	P:m:i:<sha>          string idempotency record of a multi-bucket call (in Redis Cluster: its claim)
//	P:m:i:{<s>}<sha>     string Redis Cluster: idempotency record of a multi-bucket call, in its buckets' slot
//	P:m:i:<k>:<sha>      string idempotency record of a multi-bucket call kept by earlier versions (read only)
//	P:ev:{<s>}           stream the outbox of slot <s>'s buckets: threshold events, appended by the write that emitted them
//	P:evlog:{P}          stream the global event log (GET /v1/events): events sealed from the outboxes, id = event id
//	P:evcur:{P}          hash   slot → id of the last outbox entry of that slot already sealed into the log
//	P:evslots:{P}        set    slots whose outbox may hold unsealed events (a hint; discovery scans for P:ev:*)
//	P:evb:{P}:<l>:<k>    list   ids in P:evlog of the newest events of bucket <k> of limit <l>, newest first
//
// <k> is the caller's key made into a hash tag: "=" + key when the key has a
// Redis hash tag of its own ("{t1}u1"), otherwise "{" + key + "}". So all
// keys of one bucket share a slot, and "{t1}u1", "{t1}team" and "t1" share one.

// encodeKey turns a bucket key into the part of a Redis key that carries its
// hash tag. The first byte tells the two forms apart, so it is one-to-one.
func encodeKey(key string) string {
	if hasTag(key) {
		return "=" + key
	}
	return "{" + key + "}"
}

// decodeKey reverses encodeKey.
func decodeKey(e string) (string, bool) {
	switch {
	case strings.HasPrefix(e, "="):
		return e[1:], true
	case len(e) >= 2 && e[0] == '{' && e[len(e)-1] == '}':
		return e[1 : len(e)-1], true
	}
	return "", false
}

// hasTag reports whether Redis Cluster would hash key by a tag: a "{" followed
// later by a "}" with at least one byte between.
func hasTag(key string) bool {
	s := strings.IndexByte(key, '{')
	if s < 0 {
		return false
	}
	e := strings.IndexByte(key[s+1:], '}')
	return e > 0
}

// slotOf is the Redis Cluster hash slot of a Redis key.
func slotOf(key string) int {
	if s := strings.IndexByte(key, '{'); s >= 0 {
		if e := strings.IndexByte(key[s+1:], '}'); e > 0 {
			key = key[s+1 : s+1+e]
		}
	}
	return int(crc16(key) & 16383)
}

// crc16 is CRC-16/XMODEM, the checksum Redis Cluster hashes keys with.
func crc16(s string) uint16 {
	var crc uint16
	for i := 0; i < len(s); i++ {
		crc ^= uint16(s[i]) << 8
		for b := 0; b < 8; b++ {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
	}
	return crc
}

var (
	slotTagsOnce sync.Once
	slotTags     [16384]string
)

// slotTag returns a short string whose hash slot is slot: the first base-36
// number (in counting order, so every process finds the same one) that
// hashes there. Hold records use it to land in their bucket's slot.
func slotTag(slot int) string {
	slotTagsOnce.Do(func() {
		left := len(slotTags)
		for i := 0; left > 0; i++ {
			s := strconv.FormatInt(int64(i), 36)
			if n := int(crc16(s) & 16383); slotTags[n] == "" {
				slotTags[n] = s
				left--
			}
		}
	})
	return slotTags[slot]
}

// keys names the Redis keys of one store.
type keys struct{ prefix string }

func (k keys) limitDef(name string) string { return k.prefix + ":lim:{" + k.prefix + "}:d:" + name }
func (k keys) limitIdx() string            { return k.prefix + ":lim:{" + k.prefix + "}:idx" }
func (k keys) limitGen() string            { return k.prefix + ":lim:{" + k.prefix + "}:gen" }
func (k keys) limitGens() string           { return k.prefix + ":lim:{" + k.prefix + "}:gens" }

// overrides is the hash of a limit's overrides (pattern → value) and
// overridePatterns the zset of their patterns, in the limit's slot.
func (k keys) overrides(name string) string { return k.prefix + ":lim:{" + k.prefix + "}:o:" + name }
func (k keys) overridePatterns(name string) string {
	return k.prefix + ":lim:{" + k.prefix + "}:oi:" + name
}

// overrideLog is the stream of a limit's override changes: entry id
// "<ov>-1", field p the pattern changed (overrideLogLen kept).
func (k keys) overrideLog(name string) string { return k.prefix + ":lim:{" + k.prefix + "}:ol:" + name }

func (k keys) outbox(slot int) string { return k.prefix + ":ev:{" + slotTag(slot) + "}" }
func (k keys) eventLog() string       { return k.prefix + ":evlog:{" + k.prefix + "}" }
func (k keys) eventCursor() string    { return k.prefix + ":evcur:{" + k.prefix + "}" }
func (k keys) eventSlots() string     { return k.prefix + ":evslots:{" + k.prefix + "}" }

// bucketEventsBase is where the per-bucket indexes of the global log start
// (bucketEvents without the bucket), as the seal function takes it.
func (k keys) bucketEventsBase() string { return k.prefix + ":evb:{" + k.prefix + "}:" }
func (k keys) bucketEvents(ref ledger.BucketRef) string {
	return k.bucketEventsBase() + ref.Limit + ":" + encodeKey(ref.Key)
}

func (k keys) gen(g int64) string { return k.prefix + ":" + strconv.FormatInt(g, 10) }

func (k keys) bucket(g int64, key string) string  { return k.gen(g) + ":b:" + encodeKey(key) }
func (k keys) history(g int64, key string) string { return k.gen(g) + ":x:" + encodeKey(key) }

// parseBucket reverses bucket: the generation and key of a bucket's Redis key.
func (k keys) parseBucket(bk string) (int64, string, bool) {
	rest, ok := strings.CutPrefix(bk, k.prefix+":")
	g, enc, found := strings.Cut(rest, ":b:")
	gen, err := strconv.ParseInt(g, 10, 64)
	if !ok || !found || err != nil {
		return 0, "", false
	}
	key, ok := decodeKey(enc)
	return gen, key, ok
}

// holdBase is the key of a hold record without its id; all holds of a bucket
// in slot share it.
func (k keys) holdBase(g int64, slot int) string { return k.gen(g) + ":r:{" + slotTag(slot) + "}" }

func (k keys) idemBucket(g int64, key, scope, ikey string) string {
	return k.gen(g) + ":i:" + encodeKey(key) + ":" + idemDigest(scope, ikey)
}

func (k keys) idemHold(g int64, slot int, id, scope, ikey string) string {
	return k.gen(g) + ":i:{" + slotTag(slot) + "}" + id + ":" + idemDigest(scope, ikey)
}

// idemCall is the idempotency record of a multi-bucket call, named by the
// call alone (scope and key); in Redis Cluster it holds only the request
// hash, as a claim, and the record proper is idemCallIn the buckets' slot.
func (k keys) idemCall(scope, ikey string) string {
	return k.prefix + ":m:i:" + idemDigest(scope, ikey)
}

// idemMultiLegacy is where earlier versions kept the record of a
// multi-bucket call: with its first item, in the buckets' slot. Fillup
// replays from it, so a retry across an upgrade is not charged again.
func (k keys) idemMultiLegacy(first, scope, ikey string) string {
	return k.prefix + ":m:i:" + encodeKey(first) + ":" + idemDigest(scope, ikey)
}

func (k keys) idemCallIn(slot int, scope, ikey string) string {
	return k.prefix + ":m:i:{" + slotTag(slot) + "}" + idemDigest(scope, ikey)
}

func idemDigest(scope, key string) string {
	h := sha256.Sum256([]byte(scope + "\x00" + key))
	return hex.EncodeToString(h[:16])
}

// Hold ids are "h" + generation + "_" + 4 hex digits of the bucket's slot +
// 24 random hex digits, so a commit finds the hold's slot from its id.
func holdID(g int64, slot int, random string) string {
	return "h" + strconv.FormatInt(g, 10) + "_" + strconv.FormatInt(int64(0x10000+slot), 16)[1:] + random
}

// parseHoldID returns the generation and slot an id names.
func parseHoldID(id string) (g int64, slot int, ok bool) {
	if len(id) < 2 || id[0] != 'h' {
		return 0, 0, false
	}
	gs, rest, found := strings.Cut(id[1:], "_")
	if !found || len(rest) != 28 {
		return 0, 0, false
	}
	g, err := strconv.ParseInt(gs, 10, 64)
	if err != nil || g <= 0 {
		return 0, 0, false
	}
	s, err := strconv.ParseUint(rest[:4], 16, 16)
	if err != nil || s >= 16384 {
		return 0, 0, false
	}
	for _, c := range rest[4:] {
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return 0, 0, false
		}
	}
	return g, int(s), true
}
