package main

import (
	"fmt"

	"github.com/lockplane/lockplane/services/audit/chstore"
	"github.com/lockplane/lockplane/services/internal/credfile"
)

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
	c, err := credfile.Read("--audit-credentials", f.auditCredentials, auditRoles...)
	if err != nil {
		return nil, nil, err
	}
	w, r := c["writer"], c["reader"]
	if w.User == r.User {
		return nil, nil, fmt.Errorf("--audit-credentials: %s: the writer and the reader are the same user %s: queries must run as a read-only user; want %s",
			f.auditCredentials, w.User, credfile.Rule(auditRoles...))
	}
	return chstore.New(base, f.auditDatabase, chstore.WithCredentials(w.User, w.Password)),
		chstore.New(base, f.auditDatabase, chstore.WithCredentials(r.User, r.Password)), nil
}
