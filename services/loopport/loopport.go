// Package loopport picks loopback ports for the servers a process starts
// (embedded etcd, MinIO, ClickHouse, test servers), which bind them a
// moment later.
package loopport

import (
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"strings"
)

// The range ports are drawn from when the kernel's ephemeral range leaves
// room: below it from lowest, or else above it.
const (
	lowest  = 10000
	highest = 65535
)

// Reserve returns n distinct TCP ports that were free on 127.0.0.1 a
// moment ago, for servers to bind there.
func Reserve(n int) ([]int, error) { return ReserveOn("127.0.0.1", n) }

// ReserveOn returns n distinct TCP ports that were free on host a moment
// ago. They are drawn at random from outside the kernel's ephemeral range,
// which bind to port 0 and outgoing connections take from: between the
// check and the server's bind, only a process choosing the same port
// itself can take one, and a server restarted on its port finds it free.
// Where the ephemeral range leaves too little room, the kernel chooses.
func ReserveOn(host string, n int) ([]int, error) {
	if n < 1 {
		return nil, fmt.Errorf("loopport: %d ports asked for; at least 1", n)
	}
	var held []net.Listener
	defer func() {
		for _, l := range held {
			l.Close()
		}
	}()
	var lastErr error
	listen := func(port int) bool {
		l, err := net.Listen("tcp", net.JoinHostPort(host, strconv.Itoa(port)))
		if err != nil {
			lastErr = err // in use, or drawn twice (held)
			return false
		}
		held = append(held, l)
		return true
	}
	from, to, ok := outsideEphemeral(n)
	if !ok {
		for range n {
			if !listen(0) {
				return nil, fmt.Errorf("loopport: no free port on %s: %w", host, lastErr)
			}
		}
	}
	for tries := 0; len(held) < n; tries++ {
		if tries == 100*n {
			return nil, fmt.Errorf("loopport: no free port on %s in %d tries between %d and %d (the last: %w)", host, tries, from, to, lastErr)
		}
		listen(from + rand.IntN(to-from))
	}
	ports := make([]int, n)
	for i, l := range held {
		ports[i] = l.Addr().(*net.TCPAddr).Port
	}
	return ports, nil
}

// outsideEphemeral is the range [from, to) to draw n ports from: below the
// kernel's ephemeral range, or above it, with room for 64 times as many.
func outsideEphemeral(n int) (from, to int, ok bool) {
	low, high := ephemeralRange()
	switch {
	case low-lowest >= 64*n:
		return lowest, low, true
	case highest-high >= 64*n:
		return high + 1, highest + 1, true
	}
	return 0, 0, false
}

// ephemeralRange is the kernel's ephemeral port range, or Linux's default
// when it cannot be read (other systems' start above it).
func ephemeralRange() (low, high int) {
	low, high = 32768, 60999
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return low, high
	}
	f := strings.Fields(string(b))
	if len(f) != 2 {
		return low, high
	}
	l, errL := strconv.Atoi(f[0])
	h, errH := strconv.Atoi(f[1])
	if errL != nil || errH != nil || l <= 0 || h < l {
		return low, high
	}
	return l, h
}
