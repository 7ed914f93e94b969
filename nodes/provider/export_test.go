package provider

import "context"

// SetArchiverPolicy replaces the archiver's policy until the returned
// func is called: the tests' broken variants.
func SetArchiverPolicy(f func(historyBucket, recordsBucket string, recordsYears int) []byte) (restore func()) {
	old := archiverPolicy
	archiverPolicy = f
	return func() { archiverPolicy = old }
}

// SetStorerPolicy replaces the snapshot store storers' policy until the
// returned func is called.
func SetStorerPolicy(f func(region, cluster string) []byte) (restore func()) {
	old := storerPolicy
	storerPolicy = f
	return func() { storerPolicy = old }
}

// ShardHead is a ShardRestore's read of the running shard's head revision.
func ShardHead(ctx context.Context, endpoints []string, caCertPem, certPem, keyPem string) (int64, error) {
	return (&ShardRestoreInputs{Endpoints: endpoints, CACertPem: caCertPem, CertPem: certPem, KeyPem: keyPem}).head(ctx)
}
