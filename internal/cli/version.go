package cli

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/fencehq/fence/internal/buildinfo"
)

func newVersion() *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print fence's version, commit, Go version and platform",
		Long: `Print the version stamped in at build time ("dev" for a plain go build),
the commit the binary was built from (", modified" if the checkout had
uncommitted changes), the Go version and the platform, on one line; the
same as 'fence --version'. A server exports the same as the
fence_build_info metric.`,
		Args: usage(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			fmt.Fprintln(cmd.OutOrStdout(), buildinfo.Get())
			return nil
		},
	}
}
