// Package chstore keeps audit history in ClickHouse (Debian's 18.16) and
// answers the questions operators ask of it. It speaks ClickHouse's HTTP
// interface with net/http: the native protocol hangs against this server.
//
// Events are keyed by (cluster_id, revision, key) in a ReplacingMergeTree
// and every query reads with FINAL, so inserting the same events again (a
// tailer replaying after a restart) never shows them twice.
package chstore

import (
	"net/http"
	"time"
)

// MaxBatch is how many events one INSERT request carries at the most;
// Insert splits longer slices.
const MaxBatch = 10000

// MaxLimit bounds every query: a larger limit is lowered to it.
const MaxLimit = 10000

// Store is a ClickHouse database holding audit events. It is safe for
// concurrent use.
type Store struct {
	base     string // the HTTP interface, e.g. http://127.0.0.1:8123
	database string
	client   *http.Client
	user     string
	password string
	// now is where the cost report takes a session still open to have
	// renewed until; tests fix it.
	now func() time.Time
}

// Option configures a Store.
type Option func(*Store)

// WithHTTPClient replaces the default client (30 s timeout per request).
func WithHTTPClient(c *http.Client) Option { return func(s *Store) { s.client = c } }

// WithCredentials makes every request as this ClickHouse user.
func WithCredentials(user, password string) Option {
	return func(s *Store) { s.user, s.password = user, password }
}

// New returns a store of database at baseURL (the HTTP interface). It does
// not connect; Migrate creates the database and its tables.
func New(baseURL, database string, opts ...Option) *Store {
	s := &Store{base: baseURL, database: database, client: &http.Client{Timeout: 30 * time.Second}, now: time.Now}
	for _, o := range opts {
		o(s)
	}
	return s
}
