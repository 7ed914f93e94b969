// Package faultproxy is a userspace TCP proxy that injects network faults:
// the kernel here has no tc netem, so every member's peer and client
// traffic in the release gate passes through one of these.
//
// Faults are chosen per source. An etcd peer connection names its sender in
// the first request's X-Server-From header; the proxy reads it (and passes
// it on), so a proxy in front of member B can cut A -> B while C -> B flows:
// that is how one member is isolated or the cluster partitioned.
package faultproxy

import (
	"bufio"
	"bytes"
	"io"
	"net"
	"net/textproto"
	"sync"
	"time"
)

// Fault is what happens to a connection's bytes.
type Fault struct {
	// Blackhole stops forwarding in both directions; the connection stays
	// open, as across a partition, and is closed when the fault lifts.
	Blackhole bool
	// Delay holds every chunk this long before forwarding it.
	Delay time.Duration
	// Drop closes the connection, and every new one at once.
	Drop bool
}

// Any is the source a fault set for every connection is keyed by.
const Any = "*"

// Proxy forwards connections accepted on its address to a target.
type Proxy struct {
	ln     net.Listener
	target string

	mu     sync.Mutex
	faults map[string]Fault
	conns  map[*conn]bool
	closed bool
}

// New listens on listen ("127.0.0.1:0" for a free port) and forwards to
// target.
func New(listen, target string) (*Proxy, error) {
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		return nil, err
	}
	p := &Proxy{ln: ln, target: target, faults: map[string]Fault{}, conns: map[*conn]bool{}}
	go p.accept()
	return p, nil
}

// Addr is the proxy's address.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// Set applies f to connections from source (an etcd member ID in hex, as
// in X-Server-From, or Any).
func (p *Proxy) Set(source string, f Fault) {
	p.mu.Lock()
	p.faults[source] = f
	var drop []*conn
	for c := range p.conns {
		if f.Drop && (source == Any || c.source == source) {
			drop = append(drop, c)
		}
	}
	p.mu.Unlock()
	for _, c := range drop {
		c.close()
	}
	p.wake()
}

// Heal lifts every fault. Connections that were blackholed are closed, as
// a real partition's connections time out, so both sides reconnect.
func (p *Proxy) Heal() {
	p.mu.Lock()
	p.faults = map[string]Fault{}
	var stale []*conn
	for c := range p.conns {
		if c.held {
			stale = append(stale, c)
		}
	}
	p.mu.Unlock()
	for _, c := range stale {
		c.close()
	}
	p.wake()
}

// Close stops the proxy and its connections.
func (p *Proxy) Close() error {
	p.mu.Lock()
	p.closed = true
	cs := p.conns
	p.conns = map[*conn]bool{}
	p.mu.Unlock()
	for c := range cs {
		c.close()
	}
	return p.ln.Close()
}

func (p *Proxy) fault(source string) Fault {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.faultLocked(source)
}

// faultLocked is the fault for a source: its own, else the one for Any.
func (p *Proxy) faultLocked(source string) Fault {
	if f, ok := p.faults[source]; ok && source != "" {
		return f
	}
	return p.faults[Any]
}

func (p *Proxy) wake() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for c := range p.conns {
		c.cond.Broadcast()
	}
}

func (p *Proxy) accept() {
	for {
		in, err := p.ln.Accept()
		if err != nil {
			return
		}
		go p.serve(in)
	}
}

func (p *Proxy) serve(in net.Conn) {
	br := bufio.NewReaderSize(in, 64<<10)
	source := peekSource(in, br)
	if p.fault(source).Drop {
		in.Close()
		return
	}
	out, err := net.DialTimeout("tcp", p.target, 5*time.Second)
	if err != nil {
		in.Close()
		return
	}
	c := &conn{p: p, in: in, out: out, source: source}
	c.cond = sync.NewCond(&p.mu)
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		c.close()
		return
	}
	p.conns[c] = true
	p.mu.Unlock()
	go c.pump(br, out)
	go c.pump(out, in)
}

// peekSource reads, without consuming, the first request's headers and
// returns its X-Server-From; "" for anything that is not an etcd peer
// request (gRPC, or a protocol where the server speaks first).
func peekSource(c net.Conn, br *bufio.Reader) string {
	c.SetReadDeadline(time.Now().Add(200 * time.Millisecond))
	defer c.SetReadDeadline(time.Time{})
	for n := 512; n <= 16<<10; n *= 2 {
		b, err := br.Peek(n)
		if i := bytes.Index(b, []byte("\r\n\r\n")); i >= 0 {
			return headerFrom(b[:i+4])
		}
		if err != nil {
			return headerFrom(b)
		}
	}
	return ""
}

func headerFrom(b []byte) string {
	tp := textproto.NewReader(bufio.NewReader(bytes.NewReader(b)))
	if _, err := tp.ReadLine(); err != nil {
		return ""
	}
	h, _ := tp.ReadMIMEHeader()
	return h.Get("X-Server-From")
}

type conn struct {
	p       *Proxy
	in, out net.Conn
	source  string
	cond    *sync.Cond // on p.mu: a fault changed
	held    bool       // guarded by p.mu
	once    sync.Once
}

func (c *conn) close() {
	c.once.Do(func() {
		c.in.Close()
		c.out.Close()
		c.p.mu.Lock()
		delete(c.p.conns, c)
		c.cond.Broadcast()
		c.p.mu.Unlock()
	})
}

// pump copies one direction, consulting the fault before each chunk.
func (c *conn) pump(src io.Reader, dst net.Conn) {
	defer c.close()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			if !c.wait() {
				return
			}
			if d := c.p.fault(c.source).Delay; d > 0 {
				time.Sleep(d)
			}
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// wait blocks while the connection is blackholed; false once it is closed
// or dropped.
func (c *conn) wait() bool {
	c.p.mu.Lock()
	defer c.p.mu.Unlock()
	for {
		if !c.p.conns[c] {
			return false
		}
		switch f := c.p.faultLocked(c.source); {
		case f.Drop:
			return false
		case f.Blackhole:
			c.held = true
			c.cond.Wait()
		default:
			return true
		}
	}
}
