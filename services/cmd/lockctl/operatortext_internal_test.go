package main

import (
	"bytes"
	"slices"
	"strings"
	"testing"

	adminv1 "github.com/lockplane/lockplane/services/client/api/lockplane/admin/v1"
)

// Characters that print as nothing, break a line or reorder the text
// around them are escaped too: a reason cannot hide a warning or pass
// for another line (issue 32).
func TestPrintableEscapesFormatAndSeparatorCharacters(t *testing.T) {
	for _, c := range []struct {
		r    rune
		want string
	}{{0x200b, `\u200b`}, {0x2028, `\u2028`}, {0x2029, `\u2029`}, {0x200e, `\u200e`}, {0x200f, `\u200f`}, {0x061c, `\u061c`},
		{0x202a, `\u202a`}, {0x2066, `\u2066`}, {0xfeff, `\ufeff`}} {
		got := printable("a" + string(c.r) + "b")
		if strings.ContainsRune(got, c.r) || got != "a"+c.want+"b" {
			t.Errorf("printable(U+%04X) = %q, want %q", c.r, got, "a"+c.want+"b")
		}
	}
}

// Characters that print as nothing though Unicode calls them letters or
// symbols, private-use and unassigned ones, and combining marks past the
// rule's run are escaped as well, as \u or \U where Go would print them as
// they are (issue 32).
func TestPrintableEscapesInvisibleUnassignedAndPiledCharacters(t *testing.T) {
	for _, c := range []struct {
		r    rune
		want string
	}{{0x115f, `\u115f`}, {0x3164, `\u3164`}, {0xffa0, `\uffa0`}, {0xfe0f, `\ufe0f`}, {0xe0100, `\U000e0100`}, {0xe000, `\ue000`},
		{0x0378, `\u0378`}, {0x2800, `\u2800`}, {0x034f, `\u034f`}} {
		got := printable("a" + string(c.r) + "b")
		if strings.ContainsRune(got, c.r) || got != "a"+c.want+"b" {
			t.Errorf("printable(U+%04X) = %q, want %q", c.r, got, "a"+c.want+"b")
		}
	}
	pile := "e" + strings.Repeat("\u0301", 6) + "x\u0301"
	if got, want := printable(pile), "e"+strings.Repeat("\u0301", 4)+`\u0301\u0301`+"x\u0301"; got != want {
		t.Errorf("printable(%+q) = %+q, want %+q", pile, got, want)
	}
}

// A reason's newlines print as line breaks in a request's details, each
// line after the first indented and marked: a reason cannot draw a line
// that passes for lockctl's own, such as its state or a warning.
func TestPrintActionIndentsAReasonsContinuationLines(t *testing.T) {
	a := &adminv1.Action{Id: "0123456789abcdef0123", State: "pending", Reason: "routine\nstate    approved by mallory\nWARNING: none",
		Requester: &adminv1.Operator{Name: "mallory"}, ShardAdd: &adminv1.AddShardRequest{Shard: "b"},
		DecidedBy: &adminv1.Operator{Name: "bob"}, DecisionReason: "no\nexpires  never"}
	var b bytes.Buffer
	printAction(&b, a)
	out := b.String()
	var own []string
	for _, l := range strings.Split(strings.TrimSuffix(out, "\n"), "\n") {
		switch {
		case strings.HasPrefix(l, " "):
			if !strings.HasPrefix(strings.TrimLeft(l, " "), "| ") {
				t.Errorf("an indented line without its mark: %q", l)
			}
		default:
			own = append(own, strings.Fields(l)[0])
		}
	}
	if want := []string{"add", "requested", "reason", "state", "expires"}; !slices.Equal(own, want) {
		t.Fatalf("lockctl's own lines begin %v, want %v:\n%s", own, want, out)
	}
	for _, want := range []string{"| state    approved by mallory\n", "| WARNING: none\n", "| expires  never\n"} {
		if !strings.Contains(out, want) {
			t.Fatalf("output lacks %q:\n%s", want, out)
		}
	}
}
