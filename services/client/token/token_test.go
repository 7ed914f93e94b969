package token

import (
	"errors"
	"math"
	"testing"
)

func TestMintRoundTrip(t *testing.T) {
	for _, c := range []struct {
		epoch uint32
		rev   int64
	}{{1, 1}, {1, 123456}, {7, MaxRevision}, {MaxEpoch, 1}, {MaxEpoch, MaxRevision}} {
		tok, err := Mint(c.epoch, c.rev)
		if err != nil {
			t.Fatalf("Mint(%d, %d): %v", c.epoch, c.rev, err)
		}
		if tok.Epoch() != c.epoch || tok.Revision() != c.rev {
			t.Fatalf("Mint(%d, %d) decodes to (%d, %d)", c.epoch, c.rev, tok.Epoch(), tok.Revision())
		}
		if uint64(tok) > math.MaxInt64 {
			t.Fatalf("Mint(%d, %d) = %d does not fit a signed 64-bit column", c.epoch, c.rev, uint64(tok))
		}
	}
}

func TestMintRefusesOutOfRange(t *testing.T) {
	for _, c := range []struct {
		epoch uint32
		rev   int64
	}{{0, 1}, {MaxEpoch + 1, 1}, {1, 0}, {1, -1}, {1, MaxRevision + 1}} {
		if _, err := Mint(c.epoch, c.rev); !errors.Is(err, ErrOutOfRange) {
			t.Errorf("Mint(%d, %d) error = %v, want ErrOutOfRange", c.epoch, c.rev, err)
		}
	}
}

// Any token of a later epoch exceeds every token of an earlier one: this is
// what makes an epoch advance safe after a restore rolls revisions back.
func TestLaterEpochDominates(t *testing.T) {
	old, _ := Mint(3, MaxRevision)
	next, _ := Mint(4, 1)
	if next <= old {
		t.Fatalf("epoch 4 revision 1 (%d) <= epoch 3 max revision (%d)", next, old)
	}
}
