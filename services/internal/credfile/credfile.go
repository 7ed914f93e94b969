// Package credfile reads the credentials files the services are given:
// one line `ROLE USER:PASSWORD` per role, in a file only its owner may
// read. One format serves every store a service signs in to (etcd,
// ClickHouse, MinIO), so an operator learns it once.
package credfile

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
)

// Account is one role's user and password.
type Account struct{ User, Password string }

// Rule is the file's format for roles, as errors and flags' help state it.
func Rule(roles ...string) string {
	lines := make([]string, len(roles))
	for i, r := range roles {
		lines[i] = "`" + r + " USER:PASSWORD`"
	}
	return "a file readable by its owner only, with the lines " + strings.Join(lines, " and ") +
		" (blank lines and lines starting with # are skipped)"
}

// Read reads the credentials file of flag: one line `ROLE USER:PASSWORD`
// for each of roles. Its errors name the flag, the file and the line,
// never the line's text: it holds passwords.
func Read(flag, path string, roles ...string) (map[string]Account, error) {
	bad := func(format string, a ...any) error {
		return fmt.Errorf("%s: %s: %s; want %s", flag, path, fmt.Sprintf(format, a...), Rule(roles...))
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
	out := map[string]Account{}
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
		case !slices.Contains(roles, role):
			return nil, bad("line %d: starts with none of %s", n, strings.Join(roles, ", "))
		case seen:
			return nil, bad("line %d: a second %s line", n, role)
		case !ok || user == "" || password == "":
			return nil, bad("line %d: the %s is not USER:PASSWORD with both non-empty", n, role)
		}
		out[role] = Account{user, password}
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
