// Package fence is where mutual exclusion is enforced: at the resource, by
// a conditional write that compares the writer's fencing token with the
// highest token the record has accepted (ADR-16). A lock alone cannot stop
// a holder that was paused past its lease; the fence can.
//
// The rule, for every fence here: a write under token t is applied only if
// t is strictly greater than the record's mark, and the same statement sets
// the mark to t. An equal token is refused: a grant writes a record once.
// Allowing equal tokens would let a holder whose lease has expired, and
// whose key is already granted to another, land a second write before the
// new holder's first, the gap the pause test probes. A holder that must
// change a record several times does it in one write, or takes a new grant.
//
// A holder that reads a record to compute its write (read-modify-write)
// claims the token before, or in the same statement as, the read: the
// claim moves the mark to t if t is greater, and the write then applies
// only while the mark is still t. A write that checks the token only when
// it lands leaves a window: a holder force-released between its read and
// its write lands that write before the next holder's first (nothing newer
// has reached the mark), and the next holder, which read before it,
// overwrites it. With the claim, the next holder's read comes after its
// own claim, which refuses every later write of the old holder. Every
// reader of such a record reads through the claim.
//
// Subpackages are reference implementations meant to be copied: pgfence
// (PostgreSQL) and s3fence (S3-compatible stores). Both report refusals as
// ErrStaleFence.
package fence

import "errors"

// ErrStaleFence means the resource refused a write because the record has
// accepted a token at least as new: the writer's grant is stale. Callers
// test for it with errors.Is; it never carries either token.
var ErrStaleFence = errors.New("fence: stale token: the record has accepted a newer or equal token")

// ErrNoRecord means an update named a record that does not exist.
var ErrNoRecord = errors.New("fence: no such record")
