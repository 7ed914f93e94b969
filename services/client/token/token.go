// Package token mints and decodes Lockplane fencing tokens.
//
// A token is epoch × 2^48 + R, where R is the etcd revision at which the
// granting transaction committed (ADR-02). Revisions never repeat within one
// cluster's life and the epoch advances whenever the revision space could go
// backwards (a restore, a rehome), so tokens of one key strictly increase for
// ever. The epoch stays below 2^15, keeping every token positive as a signed
// 64-bit integer, the type most resources store it in.
package token

import (
	"errors"
	"fmt"
)

const (
	// RevisionBits is the width of the revision part.
	RevisionBits = 48
	// MaxEpoch is the largest epoch a token can carry.
	MaxEpoch = 1<<15 - 1
	// MaxRevision is the largest revision a token can carry.
	MaxRevision = 1<<RevisionBits - 1
)

// Token is a packed fencing token. Resources compare Tokens as integers.
type Token uint64

// ErrOutOfRange reports an epoch or revision a token cannot carry.
var ErrOutOfRange = errors.New("token: out of range")

// Mint packs an epoch and a granting revision. It refuses epoch 0, which is
// reserved for grants made without the log (ADR-04), and values that would
// overflow their field.
func Mint(epoch uint32, revision int64) (Token, error) {
	if epoch == 0 || epoch > MaxEpoch {
		return 0, fmt.Errorf("%w: epoch %d is outside 1..%d", ErrOutOfRange, epoch, MaxEpoch)
	}
	if revision <= 0 || revision > MaxRevision {
		return 0, fmt.Errorf("%w: revision %d is outside 1..2^48-1", ErrOutOfRange, revision)
	}
	return Token(uint64(epoch)<<RevisionBits | uint64(revision)), nil
}

// Epoch is the epoch the token was minted in.
func (t Token) Epoch() uint32 { return uint32(uint64(t) >> RevisionBits) }

// Revision is the etcd revision of the granting transaction.
func (t Token) Revision() int64 { return int64(uint64(t) & MaxRevision) }

// String prints the decoded parts only. Call sites that log must not log
// tokens at all (ADR-22); this exists for tests and the holder's own CLI.
func (t Token) String() string {
	return fmt.Sprintf("%d (epoch %d, revision %d)", uint64(t), t.Epoch(), t.Revision())
}
