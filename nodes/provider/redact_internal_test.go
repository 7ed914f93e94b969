package provider

import (
	"strings"
	"testing"
)

// What looks like a secret in a log tail is redacted; the rest of a line
// stays readable.
func TestRedactHidesSecretsAndKeepsTheRest(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{`{"level":"info","msg":"connected","password":"hunter2","host":"10.0.0.1"}`, `{"level":"info","msg":"connected","password":[redacted],"host":"10.0.0.1"}`},
		{`{"password": "correct horse battery"}`, `{"password": [redacted]}`},
		{`"body":"{\"password\":\"hunter2 x\"}"`, `"body":"{\"password\":[redacted]}"`},
		{`MINIO_ROOT_PASSWORD=s3cr3t-value started`, `MINIO_ROOT_PASSWORD=[redacted] started`},
		{`auth token: abc.def.ghi rejected`, `auth token: [redacted] rejected`},
		{`Authorization: Bearer eyJhbGciOi.x.y`, `Authorization: [redacted] [redacted]`},
		{`id token eyJhbGciOiJSUzI1NiJ9.eyJzdWIiOiJhIn0.c2ln expired`, `id token [redacted token] expired`},
		{`dial https://admin:pa55@10.0.0.2:9000/x failed`, `dial https://admin:[redacted]@10.0.0.2:9000/x failed`},
		{`dial https://admin:Zm9v/YmFy+c@q@h:9000 failed`, `dial https://admin:[redacted]@h:9000 failed`},
		{`api_key=ABCDEF, next`, `api_key=[redacted], next`},
		{`etcd --user root --password hunter2 --endpoints x`, `etcd --user root --password [redacted] --endpoints x`},
		{`<password>hunter2</password>`, `<password>[redacted]</password>`},
		{`X-ClickHouse-Key: abc123`, `X-ClickHouse-Key: [redacted]`},
		{`generated 3f9a1c0e5b7d2a4c6e8f0a1b3c5d7e9f0a2b4c6d`, `generated [redacted: a long encoded value]`},
		{"MIIEvQIBADANBgkqhkiG9w0BAQEFAASCBKcwggSjAgEAAoIBAQC7", "[redacted: a long encoded value]"},
		// What the services log and an operator needs stays.
		{`listening on 10.231.0.21:7443`, `listening on 10.231.0.21:7443`},
		{`etcd: member 8e9e05c52164694d is healthy`, `etcd: member 8e9e05c52164694d is healthy`},
		{`exec /srv/n1/opt/lockplane/bin/lockplane-node probe tcp`, `exec /srv/n1/opt/lockplane/bin/lockplane-node probe tcp`},
		{`{"msg":"waiting for this arbiter's SVID","socket":"unix:///run/spire/agent/public/api.sock"}`, `{"msg":"waiting for this arbiter's SVID","socket":"unix:///run/spire/agent/public/api.sock"}`},
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
