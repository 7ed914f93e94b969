package loopport

import (
	"net"
	"strconv"
	"testing"
)

// The ports are distinct, free, and below the ephemeral range, where no
// bind to port 0 or outgoing connection takes them.
func TestReserveDrawsDistinctFreePortsBelowTheEphemeralRange(t *testing.T) {
	ports, err := Reserve(50)
	if err != nil {
		t.Fatal(err)
	}
	low, high := ephemeralRange()
	if _, _, ok := outsideEphemeral(50); !ok {
		low, high = 0, -1 // the kernel chose: nothing to check the range against
	}
	seen := map[int]bool{}
	for _, p := range ports {
		if (p >= low && p <= high) || seen[p] {
			t.Fatalf("port %d: in the ephemeral range [%d, %d] or drawn twice (%v)", p, low, high, ports)
		}
		seen[p] = true
		l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(p)))
		if err != nil {
			t.Fatalf("port %d is not free: %v", p, err)
		}
		l.Close()
	}
}
