// Package cli holds the fence commands (cobra). cmd/fence only calls Execute,
// so every command can be tested with SetArgs and SetOut.
package cli

import (
	"context"

	"github.com/spf13/cobra"
)

// NewRoot returns the fence command tree.
func NewRoot() *cobra.Command {
	root := &cobra.Command{
		Use:   "fence",
		Short: "A lock service with leases and fencing tokens",
		Long: `fence hands out leases (locks with a time limit, renewed while the holder
works) and, with every grant, a fencing token that only grows, so storage can
refuse a holder whose lease already ran out.

Start a single node with 'fence serve'; it keeps its data in ./fence-data.`,
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.AddCommand(newServe())
	return root
}

// Execute runs the command line and returns the process exit code.
func Execute(ctx context.Context) int {
	root := NewRoot()
	if err := root.ExecuteContext(ctx); err != nil {
		root.PrintErrln("fence:", err)
		return 1
	}
	return 0
}
