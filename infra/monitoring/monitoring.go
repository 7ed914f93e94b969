// Package monitoring holds the region's alerting rules, as files.
//
// The rules are Prometheus rule files in rules/, each with a promtool
// unit test beside it (rules/*_test.yml) in which every alert fires once
// on the series it is for and stays quiet on a healthy region's. docs/
// observability.md says what each alert means and what to do.
package monitoring

import (
	"embed"
	"io/fs"
)

//go:embed rules/etcd.yml rules/lockplane.yml
var rules embed.FS

// Rules are the rule files by name (etcd.yml, lockplane.yml).
func Rules() fs.FS {
	sub, err := fs.Sub(rules, "rules")
	if err != nil {
		panic(err) // the embedded directory exists
	}
	return sub
}
