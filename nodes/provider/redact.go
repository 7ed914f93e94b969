package provider

import (
	"regexp"
	"strings"
)

// redact is text from a host (a probe's output, a service's log tail)
// with what looks like a secret replaced by [redacted], before it reaches
// Pulumi's diagnostics and CI logs. No service logs a secret today; this
// keeps it so if one ever does. It errs towards hiding: a readable error
// matters less than a leaked credential.
func redact(text string) string {
	text = pemBlock.ReplaceAllString(text, "[redacted private key]")
	lines := strings.Split(text, "\n")
	for i, l := range lines {
		if blob.MatchString(strings.TrimSpace(l)) {
			lines[i] = "[redacted: a long encoded value]"
			continue
		}
		l = bearer.ReplaceAllString(l, "${1}[redacted]")
		l = secretField.ReplaceAllString(l, "${1}[redacted]")
		lines[i] = userinfo.ReplaceAllString(l, "${1}[redacted]@")
	}
	return strings.Join(lines, "\n")
}

var (
	// A private key, whole or cut off by the tail at either end.
	pemBlock = regexp.MustCompile(`(?s)-----BEGIN [A-Z0-9 ]*PRIVATE KEY-----.*?(-----END [A-Z0-9 ]*PRIVATE KEY-----|\z)|\A.*?-----END [A-Z0-9 ]*PRIVATE KEY-----`)
	// A line that is only base64 or hex, 40 characters or more: a key's
	// body, a token, a certificate's middle.
	blob = regexp.MustCompile(`^[A-Za-z0-9+/=_-]{40,}$`)
	// name=value, name: value and "name":"value" for names of secrets;
	// the value ends at a space, quote, comma or brace.
	secretField = regexp.MustCompile(`(?i)((?:password|passwd|pwd|secret|token|api[_-]?key|access[_-]?key|secret[_-]?key|private[_-]?key|credentials?|authorization|cookie)[A-Za-z_-]*"?\s*[:=]\s*"?)[^\s",}]+`)
	bearer      = regexp.MustCompile(`(?i)(\b(?:bearer|basic)\s+)[A-Za-z0-9._~+/=-]+`)
	// user:password@ in a URL.
	userinfo = regexp.MustCompile(`(://[^/\s:@]+:)[^/\s@]+@`)
)
