package client_test

import (
	"encoding/json"
	"os/exec"
	"strings"
	"testing"
)

// roots are the client's whole dependency graph: a Go user who imports it
// inherits grpc, protobuf and go-spiffe and what they need, nothing of the
// product (etcd, Pulumi, MinIO, pgx).
var roots = map[string]bool{
	"google.golang.org/grpc":         true,
	"google.golang.org/protobuf":     true,
	"github.com/spiffe/go-spiffe/v2": true,
}

func goCmd(t *testing.T, args ...string) []byte {
	t.Helper()
	out, err := exec.Command("go", args...).Output()
	if err != nil {
		t.Fatalf("go %s: %v", strings.Join(args, " "), err)
	}
	return out
}

// TestTheModuleGraphIsGrpcProtobufAndGoSpiffe fails on any module the
// client's packages or its go.mod bring in that the three roots do not.
func TestTheModuleGraphIsGrpcProtobufAndGoSpiffe(t *testing.T) {
	var mod struct {
		Require []struct{ Path string }
	}
	if err := json.Unmarshal(goCmd(t, "mod", "edit", "-json"), &mod); err != nil {
		t.Fatal(err)
	}
	// What the roots need, transitively, by the module graph.
	edges := map[string][]string{}
	for _, line := range strings.Split(strings.TrimSpace(string(goCmd(t, "mod", "graph"))), "\n") {
		from, to, ok := strings.Cut(line, " ")
		if ok {
			edges[modPath(from)] = append(edges[modPath(from)], modPath(to))
		}
	}
	reach := map[string]bool{}
	var walk func(string)
	walk = func(m string) {
		if reach[m] {
			return
		}
		reach[m] = true
		for _, n := range edges[m] {
			walk(n)
		}
	}
	for r := range roots {
		walk(r)
	}
	for _, r := range mod.Require {
		if !reach[r.Path] {
			t.Errorf("go.mod requires %s, which none of grpc, protobuf and go-spiffe needs: the client may depend on those three only", r.Path)
		}
	}
	// And every module a client package (or its test) links.
	self := strings.TrimSpace(string(goCmd(t, "list", "-m")))
	for _, m := range strings.Fields(string(goCmd(t, "list", "-deps", "-test", "-f", "{{with .Module}}{{.Path}}{{end}}", "./..."))) {
		if m != self && !reach[m] {
			t.Errorf("a client package links %s, outside grpc, protobuf and go-spiffe's graph", m)
		}
	}
}

// modPath drops the version from a `go mod graph` node.
func modPath(node string) string {
	p, _, _ := strings.Cut(node, "@")
	return p
}
