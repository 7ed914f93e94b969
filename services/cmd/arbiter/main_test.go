package main

import (
	"log/slog"
	"strings"
	"testing"
)

// The production arbiter does not fail open on authorisation by omission.
func TestAnArbiterWithoutAPolicySetRefusesToStart(t *testing.T) {
	log := slog.New(slog.DiscardHandler)
	for _, tc := range []struct {
		f    flags
		want []string
	}{
		{flags{endpoints: "http://127.0.0.1:1"}, []string{"--policies", "--allow-any-workload"}},
		{flags{endpoints: "http://127.0.0.1:1", policies: "policies", allowAnyWorkload: true}, []string{"choose one"}},
	} {
		err := run(tc.f, log)
		if err == nil {
			t.Fatalf("%+v: started", tc.f)
		}
		for _, w := range tc.want {
			if !strings.Contains(err.Error(), w) {
				t.Fatalf("%+v: %v, want it to name %q", tc.f, err, w)
			}
		}
	}
}
