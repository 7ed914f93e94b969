package admin

import (
	"strings"
	"testing"

	lockv1 "github.com/lockplane/lockplane/services/client/api/lockplane/lock/v1"
	"github.com/lockplane/lockplane/services/client/reason"
)

// Characters that print as nothing though Unicode calls them letters or
// symbols, private-use and unassigned characters, and a pile of combining
// marks are refused in operator text like the control and format
// characters (issue 32); ordinary text, accents and newlines pass.
func TestOperatorTextRefusesInvisibleUnassignedAndPiledCharacters(t *testing.T) {
	for _, bad := range []string{
		"hangul\u115ffiller", "hangul\u1160filler", "hangul\u3164filler", "half\uffa0width", "cgj\u034fjoin",
		"vs\ufe0fsixteen", "vs\U000e0100seventeen", "tag\U000e0041s", "private\ue000use", "private\U000f0000use",
		"unassigned\u0378", "unassigned\U0001fffe", "braille\u2800blank",
		"pile e" + strings.Repeat("\u0301", MaxCombiningRun+1), "enclosing" + strings.Repeat("\u20dd", MaxCombiningRun+1),
	} {
		err := checkOperatorText("reason", bad)
		if reason.Of(err) != lockv1.ErrorReason_INVALID_ARGUMENT || !strings.Contains(err.Error(), "reason") {
			t.Errorf("reason %+q: %v, want INVALID_ARGUMENT naming reason", bad, err)
		}
	}
	for _, ok := range []string{"drill: two\nlines, ünïcode", "e" + strings.Repeat("\u0301", MaxCombiningRun) + " then more\u0301", "日本語 العربية ✓ 🙂", "no\u00a0break"} {
		if err := checkOperatorText("reason", ok); err != nil {
			t.Errorf("reason %+q: %v, want it to pass", ok, err)
		}
	}
}
