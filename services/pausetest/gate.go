package pausetest

import (
	"context"
	"net"
	"sync"
)

// gate counts the messages a resource sends (Write calls on any of its
// connections) and can stop the holder before the n-th, until opened.
type gate struct {
	mu     sync.Mutex
	writes int
	at     int           // stop before this write; 0: never
	open   chan struct{} // closed to let a stopped write go
	gated  func()        // called once when a write is stopped
}

// arm resets the count and stops before write n (0: never).
func (g *gate) arm(n int, gated func()) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.writes, g.at, g.open, g.gated = 0, n, make(chan struct{}), gated
}

func (g *gate) release() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.open != nil {
		select {
		case <-g.open:
		default:
			close(g.open)
		}
	}
}

func (g *gate) count() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.writes
}

func (g *gate) before() {
	g.mu.Lock()
	g.writes++
	stop := g.at != 0 && g.writes == g.at
	open, gated := g.open, g.gated
	g.mu.Unlock()
	if stop {
		gated()
		<-open
	}
}

func (g *gate) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	var d net.Dialer
	c, err := d.DialContext(ctx, network, addr)
	if err != nil {
		return nil, err
	}
	return &gatedConn{Conn: c, g: g}, nil
}

type gatedConn struct {
	net.Conn
	g *gate
}

func (c *gatedConn) Write(b []byte) (int, error) {
	c.g.before()
	return c.Conn.Write(b)
}
