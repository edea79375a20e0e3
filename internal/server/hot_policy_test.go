package server_test

import (
	"slices"
	"testing"

	"google.golang.org/grpc/codes"

	"github.com/fencehq/fence/client"
)

const hotPolicy = `
identities:
  - name: alice
    prefixes: [a/]
    rights: [acquire, read]
  - name: writer
    prefixes: [""]
    rights: [acquire]
  - name: ops
    prefixes: [""]
    rights: [acquire, read, admin]
`

// Under a policy HotLocks needs the read right, and shows each identity
// only the names it may read, as ListLocks does.
func TestHotLocksPolicy(t *testing.T) {
	pc := startWithPolicy(t, hotPolicy)
	ctx := t.Context()
	ops, alice := pc.as("ops"), pc.as("alice")
	for _, name := range []string{"a/one", "b/two"} {
		l, err := ops.Lock(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
	names := func(c *client.Client, prefix string) ([]string, error) {
		locks, _, err := c.HotLocks(ctx, 0, prefix)
		var out []string
		for _, l := range locks {
			out = append(out, l.Name)
		}
		slices.Sort(out)
		return out, err
	}
	for _, tc := range []struct {
		who, prefix string
		want        []string
		code        codes.Code
	}{
		{"ops", "", []string{"a/one", "b/two"}, codes.OK},
		{"alice", "", []string{"a/one"}, codes.OK},
		{"alice", "b/", nil, codes.OK}, // a prefix she may not read: nothing, not a refusal
		{"writer", "", nil, codes.PermissionDenied},
		{"mallory", "", nil, codes.PermissionDenied},
	} {
		c := map[string]*client.Client{"ops": ops, "alice": alice}[tc.who]
		if c == nil {
			c = pc.as(tc.who)
		}
		got, err := names(c, tc.prefix)
		if tc.code != codes.OK {
			wantCode(t, tc.who+" HotLocks", err, tc.code, "")
			continue
		}
		if err != nil || !slices.Equal(got, tc.want) {
			t.Errorf("%s HotLocks(prefix %q) = %v, %v; want %v", tc.who, tc.prefix, got, err, tc.want)
		}
	}
}
