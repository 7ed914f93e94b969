// Command infra is the region program for a standard Pulumi install:
// `pulumi up --stack S` from the repository root runs it (Pulumi.yaml's
// main). `lockplane up` runs the same program inline, with the reader
// that hands a region its own snapshot store users; here a region naming a snapshot store
// is refused.
package main

import (
	"github.com/lockplane/lockplane/infra/program"
	"github.com/pulumi/pulumi/sdk/v3/go/pulumi"
)

func main() { pulumi.Run(program.Run) }
