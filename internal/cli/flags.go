package cli

import (
	"fmt"
	"slices"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// Annotations the flag checks read.
const (
	// offlineUses, on a command that talks to no server, lists the root
	// flags it still uses (comma-separated); the others do not apply to it.
	offlineUses = "fence/offline-uses"
	// positiveFlag marks a duration flag that must be above zero.
	positiveFlag = "fence/positive"
)

// usageError marks err as bad usage of cmd (exit 2) and points at its help.
func usageError(cmd *cobra.Command, err error) error {
	return &exitError{ExitUsage, fmt.Errorf("%w (see '%s --help')", err, cmd.CommandPath())}
}

// usage marks an argument-count error as bad usage (exit 2).
func usage(check cobra.PositionalArgs) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if err := check(cmd, args); err != nil {
			return usageError(cmd, err)
		}
		return nil
	}
}

// positive makes the duration flags names of fs refuse zero (checkFlags
// refuses negative durations everywhere).
func positive(fs *pflag.FlagSet, names ...string) {
	for _, n := range names {
		if err := fs.SetAnnotation(n, positiveFlag, nil); err != nil {
			panic(err) // a flag name that does not exist: a bug here
		}
	}
}

// offline marks cmd (and its subcommands) as talking to no server: of the
// root's flags it takes only uses; the others are left out of its help and
// refused if given.
func offline(cmd *cobra.Command, uses ...string) *cobra.Command {
	cmd.Annotations = map[string]string{offlineUses: strings.Join(uses, ",")}
	cmd.SetHelpFunc(func(c *cobra.Command, args []string) {
		idle := unusedRootFlags(c)
		for _, f := range idle {
			f.Hidden = true
		}
		defer func() {
			for _, f := range idle {
				f.Hidden = false
			}
		}()
		c.Root().HelpFunc()(c, args)
	})
	return cmd
}

// unusedRootFlags are the root's flags that cmd does not use: none for a
// client command, the ones its offline mark leaves out otherwise.
func unusedRootFlags(cmd *cobra.Command) []*pflag.Flag {
	for c := cmd; c != nil; c = c.Parent() {
		uses, ok := c.Annotations[offlineUses]
		if !ok {
			continue
		}
		var idle []*pflag.Flag
		cmd.Root().PersistentFlags().VisitAll(func(f *pflag.Flag) {
			if !slices.Contains(strings.Split(uses, ","), f.Name) {
				idle = append(idle, f)
			}
		})
		return idle
	}
	return nil
}

// checkFlags refuses, as bad usage, root flags that do not apply to cmd,
// negative durations, and zero for a duration marked positive.
func checkFlags(cmd *cobra.Command) error {
	for _, f := range unusedRootFlags(cmd) {
		if f.Changed {
			return usageError(cmd, fmt.Errorf("--%s is for commands that call a server; '%s' does not use it", f.Name, cmd.CommandPath()))
		}
	}
	var bad error
	cmd.Flags().VisitAll(func(f *pflag.Flag) {
		if bad != nil || f.Value.Type() != "duration" {
			return
		}
		d, _ := cmd.Flags().GetDuration(f.Name) // a duration, as checked above
		_, mustBePositive := f.Annotations[positiveFlag]
		switch {
		case d < 0:
			bad = fmt.Errorf("--%s %v: a duration cannot be negative", f.Name, d)
		case d == 0 && mustBePositive:
			bad = fmt.Errorf("--%s 0s: must be positive", f.Name)
		}
	})
	if bad != nil {
		return usageError(cmd, bad)
	}
	return nil
}
