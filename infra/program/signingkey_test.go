package program_test

import "testing"

// Every cluster's snapshot signing key is protected: a replacement (a
// renamed snapshot store host, a --target-replace) would make a new key and leave
// every snapshot signed by the old one unrestorable, so the engine
// refuses it; a rotation is deliberate (docs/dr.md).
func TestTheStoresSigningKeysAreProtected(t *testing.T) {
	m, err := run(t, "local-snapshots", func(c map[string]string) {
		localHosts(c)
		c["lockplane:snapshotStore"] = `{"regions":[{"region":"local","shards":1}]}`
	})
	if err != nil {
		t.Fatal(err)
	}
	keys := m.of("lockplane:nodes:SnapshotSigningKey")
	if len(keys) != 2 {
		t.Fatalf("%d SnapshotSigningKeys, want coord's and entity-0's", len(keys))
	}
	for _, k := range keys {
		if k.RegisterRPC == nil || !k.RegisterRPC.GetProtect() {
			t.Errorf("%s is not protected", k.Name)
		}
	}
}
