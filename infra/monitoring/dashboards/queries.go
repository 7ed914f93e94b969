// Package dashboards holds Lockplane's generated Grafana dashboards and their queries.
//
// The JSON files are written by tools/dashboards (`go run .` there); do not
// edit them by hand. Queries lets a test run every panel's PromQL against a
// real Prometheus.
package dashboards

import (
	"embed"
	"encoding/json"
	"fmt"
	"io/fs"
)

//go:embed *.json
var files embed.FS

// Queries returns, per dashboard file name (region.json, owner.json), the
// expr of every panel target, in panel order. Expressions still hold the
// dashboard's variables ($cluster, $namespace) for the caller to substitute.
func Queries() (map[string][]string, error) {
	names, err := fs.Glob(files, "*.json")
	if err != nil {
		return nil, err
	}
	queries := map[string][]string{}
	for _, name := range names {
		data, err := files.ReadFile(name)
		if err != nil {
			return nil, err
		}
		var d struct {
			Panels []struct {
				Targets []struct {
					Expr string `json:"expr"`
				} `json:"targets"`
			} `json:"panels"`
		}
		if err := json.Unmarshal(data, &d); err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		exprs := []string{}
		for _, p := range d.Panels {
			for _, t := range p.Targets {
				exprs = append(exprs, t.Expr)
			}
		}
		queries[name] = exprs
	}
	return queries, nil
}
