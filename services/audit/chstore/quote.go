package chstore

import (
	"fmt"
	"strings"
)

// quote returns s as a ClickHouse string literal. ClickHouse 18.16 has no
// query parameters, so every value reaches SQL through here: backslash and
// quote are escaped, and every control byte is written as \xHH so a
// literal is always one line of printable text.
func quote(s string) string {
	var b strings.Builder
	b.WriteByte('\'')
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c == '\\' || c == '\'':
			b.WriteByte('\\')
			b.WriteByte(c)
		case c < 0x20 || c == 0x7f:
			fmt.Fprintf(&b, `\x%02X`, c)
		default:
			b.WriteByte(c)
		}
	}
	b.WriteByte('\'')
	return b.String()
}
