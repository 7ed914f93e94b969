package main

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/lockplane/lockplane/services/audit/chstore"
)

// auditCredentialsRule is the --audit-credentials file's format, as its
// errors and the flag's help state it.
const auditCredentialsRule = "a file readable by its owner only, with two lines `writer USER:PASSWORD` and `reader USER:PASSWORD` " +
	"(blank lines and lines starting with # are skipped)"

// auditAccount is one ClickHouse user of the audit store.
type auditAccount struct{ user, password string }

// auditCredentials are the store's two users: the writer the tailers and
// migrations use, the reader the admin API's audit queries use.
type auditCredentials struct{ writer, reader auditAccount }

// readAuditCredentials reads the --audit-credentials file. Its errors
// name the flag, the file and the line, never the line's text: it holds
// passwords.
func readAuditCredentials(path string) (auditCredentials, error) {
	var c auditCredentials
	bad := func(format string, a ...any) error {
		return fmt.Errorf("--audit-credentials: %s: %s; want %s", path, fmt.Sprintf(format, a...), auditCredentialsRule)
	}
	fi, err := os.Stat(path)
	if err != nil {
		return c, bad("cannot read it (%v)", errors.Unwrap(err))
	}
	// As ssh does with a private key: a password others can read is not one.
	if fi.Mode().Perm()&0o077 != 0 {
		return c, bad("mode %04o lets others read it (chmod 0600)", fi.Mode().Perm())
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return c, bad("cannot read it (%v)", errors.Unwrap(err))
	}
	seen := map[string]bool{}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		role, userPass, _ := strings.Cut(line, " ")
		user, password, ok := strings.Cut(strings.TrimSpace(userPass), ":")
		switch {
		case role != "writer" && role != "reader":
			return c, bad("line %d: starts with neither writer nor reader", n)
		case seen[role]:
			return c, bad("line %d: a second %s line", n, role)
		case !ok || user == "" || password == "":
			return c, bad("line %d: the %s is not USER:PASSWORD with both non-empty", n, role)
		}
		seen[role] = true
		if role == "writer" {
			c.writer = auditAccount{user, password}
		} else {
			c.reader = auditAccount{user, password}
		}
	}
	if err := sc.Err(); err != nil {
		return c, bad("%v", err)
	}
	for _, role := range []string{"writer", "reader"} {
		if !seen[role] {
			return c, bad("no %s line", role)
		}
	}
	if c.writer.user == c.reader.user {
		return c, bad("the writer and the reader are the same user %s: queries must run as a read-only user", c.writer.user)
	}
	return c, nil
}

// auditStores are the store at base as --audit-credentials' writer and
// reader; without the flag, both make requests with no credentials.
func (f flags) auditStores(base string) (writer, reader *chstore.Store, _ error) {
	if f.auditCredentials == "" {
		return chstore.New(base, f.auditDatabase), chstore.New(base, f.auditDatabase), nil
	}
	c, err := readAuditCredentials(f.auditCredentials)
	if err != nil {
		return nil, nil, err
	}
	return chstore.New(base, f.auditDatabase, chstore.WithCredentials(c.writer.user, c.writer.password)),
		chstore.New(base, f.auditDatabase, chstore.WithCredentials(c.reader.user, c.reader.password)), nil
}
