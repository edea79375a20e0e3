package cli

import (
	"bufio"
	"errors"
	"fmt"
	"strings"

	"github.com/spf13/cobra"

	"github.com/fencehq/fence/internal/policy"
)

func newPolicy() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "policy",
		Short: "Check a policy file, or hash a bearer token for one",
		Long: `A policy file (fence serve --policy-file) says who may do what to which
locks. Each identity is a client certificate's common name, or the name of a
bearer token (for clients without a certificate; the file holds its SHA-256,
never the token). It gets rights on lock-name prefixes:

  identities:
    - name: billing-app            # CN of its client certificate
      prefixes: [billing/]         # "" is every name
      rights: [acquire, read]      # acquire: leases, locks, fenced writes; read; admin
    - name: legacy-cron
      token_sha256: 5e88489…       # fence policy hash-token < token
      prefixes: [jobs/nightly]
      rights: [acquire]
    - name: ops
      prefixes: [""]
      rights: [acquire, read, admin]

An identity the file does not name may do nothing; ListLocks shows each
identity only the locks it may read. fence serve re-reads the file on
SIGHUP and keeps the old one if the new one has problems.`,
	}
	check := &cobra.Command{
		Use:   "check FILE",
		Short: "Check a policy file and list every problem in it",
		Args:  usage(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			if _, err := policy.Load(args[0]); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "%s: ok\n", args[0])
			return nil
		},
	}
	hash := &cobra.Command{
		Use:   "hash-token",
		Short: "Print the SHA-256 of the bearer token read from stdin, for token_sha256",
		Example: `  head -c 32 /dev/urandom | base64 > cron.token
  fence policy hash-token < cron.token`,
		Args: usage(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			line, err := bufio.NewReader(cmd.InOrStdin()).ReadString('\n')
			token := strings.TrimSpace(line)
			if token == "" {
				if err != nil && line == "" {
					return &exitError{ExitUsage, errors.New("no token on stdin (e.g. fence policy hash-token < cron.token)")}
				}
				return &exitError{ExitUsage, errors.New("the token on stdin is empty")}
			}
			fmt.Fprintln(cmd.OutOrStdout(), policy.HashToken(token))
			return nil
		},
	}
	cmd.AddCommand(check, hash)
	return cmd
}
