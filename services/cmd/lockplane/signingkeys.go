package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"

	"github.com/pulumi/pulumi/sdk/v3/go/auto"
)

// signingKeyType is the store stack's per-cluster snapshot signing key,
// protected in the state so that no up replaces it by accident.
const signingKeyType = "lockplane:nodes:SnapshotSigningKey"

// releaseSigningKeys lifts the protection of a store stack's signing
// keys before a destroy, which is the one deliberate way to drop them:
// a protected resource fails every destroy. It says so, since snapshots
// signed by a forgotten key can no longer be restored.
func releaseSigningKeys(ctx context.Context, s auto.Stack) error {
	state, err := s.Export(ctx)
	if err != nil {
		return fmt.Errorf("read the stack's state: %w", err)
	}
	edited, n, err := unprotectSigningKeys(state.Deployment)
	if err != nil || n == 0 {
		return err
	}
	fmt.Fprintf(os.Stderr, "destroy forgets the snapshot store's %d snapshot signing key(s): snapshots signed by them can no longer be restored (docs/dr.md, \"Rotating a signing key\")\n", n)
	state.Deployment = edited
	if err := s.Import(ctx, state); err != nil {
		return fmt.Errorf("lift the signing keys' protection: %w", err)
	}
	return nil
}

// unprotectSigningKeys is deployment with every signing key's protect
// flag cleared, and how many it cleared; numbers are kept as written.
func unprotectSigningKeys(deployment json.RawMessage) (json.RawMessage, int, error) {
	if len(deployment) == 0 {
		return deployment, 0, nil
	}
	d := json.NewDecoder(bytes.NewReader(deployment))
	d.UseNumber()
	var doc map[string]any
	if err := d.Decode(&doc); err != nil {
		return nil, 0, fmt.Errorf("the stack's state: %w", err)
	}
	rs, _ := doc["resources"].([]any)
	n := 0
	for _, r := range rs {
		m, _ := r.(map[string]any)
		if m["type"] == signingKeyType && m["protect"] == true {
			delete(m, "protect")
			n++
		}
	}
	if n == 0 {
		return deployment, 0, nil
	}
	out, err := json.Marshal(doc)
	return out, n, err
}
