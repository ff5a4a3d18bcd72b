package redis

import (
	"context"
	"fmt"
	"time"

	"github.com/budgetd/budgetd/internal/ledger"
	goredis "github.com/redis/go-redis/v9"
)

var _ ledger.LeaseStore = (*Store)(nil)

// A lease is the hash P:lease:{P}:<name> (fields holder, exp: its expiry in
// Unix milliseconds on the Redis clock, cursor), in the slot of the limit
// definitions. leaseScript compares the holder and changes the hash in one
// step: ARGV[1] is the operation (acquire, advance or release), ARGV[2] the
// holder, ARGV[3] the TTL in milliseconds (acquire) or the cursor
// (advance). The reply is {1 when the holder holds the lease (acquire) or
// the cursor was stored (advance), else 0; the cursor}.
var leaseScript = goredis.NewScript(`
local k, op, holder = KEYS[1], ARGV[1], ARGV[2]
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local h = redis.call('HGET', k, 'holder') or ''
local exp = tonumber(redis.call('HGET', k, 'exp') or '0')
local cur = redis.call('HGET', k, 'cursor') or ''
if op == 'acquire' then
	if h == '' or h == holder or exp <= now then
		redis.call('HSET', k, 'holder', holder, 'exp', string.format('%d', now + tonumber(ARGV[3])), 'cursor', cur)
		return {1, cur}
	end
	return {0, cur}
elseif op == 'advance' then
	if h == holder and exp > now then
		redis.call('HSET', k, 'cursor', ARGV[3])
		return {1, ARGV[3]}
	end
	return {0, cur}
elseif op == 'release' then
	if h == holder then
		redis.call('HSET', k, 'holder', '', 'exp', '0')
	end
	return {0, cur}
end
return redis.error_reply('unknown lease operation ' .. op)
`)

func (k keys) lease(name string) string { return k.prefix + ":lease:{" + k.prefix + "}:" + name }

// lease runs leaseScript.
func (s *Store) lease(ctx context.Context, name, op, holder, arg string) (bool, string, error) {
	cctx, cancel := context.WithTimeoutCause(ctx, s.callTimeout, errCallTimeout)
	defer cancel()
	r, err := leaseScript.Run(cctx, s.client, []string{s.k.lease(name)}, op, holder, arg).Slice()
	if err != nil {
		return false, "", s.fail(cctx, op+" lease", err)
	}
	if len(r) != 2 {
		return false, "", fmt.Errorf("redis %s lease: reply %v", op, r)
	}
	n, ok1 := r[0].(int64)
	cursor, ok2 := r[1].(string)
	if !ok1 || !ok2 {
		return false, "", fmt.Errorf("redis %s lease: reply %v", op, r)
	}
	return n == 1, cursor, nil
}

// AcquireLease takes or renews the lease name for holder.
func (s *Store) AcquireLease(ctx context.Context, name, holder string, ttl time.Duration) (bool, string, error) {
	return s.lease(ctx, name, "acquire", holder, fmt.Sprint(max(ttl.Milliseconds(), 1)))
}

// AdvanceLease stores the lease's cursor when holder holds it.
func (s *Store) AdvanceLease(ctx context.Context, name, holder, cursor string) (bool, error) {
	ok, _, err := s.lease(ctx, name, "advance", holder, cursor)
	return ok, err
}

// ReleaseLease ends holder's hold on the lease.
func (s *Store) ReleaseLease(ctx context.Context, name, holder string) error {
	_, _, err := s.lease(ctx, name, "release", holder, "")
	return err
}
