package issuertrust

import (
	"strings"
	"testing"
	"time"

	"github.com/lockplane/lockplane/services/pki"
)

func TestHTTPClient(t *testing.T) {
	if _, err := HTTPClient([]byte("not a PEM"), 0); err == nil || !strings.Contains(err.Error(), "no certificate") {
		t.Errorf("junk PEM: %v", err)
	}
	ca, err := pki.NewCA("test CA", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	c, err := HTTPClient(ca.CertPEM, 0)
	if err != nil {
		t.Fatal(err)
	}
	if c.Timeout != DefaultTimeout {
		t.Errorf("timeout %v", c.Timeout)
	}
	// The system roots are the default; nothing else is set.
	sys, err := HTTPClient(nil, time.Second)
	if err != nil || sys.Timeout != time.Second {
		t.Fatalf("system-roots client: %v", err)
	}
}
