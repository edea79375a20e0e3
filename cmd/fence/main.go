// Command fence is the fence lock service and its command-line client.
// See README.md, or run 'fence --help'.
package main

import (
	"context"
	"os"

	"github.com/fencehq/fence/internal/cli"
)

func main() { os.Exit(cli.Execute(context.Background())) }
