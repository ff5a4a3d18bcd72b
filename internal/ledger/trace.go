package ledger

import "context"

// Tracer follows the decisions of a Service for traces (WithTracer): each
// Check, Fillup, Reserve, Drain, Commit and Release calls Decision as it
// begins, passes the context it returns on to the store, and calls the
// returned end once with how the operation ended. A Service without a
// Tracer pays one nil check per operation.
type Tracer interface {
	// Decision begins following op ("check", "fillup", "reserve",
	// "drain", "commit", "release") on ref: the call's bucket, the first
	// item's of a multi-bucket Fillup (items is how many there are), and
	// a zero ref for Commit and Release, which name a hold. end receives
	// the bucket as known at the end (the hold's, once the store found
	// it; ref otherwise), ResultAccepted, ResultDenied or ResultDone, and
	// the error the operation returned (a *Refusal for a refused hold).
	// Implementations must be safe for concurrent use and must not block.
	Decision(ctx context.Context, op string, ref BucketRef, items int) (_ context.Context, end func(ref BucketRef, result string, err error))
}

// The results a Tracer is told of an operation that returned no error.
const (
	ResultAccepted = "accepted" // a check, fillup or reserve that fits
	ResultDenied   = "denied"   // one that does not: an answer, not an error
	ResultDone     = "done"     // a drain, commit or release
)

// WithTracer has the Service tell t of every decision.
func WithTracer(t Tracer) Option { return func(s *Service) { s.tracer = t } }

// decided is the result word of a decision.
func decided(accepted bool) string {
	if accepted {
		return ResultAccepted
	}
	return ResultDenied
}
