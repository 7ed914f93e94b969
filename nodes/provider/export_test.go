package provider

import "context"

// SetArchiverPolicy replaces the archiver's policy until the returned
// func is called: the tests' broken variants.
func SetArchiverPolicy(f func(historyBucket, recordsBucket string, recordsYears int) []byte) (restore func()) {
	old := archiverPolicy
	archiverPolicy = f
	return func() { archiverPolicy = old }
}

// SetVaultStorerPolicy replaces the vault storers' policy until the
// returned func is called.
func SetVaultStorerPolicy(f func(region, cluster string) []byte) (restore func()) {
	old := vaultStorerPolicy
	vaultStorerPolicy = f
	return func() { vaultStorerPolicy = old }
}

// ShardHead is a ShardRestore's read of the running shard's head revision.
func ShardHead(ctx context.Context, endpoints []string, caCertPem, certPem, keyPem string) (int64, error) {
	return (&ShardRestoreInputs{Endpoints: endpoints, CACertPem: caCertPem, CertPem: certPem, KeyPem: keyPem}).head(ctx)
}
