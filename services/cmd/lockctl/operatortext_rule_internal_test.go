package main

import (
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/lockplane/lockplane/services/internal/arbiter/admin"
)

// lockctl escapes every character the arbiter's operator-text rule names
// (admin.HiddenRune) and the combining marks past its run
// (admin.MaxCombiningRun), and nothing else but bytes that are not UTF-8:
// one rule, kept in one place.
func TestPrintableEscapesWhatTheRuleRefuses(t *testing.T) {
	for r := rune(0); r <= utf8.MaxRune; r++ {
		if r >= 0xd800 && r <= 0xdfff {
			continue
		}
		s := string(r)
		got := printable(s)
		if admin.HiddenRune(r) == (got == s) {
			t.Fatalf("U+%04X: HiddenRune %t, printed as %q", r, admin.HiddenRune(r), got)
		}
		if admin.HiddenRune(r) && strings.ContainsRune(got, r) {
			t.Fatalf("U+%04X printed raw: %q", r, got)
		}
		// A run of combining marks prints raw up to the rule's limit.
		if admin.CombiningMark(r) && !admin.HiddenRune(r) {
			run := strings.Repeat(s, admin.MaxCombiningRun)
			if got := printable(run + s); !strings.HasPrefix(got, run) || strings.Count(got, s) != admin.MaxCombiningRun {
				t.Fatalf("U+%04X: a run of %d printed as %q", r, admin.MaxCombiningRun+1, got)
			}
		}
	}
	if got := printable("a\xffb"); got != `a\xffb` {
		t.Fatalf("an invalid byte printed as %q", got)
	}
}
