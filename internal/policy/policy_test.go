package policy

import (
	"strings"
	"testing"
)

const example = `
identities:
  - name: billing-app
    prefixes: [billing/, jobs/billing]
    rights: [acquire, read]
  - name: legacy-cron
    token_sha256: ` + "5e884898da28047151d0e56f8dc6292773603d0d6aabbdd62a11ef721d1542d8" + ` # "password"
    prefixes: [jobs/nightly]
    rights: [Acquire]
  - name: ops
    prefixes: [""]
    rights: [acquire, read, admin]
  - name: auditor
    prefixes: [""]
    rights: [read]
`

func TestRightsFollowPrefixes(t *testing.T) {
	p, err := Parse([]byte(example))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		id    string
		right Right
		name  string
		want  bool
	}{
		{"billing-app", Acquire, "billing/totals", true},
		{"billing-app", Read, "billing/totals", true},
		{"billing-app", Acquire, "jobs/billing-weekly", true}, // a prefix, not a path
		{"billing-app", Acquire, "jobs/nightly", false},
		{"billing-app", Admin, "billing/totals", false},
		{"billing-app", Acquire, "billin", false},
		{"legacy-cron", Acquire, "jobs/nightly", true},
		{"legacy-cron", Read, "jobs/nightly", false},
		{"ops", Admin, "anything", true},
		{"auditor", Read, "billing/totals", true},
		{"auditor", Acquire, "billing/totals", false},
		{"stranger", Read, "billing/totals", false},
		{"", Read, "billing/totals", false},
	} {
		if got := p.Allows(tc.id, tc.right, tc.name); got != tc.want {
			t.Errorf("Allows(%q, %v, %q) = %v", tc.id, tc.right, tc.name, got)
		}
	}
	if !p.AllowsSome("legacy-cron", Acquire) || p.AllowsSome("auditor", Acquire) || p.AllowsSome("stranger", Read) {
		t.Error("AllowsSome")
	}
	if id, ok := p.TokenIdentity("password"); !ok || id != "legacy-cron" {
		t.Errorf("TokenIdentity(password) = %q, %v", id, ok)
	}
	if _, ok := p.TokenIdentity("Password"); ok {
		t.Error("another token was taken")
	}
	if got := HashToken("password"); got != "5e884898da28047151d0e56f8dc6292773603d0d6aabbdd62a11ef721d1542d8" {
		t.Errorf("HashToken = %s", got)
	}
}

func TestParseListsEveryProblem(t *testing.T) {
	bad := `
identities:
  - prefixes: [a/]
    rights: [read]
  - name: app
    prefixes: [a/]
    rights: [read, write]
  - name: app
    prefixes: [b/]
    rights: [read]
  - name: empty
  - name: tok
    token_sha256: abc
    prefixes: [x]
    rights: [read]
  - name: "bad\u0001name"
    prefixes: ["ctl\u0002"]
    rights: [read]
`
	_, err := Parse([]byte(bad))
	if err == nil {
		t.Fatal("parsed")
	}
	for _, want := range []string{
		"identity 1: no name",
		`identity 2 ("app"): unknown right "write"`,
		`identity 3 ("app"): named twice`,
		`identity 4 ("empty"): no rights`,
		`identity 4 ("empty"): no prefixes`,
		`identity 5 ("tok"): token_sha256 is not 64 hex digits`,
		`identity 6`,
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("the error misses %q:\n%v", want, err)
		}
	}
	for name, doc := range map[string]string{
		"empty file":     "",
		"no identities":  "identities: []",
		"unknown key":    "identities:\n  - name: a\n    prefix: [x]\n    rights: [read]\n",
		"not YAML":       "{{{",
		"same token":     "identities:\n  - {name: a, token_sha256: " + HashToken("t") + ", prefixes: [x], rights: [read]}\n  - {name: b, token_sha256: " + HashToken("t") + ", prefixes: [x], rights: [read]}\n",
		"top-level typo": "identity:\n  - name: a\n",
	} {
		if _, err := Parse([]byte(doc)); err == nil {
			t.Errorf("%s: parsed", name)
		}
	}
}

// FuzzParse: any file is refused with an error or parsed into a policy
// that answers without panicking, and never grants what it was not given.
func FuzzParse(f *testing.F) {
	f.Add([]byte(example))
	f.Add([]byte("identities:\n  - {name: a, prefixes: [\"\"], rights: [admin]}\n"))
	f.Add([]byte("identities: [{name: x, token_sha256: " + HashToken("t") + ", prefixes: [p], rights: [read]}]"))
	f.Fuzz(func(t *testing.T, data []byte) {
		p, err := Parse(data)
		if err != nil {
			return
		}
		if p.Allows("", Read, "x") && p.grants[""] == nil {
			t.Fatal("the empty identity was granted something it was never given")
		}
		for id, gs := range p.grants {
			for _, g := range gs {
				if g.rights == 0 {
					t.Fatalf("%q: a grant without rights", id)
				}
				if !p.Allows(id, g.rights&-g.rights, g.prefix+"z") {
					t.Fatalf("%q: its own grant %q is not allowed", id, g.prefix)
				}
			}
		}
	})
}
