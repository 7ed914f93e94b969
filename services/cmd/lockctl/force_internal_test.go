package main

import (
	"bytes"
	"strings"
	"testing"

	adminv1 "github.com/lockplane/lockplane/services/client/api/lockplane/admin/v1"
)

// A reason (or name) with terminal control characters is printed escaped:
// it cannot rewrite the lines before it, such as a warning.
func TestForcePrintEscapesControlCharacters(t *testing.T) {
	a := &adminv1.Action{Id: "0123456789abcdef0123", State: "pending", Reason: "ok\x1b[1A\x1b[2K\rall fine\u009b2K\u202e",
		Requester: &adminv1.Operator{Name: "mal\x07lory"}, Warnings: []string{"class adv of k is advisory"},
		Hold: &adminv1.HoldFacts{Key: "jobs/x", Class: "adv"}, DecidedBy: &adminv1.Operator{Name: "bob"}, DecisionReason: "no\rpe"}
	var b bytes.Buffer
	printAction(&b, a)
	out := b.String()
	for _, c := range []string{"\x1b", "\r", "\x07", "\u009b", "\u202e"} {
		if strings.Contains(out, c) {
			t.Fatalf("printed %q raw:\n%s", c, out)
		}
	}
	for _, want := range []string{`ok\x1b[1A\x1b[2K\rall fine\u009b2K\u202e`, `mal\alory`, `no\rpe`, "WARNING: class adv"} {
		if !strings.Contains(out, want) {
			t.Fatalf("output lacks %q:\n%s", want, out)
		}
	}
	if got := printable("two\nlines"); got != `two\nlines` {
		t.Fatalf("printable = %q", got)
	}
}
