package admin

import (
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/lockplane/lockplane/services/internal/arbiter/refuse"
)

// The one rule for operators' free text: reasons for requests, denials
// and advances, one-person and two-person alike. Such text is kept in
// records and the audit archive and printed on the other operator's
// terminal, where a control character could move the cursor or rewrite
// lines, and an invisible or reordering character (Unicode format
// characters, line and paragraph separators) could hide a warning or pass
// for another line, and a pile of combining marks could cover the lines
// around it. lockctl escapes exactly the characters HiddenRune reports and
// the marks past MaxCombiningRun, so what the rule lets through prints as
// written; it indents the lines after a newline, so that text cannot pass
// for a line of lockctl's own.

// maxReason bounds operator text's length in bytes, kept in records and
// the archive.
const maxReason = 1024

// HiddenRune reports a character operator text may not hold (newline
// aside) and lockctl prints escaped: one that is not graphic (Go's
// unicode.IsGraphic: a C0 or C1 control or DEL (Cc); a format character
// (Cf: zero-width characters, direction marks, bidirectional embeddings,
// overrides and isolates, the byte order mark); a line or paragraph
// separator (Zl, Zp); private use (Co); or unassigned (Cn)); or one that
// prints as nothing though graphic: the other default-ignorable code
// points (the Hangul fillers U+115F, U+1160, U+3164 and U+FFA0, the
// combining grapheme joiner, the tag characters), variation selectors and
// the braille blank U+2800.
//
// Unassigned is as of the Unicode tables Go was built with (unicode.Version):
// a character assigned in a later edition is refused until lockplane is
// built with that edition, which errs on the side of what can be read.
func HiddenRune(r rune) bool {
	return !unicode.IsGraphic(r) || unicode.In(r, unicode.Other_Default_Ignorable_Code_Point, unicode.Variation_Selector) || r == brailleBlank
}

// brailleBlank is graphic (So) but prints as a blank.
const brailleBlank = 0x2800

// MaxCombiningRun is the most combining marks (Mn, Me) operator text may
// hold in a row: enough for any script's stacked diacritics, too few to
// pile marks over the lines above and below (lockctl escapes the rest).
const MaxCombiningRun = 4

// CombiningMark reports a character MaxCombiningRun counts.
func CombiningMark(r rune) bool { return unicode.In(r, unicode.Mn, unicode.Me) }

// hiddenKind names the class of a HiddenRune, for a refusal.
func hiddenKind(r rune) string {
	switch {
	case unicode.Is(unicode.Cc, r):
		return "control characters (C0, DEL, C1) other than newline"
	case unicode.In(r, unicode.Cf, unicode.Zl, unicode.Zp):
		return "Unicode format characters (Cf: zero-width, direction marks, bidirectional controls) or line or paragraph separators"
	case unicode.Is(unicode.Co, r):
		return "private-use characters (Co)"
	case !unicode.IsGraphic(r):
		return "unassigned characters (Cn, as of Unicode " + unicode.Version + ")"
	}
	return "characters that print as nothing (default-ignorable code points, variation selectors, the braille blank)"
}

// checkOperatorText applies the rule to field's text s: valid UTF-8, at
// most maxReason bytes, no HiddenRune but newline, and no more than
// MaxCombiningRun combining marks in a row. Empty text passes;
// requireReason is for a field that must say something.
func checkOperatorText(field, s string) error {
	if len(s) > maxReason {
		return refuse.InvalidArgument(field, fmt.Sprintf("is %d bytes; at most %d", len(s), maxReason))
	}
	if !utf8.ValidString(s) {
		return refuse.InvalidArgument(field, "must be valid UTF-8")
	}
	marks := 0
	for i, c := range s {
		if c != '\n' && HiddenRune(c) {
			return refuse.InvalidArgument(field, fmt.Sprintf("must not hold %s: U+%04X at byte %d", hiddenKind(c), c, i))
		}
		if CombiningMark(c) {
			marks++
		} else {
			marks = 0
		}
		if marks > MaxCombiningRun {
			return refuse.InvalidArgument(field, fmt.Sprintf("must not hold more than %d combining marks in a row: U+%04X at byte %d", MaxCombiningRun, c, i))
		}
	}
	return nil
}

// requireReason is the rule for a reason, which is required.
func requireReason(r string) error {
	if strings.TrimSpace(r) == "" {
		return refuse.InvalidArgument("reason", "is required: why, for the approver and the audit record")
	}
	return checkOperatorText("reason", r)
}
