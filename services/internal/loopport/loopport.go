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

// lowest is the bottom of the range ports are drawn from; the top is just
// below the kernel's ephemeral range.
const lowest = 10000

// Reserve returns n distinct TCP ports that were free on 127.0.0.1 a
// moment ago, for servers to bind. They are drawn at random from below the
// kernel's ephemeral range, which bind to port 0 and outgoing connections
// take from: between the check and the server's bind, only another process
// drawing the same port at random can take one, and a server restarted on
// its port finds it free.
func Reserve(n int) ([]int, error) {
	top := ephemeralLow()
	if top-lowest < 64*n {
		return nil, fmt.Errorf("loopport: the ephemeral range starts at %d, leaving too few ports below it", top)
	}
	var held []net.Listener
	defer func() {
		for _, l := range held {
			l.Close()
		}
	}()
	ports := make([]int, 0, n)
	for tries := 0; len(ports) < n; tries++ {
		if tries == 100*n {
			return nil, fmt.Errorf("loopport: no free port found in %d tries between %d and %d", tries, lowest, top)
		}
		port := lowest + rand.IntN(top-lowest)
		l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
		if err != nil {
			continue // in use, or drawn twice (held)
		}
		held = append(held, l)
		ports = append(ports, port)
	}
	return ports, nil
}

// ephemeralLow is the first port of the kernel's ephemeral range, or
// Linux's default when it cannot be read.
func ephemeralLow() int {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err == nil {
		if f := strings.Fields(string(b)); len(f) == 2 {
			if low, err := strconv.Atoi(f[0]); err == nil && low > 0 {
				return low
			}
		}
	}
	return 32768
}
