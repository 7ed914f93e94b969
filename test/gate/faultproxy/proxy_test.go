package faultproxy_test

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/lockplane/lockplane/test/gate/faultproxy"
)

// echo serves HTTP that echoes the sender's X-Server-From.
func echo(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, "from "+r.Header.Get("X-Server-From"))
	})}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return ln.Addr().String()
}

func get(addr, from string, timeout time.Duration) (string, error) {
	c, err := net.DialTimeout("tcp", addr, timeout)
	if err != nil {
		return "", err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(timeout))
	fmt.Fprintf(c, "GET / HTTP/1.1\r\nHost: x\r\nX-Server-From: %s\r\nConnection: close\r\n\r\n", from)
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		return "", err
	}
	b, _ := io.ReadAll(resp.Body)
	return string(b), nil
}

func TestFaultsBySource(t *testing.T) {
	p, err := faultproxy.New("127.0.0.1:0", echo(t))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if got, err := get(p.Addr(), "a1", time.Second); err != nil || got != "from a1" {
		t.Fatalf("pass-through: %q %v (the peeked header must reach the target)", got, err)
	}

	// Blackhole one source: it stalls, another still flows.
	p.Set("a1", faultproxy.Fault{Blackhole: true})
	if _, err := get(p.Addr(), "a1", 300*time.Millisecond); err == nil {
		t.Fatal("a blackholed source got an answer")
	}
	if got, err := get(p.Addr(), "b2", time.Second); err != nil || got != "from b2" {
		t.Fatalf("another source: %q %v", got, err)
	}
	p.Heal()
	if got, err := get(p.Addr(), "a1", time.Second); err != nil || got != "from a1" {
		t.Fatalf("after heal: %q %v", got, err)
	}

	// Delay everyone.
	p.Set(faultproxy.Any, faultproxy.Fault{Delay: 150 * time.Millisecond})
	start := time.Now()
	if _, err := get(p.Addr(), "b2", 2*time.Second); err != nil {
		t.Fatal(err)
	}
	if took := time.Since(start); took < 150*time.Millisecond {
		t.Fatalf("delayed request took %s, want at least the 150ms delay", took)
	}

	// Drop: refused at once.
	p.Set(faultproxy.Any, faultproxy.Fault{Drop: true})
	if _, err := get(p.Addr(), "b2", time.Second); err == nil || strings.Contains(err.Error(), "timeout") {
		t.Fatalf("dropped: %v, want an immediate failure", err)
	}
}
