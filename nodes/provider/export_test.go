package provider

// SetArchiverPolicy replaces the archiver's policy until the returned
// func is called: the tests' broken variants.
func SetArchiverPolicy(f func(historyBucket, recordsBucket string, recordsYears int) []byte) (restore func()) {
	old := archiverPolicy
	archiverPolicy = f
	return func() { archiverPolicy = old }
}
