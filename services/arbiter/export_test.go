package arbiter

import "time"

// EncodeHold is a hold record exactly as a grant writes it, for tests that
// forge one straight into etcd as a rogue writer with etcd credentials
// would.
func EncodeHold(identity string, session int64, class string, since time.Time) string {
	return holdRecord{Identity: identity, Session: session, Class: class, Since: since}.encode()
}
