package caller

import (
	"strings"
	"testing"
)

func TestAForwardedCertificateNamesOneSPIFFEID(t *testing.T) {
	for _, c := range []struct{ xfcc, want, err string }{
		{`Hash=ab12;URI=spiffe://td/ns/a/sa/b`, "spiffe://td/ns/a/sa/b", ""},
		{`By=spiffe://td/envoy;Hash=ab12;Subject="CN=x, O=y";URI=spiffe://td/ns/a/sa/b`, "spiffe://td/ns/a/sa/b", ""},
		{`Hash=ab12;URI=spiffe://td/a,Hash=cd34;URI=spiffe://td/b`, "", "2 certificates are forwarded"},
		{`Hash=ab12`, "", "0 URI fields"},
		{`URI=spiffe://td/a;URI=spiffe://td/b`, "", "2 URI fields"},
		{`URI=https://td/a`, "", "not a SPIFFE ID"},
		{`garbage`, "", "not key=value"},
		{`Subject="CN=a\";URI=spiffe://td/forged";URI=spiffe://td/real`, "spiffe://td/real", ""},
		{`URI="spiffe://td/a"`, "", "quoted or escaped"},
	} {
		id, err := forwardedID(c.xfcc)
		switch {
		case c.err == "" && (err != nil || id.String() != c.want):
			t.Errorf("%s: %v, %v; want %s", c.xfcc, id, err, c.want)
		case c.err != "" && (err == nil || !strings.Contains(err.Error(), c.err)):
			t.Errorf("%s: %v, want an error with %q", c.xfcc, err, c.err)
		case err != nil && strings.Contains(err.Error(), "spiffe://"):
			t.Errorf("%s: the error quotes the forwarded value: %v", c.xfcc, err)
		}
	}
}
