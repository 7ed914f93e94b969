package provider

import (
	"strings"
	"testing"
)

// What looks like a secret in a log tail is redacted; the rest of a line
// stays readable.
func TestRedactHidesSecretsAndKeepsTheRest(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{`{"level":"info","msg":"connected","password":"hunter2","host":"10.0.0.1"}`, `{"level":"info","msg":"connected","password":"[redacted]","host":"10.0.0.1"}`},
		{`MINIO_ROOT_PASSWORD=s3cr3t-value started`, `MINIO_ROOT_PASSWORD=[redacted] started`},
		{`auth token: abc.def.ghi rejected`, `auth token: [redacted] rejected`},
		{`Authorization: Bearer eyJhbGciOi.x.y`, `Authorization: [redacted] [redacted]`},
		{`dial https://admin:pa55@10.0.0.2:9000/x failed`, `dial https://admin:[redacted]@10.0.0.2:9000/x failed`},
		{`api_key=ABCDEF, next`, `api_key=[redacted], next`},
		{`listening on 10.231.0.21:7443`, `listening on 10.231.0.21:7443`},
		{`etcd: member 8e9e05c52164694d is healthy`, `etcd: member 8e9e05c52164694d is healthy`},
		{"MIIEvQIBADANBgkqhkiG9w0BAQEFAASCBKcwggSjAgEAAoIBAQC7", "[redacted: a long encoded value]"},
	} {
		if got := redact(tc.in); got != tc.want {
			t.Errorf("redact(%q)\n got %q\nwant %q", tc.in, got, tc.want)
		}
	}
}

// A private key is hidden whole, even when the tail cut it at either end.
func TestRedactHidesAPrivateKeyCutByTheTail(t *testing.T) {
	for _, in := range []string{
		"before\n-----BEGIN PRIVATE KEY-----\nMIIB\nabc\n-----END PRIVATE KEY-----\nafter",
		"before\n-----BEGIN EC PRIVATE KEY-----\nMIIB\nabc",
		"MIIB\nabc\n-----END RSA PRIVATE KEY-----\nafter",
	} {
		got := redact(in)
		if strings.Contains(got, "MIIB") || strings.Contains(got, "abc") || !strings.Contains(got, "[redacted private key]") {
			t.Errorf("redact(%q) = %q", in, got)
		}
	}
}
