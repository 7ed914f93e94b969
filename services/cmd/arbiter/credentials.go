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

// account is one user of a store the arbiter logs in to.
type account struct{ user, password string }

// credentialsRule is a credentials file's format for roles, as its errors
// and the flags' help state it.
func credentialsRule(roles ...string) string {
	lines := make([]string, len(roles))
	for i, r := range roles {
		lines[i] = "`" + r + " USER:PASSWORD`"
	}
	return "a file readable by its owner only, with the lines " + strings.Join(lines, " and ") +
		" (blank lines and lines starting with # are skipped)"
}

// readCredentials reads the credentials file of flag: one line
// `ROLE USER:PASSWORD` for each of roles. Its errors name the flag, the
// file and the line, never the line's text: it holds passwords.
func readCredentials(flag, path string, roles ...string) (map[string]account, error) {
	bad := func(format string, a ...any) error {
		return fmt.Errorf("%s: %s: %s; want %s", flag, path, fmt.Sprintf(format, a...), credentialsRule(roles...))
	}
	fi, err := os.Stat(path)
	if err != nil {
		return nil, bad("cannot read it (%v)", errors.Unwrap(err))
	}
	// As ssh does with a private key: a password others can read is not one.
	if fi.Mode().Perm()&0o077 != 0 {
		return nil, bad("mode %04o lets others read it (chmod 0600)", fi.Mode().Perm())
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, bad("cannot read it (%v)", errors.Unwrap(err))
	}
	out := map[string]account{}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		role, userPass, _ := strings.Cut(line, " ")
		user, password, ok := strings.Cut(strings.TrimSpace(userPass), ":")
		_, seen := out[role]
		switch {
		case !contains(roles, role):
			return nil, bad("line %d: starts with none of %s", n, strings.Join(roles, ", "))
		case seen:
			return nil, bad("line %d: a second %s line", n, role)
		case !ok || user == "" || password == "":
			return nil, bad("line %d: the %s is not USER:PASSWORD with both non-empty", n, role)
		}
		out[role] = account{user, password}
	}
	if err := sc.Err(); err != nil {
		return nil, bad("%v", err)
	}
	for _, role := range roles {
		if _, ok := out[role]; !ok {
			return nil, bad("no %s line", role)
		}
	}
	return out, nil
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}

// auditRoles are the audit store's two users: the writer the tailers and
// migrations use, the reader the admin API's audit queries (and the
// archive) use.
var auditRoles = []string{"writer", "reader"}

// auditStores are the store at base as --audit-credentials' writer and
// reader; without the flag, both make requests with no credentials.
func (f flags) auditStores(base string) (writer, reader *chstore.Store, _ error) {
	if f.auditCredentials == "" {
		return chstore.New(base, f.auditDatabase), chstore.New(base, f.auditDatabase), nil
	}
	c, err := readCredentials("--audit-credentials", f.auditCredentials, auditRoles...)
	if err != nil {
		return nil, nil, err
	}
	w, r := c["writer"], c["reader"]
	if w.user == r.user {
		return nil, nil, fmt.Errorf("--audit-credentials: %s: the writer and the reader are the same user %s: queries must run as a read-only user; want %s",
			f.auditCredentials, w.user, credentialsRule(auditRoles...))
	}
	return chstore.New(base, f.auditDatabase, chstore.WithCredentials(w.user, w.password)),
		chstore.New(base, f.auditDatabase, chstore.WithCredentials(r.user, r.password)), nil
}
