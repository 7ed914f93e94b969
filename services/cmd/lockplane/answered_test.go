package main

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/pulumi/pulumi/sdk/v3/go/common/apitype"
)

// up's summary names what answered each Service's readiness check, read
// from the Services' outputs in the state, without touching a secret.
func TestUpPrintsWhatAnsweredEachReadinessCheck(t *testing.T) {
	state := `{"resources": [
	  {"urn": "urn:a", "type": "lockplane:nodes:Service", "inputs": {"name": "arbiter", "connection": {"host": "10.231.0.21",
	    "privateKey": {"4dabf18193072939515e22adb298388d": "1b47061264138c4ac30d75fd1eb44270", "ciphertext": "v1:abc"}}},
	    "outputs": {"answered": "10.231.0.21:7443 sealed", "pid": 12}},
	  {"urn": "urn:b", "type": "lockplane:nodes:Service", "inputs": {"name": "etcd-coord", "connection": {"host": "10.231.0.11"}},
	    "outputs": {"answered": "10.231.0.11:2379"}},
	  {"urn": "urn:c", "type": "lockplane:nodes:Service", "inputs": {"name": "tangd", "connection": {"host": "10.231.0.5"}}, "outputs": {"pid": 3}},
	  {"urn": "urn:d", "type": "lockplane:nodes:File", "inputs": {}, "outputs": {"answered": "not a service"}}
	]}`
	got, err := answersOf(apitype.UntypedDeployment{Version: 3, Deployment: json.RawMessage(state)})
	if err != nil {
		t.Fatal(err)
	}
	want := []answer{{"10.231.0.21", "arbiter", "10.231.0.21:7443 sealed"}, {"10.231.0.11", "etcd-coord", "10.231.0.11:2379"}}
	if len(got) != len(want) || got[0] != want[0] || got[1] != want[1] {
		t.Fatalf("answers %+v, want %+v", got, want)
	}
	var b strings.Builder
	printAnswers(&b, got)
	if !strings.Contains(b.String(), "arbiter") || !strings.Contains(b.String(), "10.231.0.21:7443 sealed") {
		t.Fatalf("printed:\n%s", b.String())
	}
	js, _ := json.Marshal(summary{Answered: got})
	if !strings.Contains(string(js), `"answered":[{"host":"10.231.0.21","service":"arbiter","answered":"10.231.0.21:7443 sealed"}`) {
		t.Fatalf("JSON summary: %s", js)
	}
}
