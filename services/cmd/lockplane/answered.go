package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"sort"
	"strings"

	"github.com/pulumi/pulumi/sdk/v3/go/auto"
	"github.com/pulumi/pulumi/sdk/v3/go/common/apitype"
)

// answer is what answered one Service's readiness check at its last
// start: the service, its host, and the check's last line (an address;
// "ADDR sealed" for a DR stack's arbiter).
type answer struct {
	Host     string `json:"host"`
	Service  string `json:"service"`
	Answered string `json:"answered"`
}

// serviceType is the provider's Service resource type.
const serviceType = "lockplane:nodes:Service"

// answers reads what answered each Service's readiness check from the
// stack's state (the Services' "answered" outputs), by host and service.
// Secrets in the state stay encrypted: only hosts, names and answers are
// read.
func answers(ctx context.Context, s auto.Stack) ([]answer, error) {
	dep, err := s.Export(ctx)
	if err != nil {
		return nil, fmt.Errorf("reading the stack's state for the readiness answers: %w", err)
	}
	return answersOf(dep)
}

func answersOf(dep apitype.UntypedDeployment) ([]answer, error) {
	var d apitype.DeploymentV3
	if err := json.Unmarshal(dep.Deployment, &d); err != nil {
		return nil, fmt.Errorf("the stack's state: %w", err)
	}
	var out []answer
	for _, r := range d.Resources {
		if string(r.Type) != serviceType {
			continue
		}
		a, _ := r.Outputs["answered"].(string)
		if a == "" {
			continue
		}
		name, _ := r.Inputs["name"].(string)
		conn, _ := r.Inputs["connection"].(map[string]any)
		host, _ := conn["host"].(string)
		out = append(out, answer{Host: host, Service: name, Answered: a})
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Service != out[j].Service {
			return out[i].Service < out[j].Service
		}
		return out[i].Host < out[j].Host
	})
	return out, nil
}

// printAnswers writes one line a service: what answered its readiness
// check.
func printAnswers(w io.Writer, as []answer) {
	if len(as) == 0 {
		return
	}
	fmt.Fprintln(w, "\nanswered its readiness check (at its last start):")
	for _, a := range as {
		fmt.Fprintf(w, "  %-16s on %-15s %s\n", a.Service, a.Host, strings.TrimSpace(a.Answered))
	}
}
