// Package remote runs commands on a host and puts files on it, over SSH
// with SFTP. A host's key is checked against the key the stack pins; an
// unknown key is refused unless the stack explicitly trusts on first use.
package remote

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/pkg/sftp"
	"golang.org/x/crypto/ssh"
)

// Target is how to reach a host.
type Target struct {
	Host string `json:"host"`
	Port int    `json:"port,omitempty"`
	User string `json:"user,omitempty"`
	// PrivateKey is the client key, OpenSSH or PKCS#8 PEM. A secret.
	PrivateKey string `json:"privateKey"`
	// HostKey is the host's pinned public key, authorized_keys form.
	HostKey string `json:"hostKey,omitempty"`
	// TrustOnFirstUse accepts whatever key the host shows when none is
	// pinned. Never the default.
	TrustOnFirstUse bool `json:"trustOnFirstUse,omitempty"`
}

// Validate names the first field that is wrong.
func (t Target) Validate() error {
	switch {
	case t.Host == "":
		return errors.New("connection.host: is required")
	case t.Port < 0 || t.Port > 65535:
		return fmt.Errorf("connection.port: %d is not a TCP port", t.Port)
	case t.PrivateKey == "":
		return errors.New("connection.privateKey: is required")
	case t.HostKey == "" && !t.TrustOnFirstUse:
		return fmt.Errorf("connection.hostKey: %s has no pinned host key; pin it, or set trustOnFirstUse", t.Host)
	}
	if t.HostKey != "" {
		if _, _, _, _, err := ssh.ParseAuthorizedKey([]byte(t.HostKey)); err != nil {
			return fmt.Errorf("connection.hostKey: not an SSH public key in authorized_keys form: %v", err)
		}
	}
	if _, err := ssh.ParsePrivateKey([]byte(t.PrivateKey)); err != nil {
		return fmt.Errorf("connection.privateKey: not a readable unencrypted private key: %v", err)
	}
	return nil
}

func (t Target) addr() string {
	port := t.Port
	if port == 0 {
		port = 22
	}
	return net.JoinHostPort(t.Host, strconv.Itoa(port))
}

func (t Target) user() string {
	if t.User == "" {
		return "root"
	}
	return t.User
}

// ErrHostKey means the host showed a key other than the pinned one.
var ErrHostKey = errors.New("remote: host key mismatch")

// Pool keeps one connection per target, shared by every resource on it.
type Pool struct {
	mu    sync.Mutex
	conns map[string]*Conn
}

// Dial returns a connection to t, reusing a live one.
func (p *Pool) Dial(ctx context.Context, t Target) (*Conn, error) {
	if err := t.Validate(); err != nil {
		return nil, err
	}
	id := t.user() + "@" + t.addr() + " " + t.HostKey + fmt.Sprint(sha256.Sum256([]byte(t.PrivateKey)))
	p.mu.Lock()
	defer p.mu.Unlock()
	if c, ok := p.conns[id]; ok {
		if _, _, err := c.client.SendRequest("keepalive@lockplane", true, nil); err == nil {
			return c, nil
		}
		c.Close()
		delete(p.conns, id)
	}
	c, err := dial(ctx, t)
	if err != nil {
		return nil, err
	}
	if p.conns == nil {
		p.conns = map[string]*Conn{}
	}
	p.conns[id] = c
	return c, nil
}

// Close closes every connection.
func (p *Pool) Close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for id, c := range p.conns {
		c.Close()
		delete(p.conns, id)
	}
}

// Conn is a connection to one host.
type Conn struct {
	t      Target
	client *ssh.Client
	// SeenHostKey is the key the host showed, authorized_keys form.
	SeenHostKey string
	sftpOnce    sync.Once
	sftp        *sftp.Client
	sftpErr     error
}

func dial(ctx context.Context, t Target) (*Conn, error) {
	signer, err := ssh.ParsePrivateKey([]byte(t.PrivateKey))
	if err != nil {
		return nil, fmt.Errorf("connection.privateKey: %v", err)
	}
	c := &Conn{t: t}
	check := func(_ string, _ net.Addr, key ssh.PublicKey) error {
		c.SeenHostKey = strings.TrimSpace(string(ssh.MarshalAuthorizedKey(key)))
		if t.HostKey == "" && t.TrustOnFirstUse {
			return nil
		}
		pinned, _, _, _, err := ssh.ParseAuthorizedKey([]byte(t.HostKey))
		if err != nil {
			return err
		}
		if !bytes.Equal(pinned.Marshal(), key.Marshal()) {
			return fmt.Errorf("%w: %s showed %s %s, the stack pins %s %s: refusing to connect",
				ErrHostKey, t.Host, key.Type(), ssh.FingerprintSHA256(key), pinned.Type(), ssh.FingerprintSHA256(pinned))
		}
		return nil
	}
	d := net.Dialer{Timeout: 10 * time.Second}
	nc, err := d.DialContext(ctx, "tcp", t.addr())
	if err != nil {
		return nil, fmt.Errorf("ssh %s: %w", t.addr(), err)
	}
	sc, chans, reqs, err := ssh.NewClientConn(nc, t.addr(), &ssh.ClientConfig{
		User: t.user(), Auth: []ssh.AuthMethod{ssh.PublicKeys(signer)}, HostKeyCallback: check, Timeout: 10 * time.Second,
	})
	if err != nil {
		nc.Close()
		return nil, fmt.Errorf("ssh %s: %w", t.addr(), err)
	}
	c.client = ssh.NewClient(sc, chans, reqs)
	return c, nil
}

// Close closes the connection.
func (c *Conn) Close() error {
	if c.sftp != nil {
		c.sftp.Close()
	}
	return c.client.Close()
}

// Host is the address the connection reaches.
func (c *Conn) Host() string { return c.t.Host }

// ExitError is a command that ran and failed.
type ExitError struct {
	Host, Script string
	Status       int
	Stderr       string
}

func (e *ExitError) Error() string {
	return fmt.Sprintf("%s: `%s` exited %d: %s", e.Host, firstLine(e.Script), e.Status, strings.TrimSpace(e.Stderr))
}

func firstLine(s string) string {
	s, _, _ = strings.Cut(strings.TrimSpace(s), "\n")
	if len(s) > 120 {
		s = s[:120] + "..."
	}
	return s
}

// Run runs script with sh -e on the host and returns its standard output.
// Cancelling ctx closes the session.
func (c *Conn) Run(ctx context.Context, script string) (string, error) {
	s, err := c.client.NewSession()
	if err != nil {
		return "", fmt.Errorf("%s: new session: %w", c.t.Host, err)
	}
	defer s.Close()
	var stdout, stderr bytes.Buffer
	s.Stdout, s.Stderr = &stdout, &stderr
	s.Stdin = strings.NewReader(script)
	done := make(chan error, 1)
	go func() { done <- s.Run("sh -e -s") }()
	select {
	case err = <-done:
	case <-ctx.Done():
		s.Signal(ssh.SIGKILL)
		s.Close()
		return "", fmt.Errorf("%s: `%s`: %w", c.t.Host, firstLine(script), ctx.Err())
	}
	var exit *ssh.ExitError
	if errors.As(err, &exit) {
		return stdout.String(), &ExitError{Host: c.t.Host, Script: script, Status: exit.ExitStatus(), Stderr: stderr.String()}
	}
	if err != nil {
		return stdout.String(), fmt.Errorf("%s: `%s`: %w", c.t.Host, firstLine(script), err)
	}
	return stdout.String(), nil
}

// DialUnix connects to a unix socket on the host through the SSH
// connection (sshd's streamlocal forwarding), e.g. a server's admin API
// that listens on the host only. ctx bounds the dial.
func (c *Conn) DialUnix(ctx context.Context, socket string) (net.Conn, error) {
	type result struct {
		conn net.Conn
		err  error
	}
	done := make(chan result, 1)
	go func() {
		nc, err := c.client.Dial("unix", socket)
		done <- result{nc, err}
	}()
	select {
	case r := <-done:
		if r.err != nil {
			return nil, fmt.Errorf("%s: unix socket %s: %w", c.t.Host, socket, r.err)
		}
		return r.conn, nil
	case <-ctx.Done():
		go func() {
			if r := <-done; r.conn != nil {
				r.conn.Close()
			}
		}()
		return nil, fmt.Errorf("%s: unix socket %s: %w", c.t.Host, socket, ctx.Err())
	}
}

// Sha256 is the hex SHA-256 of a file on the host, or "" if it is absent.
func (c *Conn) Sha256(ctx context.Context, p string) (string, error) {
	out, err := c.Run(ctx, fmt.Sprintf("if [ -f %[1]s ]; then sha256sum %[1]s; fi", Quote(p)))
	if err != nil {
		return "", err
	}
	sum, _, _ := strings.Cut(strings.TrimSpace(out), " ")
	return sum, nil
}

func (c *Conn) sftpClient() (*sftp.Client, error) {
	c.sftpOnce.Do(func() {
		c.sftp, c.sftpErr = sftp.NewClient(c.client, sftp.UseConcurrentWrites(true), sftp.MaxConcurrentRequestsPerFile(64))
	})
	return c.sftp, c.sftpErr
}

// Put writes data to p with mode, unless the file there already has the
// same SHA-256. It writes a temporary file and renames it, so a reader
// never sees half a file. sent reports whether anything was uploaded.
func (c *Conn) Put(ctx context.Context, p string, data io.ReadSeeker, sum string, mode os.FileMode) (sent bool, err error) {
	have, err := c.Sha256(ctx, p)
	if err != nil {
		return false, err
	}
	if have == sum {
		_, err := c.Run(ctx, fmt.Sprintf("chmod %o %s", mode.Perm(), Quote(p)))
		return false, err
	}
	sc, err := c.sftpClient()
	if err != nil {
		return false, fmt.Errorf("%s: sftp: %w", c.t.Host, err)
	}
	if err := sc.MkdirAll(path.Dir(p)); err != nil {
		return false, fmt.Errorf("%s: mkdir %s: %w", c.t.Host, path.Dir(p), err)
	}
	tmp := fmt.Sprintf("%s.lockplane-%d", p, time.Now().UnixNano())
	f, err := sc.OpenFile(tmp, os.O_CREATE|os.O_TRUNC|os.O_WRONLY)
	if err != nil {
		return false, fmt.Errorf("%s: create %s: %w", c.t.Host, tmp, err)
	}
	h := sha256.New()
	if _, err := f.ReadFrom(io.TeeReader(data, h)); err != nil {
		f.Close()
		sc.Remove(tmp)
		return false, fmt.Errorf("%s: write %s: %w", c.t.Host, p, err)
	}
	if err := f.Close(); err != nil {
		sc.Remove(tmp)
		return false, err
	}
	if got := hex.EncodeToString(h.Sum(nil)); got != sum {
		sc.Remove(tmp)
		return false, fmt.Errorf("%s: %s: the source changed while it was sent (sha256 %s, expected %s)", c.t.Host, p, got, sum)
	}
	if err := sc.Chmod(tmp, mode.Perm()); err != nil {
		sc.Remove(tmp)
		return false, err
	}
	if err := sc.PosixRename(tmp, p); err != nil {
		sc.Remove(tmp)
		return false, fmt.Errorf("%s: rename into %s: %w", c.t.Host, p, err)
	}
	return true, nil
}

// Quote quotes s for a POSIX shell.
func Quote(s string) string {
	if s != "" && strings.Trim(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789/._-=:,+@%") == "" {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// QuoteAll quotes each word and joins them with spaces.
func QuoteAll(words []string) string {
	q := make([]string, len(words))
	for i, w := range words {
		q[i] = Quote(w)
	}
	return strings.Join(q, " ")
}
