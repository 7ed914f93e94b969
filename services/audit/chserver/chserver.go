// Package chserver starts a local ClickHouse server for dev and tests.
//
// It runs Debian's clickhouse-server 18.16 on free loopback ports, with its
// configuration, data and logs under one directory: the audit store of `lockplane dev`
// and of the tests. Clients reach it through its HTTP interface, as one
// of the store's two users (WriterUser, ReaderUser) with the passwords
// Start makes.
package chserver

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/lockplane/lockplane/services/childproc"
	"github.com/lockplane/lockplane/services/loopport"
)

// Bin is where Debian's clickhouse-server package puts the server.
const Bin = "/usr/sbin/clickhouse-server"

// stopGrace is how long Stop lets the server shut down before killing it.
const stopGrace = 10 * time.Second

// Installed reports whether the server binary is installed.
func Installed() bool {
	fi, err := os.Stat(Bin)
	return err == nil && !fi.IsDir()
}

// Server is a running ClickHouse server.
type Server struct {
	url  string
	dir  string
	proc *childproc.Process
	// writerPassword and readerPassword are this run's, random.
	writerPassword, readerPassword string
}

// Start starts a server whose configuration, data and logs live under dir
// (created when missing; an earlier server's data there is kept), and
// returns once it answers /ping. Its users are the store's two, with new
// random passwords each start (Writer, Reader). ctx bounds the start only,
// 60 s when it has no deadline; the server runs until Stop.
func Start(ctx context.Context, dir string) (*Server, error) { return start(ctx, dir, Users) }

// start is Start with the users file made by users: tests give a broken
// one to show that their checks catch it.
func start(ctx context.Context, dir string, users func(Passwords, ...string) string) (*Server, error) {
	if !Installed() {
		return nil, fmt.Errorf("chserver: %s is not installed", Bin)
	}
	dir, err := filepath.Abs(dir)
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	ports, err := loopport.Reserve(3) // HTTP, native TCP, interserver
	if err != nil {
		return nil, err
	}
	config := filepath.Join(dir, "config.xml")
	if err := os.WriteFile(config, []byte(serverConfig(dir, ports)), 0o644); err != nil {
		return nil, err
	}
	writer, reader := randomPassword(), randomPassword()
	// 0600: the hashes are of random passwords, but no one else needs them.
	if err := os.WriteFile(filepath.Join(dir, "users.xml"),
		[]byte(users(Passwords{WriterSHA256: PasswordSHA256(writer), ReaderSHA256: PasswordSHA256(reader)})), 0o600); err != nil {
		return nil, err
	}
	out, err := os.Create(filepath.Join(dir, "stdout.log"))
	if err != nil {
		return nil, err
	}
	defer out.Close() // the child has its own descriptor
	s := &Server{url: fmt.Sprintf("http://127.0.0.1:%d", ports[0]), dir: dir,
		writerPassword: writer, readerPassword: reader}
	cmd := exec.Command(Bin, "--config-file="+config)
	cmd.Stdout, cmd.Stderr = out, out
	if s.proc, err = childproc.Start(cmd); err != nil {
		return nil, fmt.Errorf("chserver: %w", err)
	}
	if err := s.proc.Await(ctx, s.url+"/ping"); err != nil {
		s.Stop()
		return nil, fmt.Errorf("chserver: %v; see %s", err, filepath.Join(dir, "log"))
	}
	return s, nil
}

// URL is the base URL of the server's HTTP interface.
func (s *Server) URL() string { return s.url }

// Dir is the server's directory.
func (s *Server) Dir() string { return s.dir }

// Writer is the writer user and its password, for chstore.WithCredentials:
// the tailers' and the migrations' user.
func (s *Server) Writer() (user, password string) { return WriterUser, s.writerPassword }

// Reader is the read-only user and its password: the audit queries' user.
func (s *Server) Reader() (user, password string) { return ReaderUser, s.readerPassword }

// Stop asks the server to shut down, kills it if it has not within a few
// seconds, and returns once it has exited. Its directory stays.
func (s *Server) Stop() { s.proc.Stop(stopGrace) }

// serverConfig is the server configuration: the few settings of
// /etc/clickhouse-server/config.xml a single local server needs, every
// port on loopback and every path under dir.
func serverConfig(dir string, ports []int) string {
	return fmt.Sprintf(`<?xml version="1.0"?>
<yandex>
    <logger>
        <level>warning</level>
        <log>%[1]s/log/server.log</log>
        <errorlog>%[1]s/log/server.err.log</errorlog>
        <size>10M</size>
        <count>1</count>
    </logger>
    <listen_host>127.0.0.1</listen_host>
    <http_port>%[2]d</http_port>
    <tcp_port>%[3]d</tcp_port>
    <interserver_http_port>%[4]d</interserver_http_port>
    <interserver_http_host>127.0.0.1</interserver_http_host>
    <max_concurrent_queries>100</max_concurrent_queries>
    <mark_cache_size>268435456</mark_cache_size>
    <path>%[1]s/data/</path>
    <tmp_path>%[1]s/tmp/</tmp_path>
    <user_files_path>%[1]s/user_files/</user_files_path>
    <format_schema_path>%[1]s/format_schemas/</format_schema_path>
    <users_config>users.xml</users_config>
    <default_profile>default</default_profile>
    <default_database>default</default_database>
    <timezone>UTC</timezone>
    <mlock_executable>false</mlock_executable>
</yandex>
`, dir, ports[0], ports[1], ports[2])
}

// The store's users. There is no `default` user: ClickHouse refuses a
// request without credentials ("Unknown user default").
const (
	// WriterUser creates the database and tables (migrations) and inserts
	// events (the tailers).
	WriterUser = "lockplane"
	// ReaderUser answers the audit queries and reports. Its profile is
	// readonly 2: no INSERT, DDL or change of readonly, but the query
	// settings chstore sends (max_execution_time and the like) are
	// allowed; readonly 1 would refuse those and every query with them.
	ReaderUser = "lockplane_reader"
)

// Passwords are the users' passwords as users.xml keeps them: the SHA-256
// of each, in hex (PasswordSHA256), so the file holds no password.
type Passwords struct{ WriterSHA256, ReaderSHA256 string }

// PasswordSHA256 is password as users.xml's password_sha256_hex wants it.
func PasswordSHA256(password string) string {
	sum := sha256.Sum256([]byte(password))
	return hex.EncodeToString(sum[:])
}

// randomPassword is 32 random bytes in hex.
func randomPassword() string {
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		panic("chserver: no randomness: " + err.Error())
	}
	return hex.EncodeToString(b)
}

// Users is a users.xml with the store's two users, WriterUser and
// ReaderUser, each with its password's hash, let in from loopback and
// from the given addresses or networks only.
func Users(p Passwords, clients ...string) string {
	var nets strings.Builder
	for _, c := range append([]string{"127.0.0.1", "::1"}, clients...) {
		fmt.Fprintf(&nets, "<ip>%s</ip>", c)
	}
	return fmt.Sprintf(`<?xml version="1.0"?>
<yandex>
    <profiles>
        <default></default>
        <reader><readonly>2</readonly></reader>
    </profiles>
    <users>
        <%[1]s>
            <password_sha256_hex>%[2]s</password_sha256_hex>
            <networks>%[5]s</networks>
            <profile>default</profile>
            <quota>default</quota>
        </%[1]s>
        <%[3]s>
            <password_sha256_hex>%[4]s</password_sha256_hex>
            <networks>%[5]s</networks>
            <profile>reader</profile>
            <quota>default</quota>
        </%[3]s>
    </users>
    <quotas><default></default></quotas>
</yandex>
`, WriterUser, p.WriterSHA256, ReaderUser, p.ReaderSHA256, nets.String())
}
