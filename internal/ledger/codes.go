package ledger

// Code is the stable code of an error or refusal of the ledger: the problem
// code internal/http answers with (api.Code, which ledger does not import;
// TestCodesAreAPICodes checks that every one is in api.Codes).
type Code string

// The codes the ledger produces.
const (
	// CodeInvalidRequest: anything wrong with the input but the below.
	CodeInvalidRequest Code = "invalid_request"
	// CodeInvalidAmount: an amount is missing, malformed or out of range.
	CodeInvalidAmount Code = "invalid_amount"
	// CodeInvalidDuration: a duration is malformed or out of range.
	CodeInvalidDuration Code = "invalid_duration"
	// CodeInvalidKey: a bucket key is empty, too long or not text.
	CodeInvalidKey Code = "invalid_key"
	// CodeInvalidName: a limit name is malformed.
	CodeInvalidName Code = "invalid_name"
	// CodeExceedsHold: a commit above the hold without overrun.
	CodeExceedsHold Code = "exceeds_hold"
	// CodeReservationExpired: a commit or release after expiry.
	CodeReservationExpired Code = "reservation_expired"
	// CodeReservationClosed: a conflicting second resolution of a hold.
	CodeReservationClosed Code = "reservation_closed"
)

// Codes lists every code of the ledger.
var Codes = []Code{
	CodeInvalidRequest, CodeInvalidAmount, CodeInvalidDuration, CodeInvalidKey, CodeInvalidName,
	CodeExceedsHold, CodeReservationExpired, CodeReservationClosed,
}
