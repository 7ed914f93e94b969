package chstore

import (
	"encoding/hex"
	"strings"
	"testing"
)

func TestQuote(t *testing.T) {
	for in, want := range map[string]string{
		"":                  `''`,
		"payments/ledger/1": `'payments/ledger/1'`,
		`it's`:              `'it\'s'`,
		`back\slash`:        `'back\\slash'`,
		`\'`:                `'\\\''`,
		"new\nline\r\t\x00": `'new\x0Aline\x0D\x09\x00'`,
		"del\x7f é":         "'del\\x7F é'",
	} {
		if got := quote(in); got != want {
			t.Errorf("quote(%q) = %s, want %s", in, got, want)
		}
	}
}

// The server reads every quoted string back byte for byte: every byte
// value, and strings made to end a literal early.
func TestQuoteRoundTripsThroughClickHouse(t *testing.T) {
	s, ctx := fresh(t)
	var every strings.Builder
	for b := range 256 {
		every.WriteByte(byte(b))
	}
	for _, in := range []string{every.String(), `') OR 1=1 --`, `\' OR 1=1 --`, "x'\n; DROP DATABASE default; --", "é日本\\"} {
		rows, err := query[struct{ H string }](ctx, s, "SELECT hex("+quote(in)+") AS H")
		if err != nil {
			t.Fatalf("quote(%q): %v", in, err)
		}
		if want := strings.ToUpper(hex.EncodeToString([]byte(in))); len(rows) != 1 || rows[0].H != want {
			t.Errorf("quote(%q) read back as %v, want hex %s", in, rows, want)
		}
	}
}
