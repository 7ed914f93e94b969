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
		if keyBody.MatchString(strings.TrimSpace(l)) {
			lines[i] = "[redacted: a long encoded value]"
			continue
		}
		l = jwt.ReplaceAllString(l, "[redacted token]")
		l = xmlSecret.ReplaceAllString(l, "${1}[redacted]")
		l = flagSecret.ReplaceAllString(l, "${1}[redacted]")
		l = bearer.ReplaceAllString(l, "${1}[redacted]")
		l = fieldSecret.ReplaceAllString(l, "${1}[redacted]")
		l = userinfo.ReplaceAllString(l, "${1}[redacted]@")
		lines[i] = longToken.ReplaceAllString(l, "[redacted: a long encoded value]")
	}
	return strings.Join(lines, "\n")
}

// secretName is a name whose value is a secret.
const secretName = `(?:password|passwd|passphrase|pass|pwd|secret|token|api[_-]?key|access[_-]?key|secret[_-]?key|private[_-]?key|credentials?|authorization|cookie|x-clickhouse-key|rootpass)`

var (
	// A private key, whole or cut off by the tail at either end.
	pemBlock = regexp.MustCompile(`(?s)-----BEGIN [A-Z0-9 ]*PRIVATE KEY-----.*?(-----END [A-Z0-9 ]*PRIVATE KEY-----|\z)|\A.*?-----END [A-Z0-9 ]*PRIVATE KEY-----`)
	// A line that is only base64, 40 characters or more: a key's body, a
	// certificate's middle.
	keyBody = regexp.MustCompile(`^[A-Za-z0-9+/=_-]{40,}$`)
	// A word of base64 or hex 32 characters or more without separators,
	// or 48 with dashes (base64url): a token, a generated password.
	longToken = regexp.MustCompile(`\b(?:[A-Za-z0-9+=_]{32,}|[A-Za-z0-9+=_-]{48,})\b`)
	jwt       = regexp.MustCompile(`\beyJ[A-Za-z0-9_-]{4,}\.[A-Za-z0-9_-]{4,}\.[A-Za-z0-9_-]*`)
	// <password>…</password>, as ClickHouse's configuration writes it.
	xmlSecret = regexp.MustCompile(`(?i)(<` + secretName + `[^>]*>)[^<]*`)
	// --password VALUE, -password=VALUE.
	flagSecret = regexp.MustCompile(`(?i)((?:^|\s)--?[A-Za-z0-9_.-]*` + secretName + `[A-Za-z0-9_.-]*[ =])("[^"]*"|'[^']*'|\S+)`)
	// name=value, name: value, "name":"value" and JSON escaped inside a
	// JSON string; a quoted value is hidden whole, spaces and all.
	fieldSecret = regexp.MustCompile(`(?i)(` + secretName + `[A-Za-z_-]*(?:\\?")?\s*[:=]\s*)(\\?"(?:[^"\\]|\\[^"])*\\?"|'[^']*'|[^\s",}]+)`)
	bearer      = regexp.MustCompile(`(?i)(\b(?:bearer|basic)\s+)[A-Za-z0-9._~+/=-]{8,}`)
	// user:password@ in a URL, to the last @ of the word.
	userinfo = regexp.MustCompile(`(://[^/\s:@]+:)\S*@`)
)
