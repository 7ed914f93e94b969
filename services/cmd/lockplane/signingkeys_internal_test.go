package main

import (
	"encoding/json"
	"strings"
	"testing"
)

// A destroy lifts the signing keys' protection (and nothing else's),
// keeping every other part of the state as it was.
func TestDestroyLiftsOnlyTheSigningKeysProtection(t *testing.T) {
	in := json.RawMessage(`{"manifest":{"time":"t"},"resources":[` +
		`{"urn":"k","type":"lockplane:nodes:SnapshotSigningKey","protect":true,"outputs":{"n":281474976710655}},` +
		`{"urn":"p","type":"lockplane:nodes:Password","protect":true}]}`)
	out, n, err := unprotectSigningKeys(in)
	if err != nil || n != 1 {
		t.Fatalf("cleared %d (%v), want 1", n, err)
	}
	var doc struct {
		Resources []map[string]any `json:"resources"`
	}
	if err := json.Unmarshal(out, &doc); err != nil {
		t.Fatal(err)
	}
	if _, ok := doc.Resources[0]["protect"]; ok || doc.Resources[1]["protect"] != true {
		t.Errorf("state after: %s", out)
	}
	if !strings.Contains(string(out), "281474976710655") {
		t.Errorf("a number was rewritten: %s", out)
	}
	if same, n, err := unprotectSigningKeys(json.RawMessage(`{"resources":[]}`)); err != nil || n != 0 || string(same) != `{"resources":[]}` {
		t.Errorf("a state without keys: %s, %d, %v", same, n, err)
	}
}
