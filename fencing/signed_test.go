package fencing_test

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"database/sql"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fencehq/fence/fencing"
	"github.com/fencehq/fence/internal/dbtest"
)

// newKey returns a fresh token key and a Signer for it.
func newKey(t testing.TB) (ed25519.PublicKey, *fencing.Signer) {
	t.Helper()
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return pub, fencing.NewSigner(priv)
}

func sign(t testing.TB, s *fencing.Signer, name string, token fencing.Token) string {
	t.Helper()
	signed, err := s.Sign(fencing.Grant{Cluster: 0xc1, Name: name, Token: token, Lease: 7, IssuedAt: time.UnixMilli(1_780_000_000_123)})
	if err != nil {
		t.Fatal(err)
	}
	return signed
}

func newVerifier(t testing.TB, keys ...ed25519.PublicKey) *fencing.Verifier {
	t.Helper()
	v, err := fencing.NewVerifier(keys...)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func TestSignedRoundTrip(t *testing.T) {
	pub, s := newKey(t)
	v := newVerifier(t, pub)
	want := fencing.Grant{KeyID: s.KeyID(), Cluster: 0xfeedface, Name: "totals/77", Token: 1 << 40, Lease: 12, IssuedAt: time.UnixMilli(1_780_000_000_123)}
	signed, err := s.Sign(want)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 2; i++ { // the second from the cache
		got, err := v.Verify(signed)
		if err != nil {
			t.Fatal(err)
		}
		if got != want && !(got.IssuedAt.Equal(want.IssuedAt) && got.Name == want.Name && got.Token == want.Token &&
			got.Lease == want.Lease && got.Cluster == want.Cluster && got.KeyID == want.KeyID) {
			t.Fatalf("verified %+v, want %+v", got, want)
		}
	}
	if tok, err := v.VerifyFor(signed, "totals/77", "totals"); err != nil || tok != 1<<40 {
		t.Fatalf("VerifyFor = %d, %v", tok, err)
	}
	if fencing.KeyIDOf(pub) != s.KeyID() || len(s.KeyID().String()) != 16 {
		t.Fatalf("key id %s", s.KeyID())
	}
	if len(signed) > 200 {
		t.Errorf("a signed token for a 9-byte name is %d characters; it should stay compact", len(signed))
	}
	if _, err := s.Sign(fencing.Grant{Name: strings.Repeat("n", 1025)}); err == nil {
		t.Error("signed a 1025-byte name")
	}
	for _, name := range []string{"", strings.Repeat("n", 1024)} { // the shortest and the longest
		if g, err := v.Verify(sign(t, s, name, 1)); err != nil || g.Name != name {
			t.Errorf("a %d-byte name: %+v, %v", len(name), g, err)
		}
	}
	if _, err := v.Verify("AQ"); err == nil || !strings.HasPrefix(err.Error(), "fencing: signed token refused: ") {
		t.Errorf("Verify's refusal: %v", err)
	}
}

// TestSignedRefusals: every way a signed token can be wrong is refused with
// ErrBadSignature and a message that says which.
func TestSignedRefusals(t *testing.T) {
	pub, s := newKey(t)
	_, other := newKey(t)
	v := newVerifier(t, pub)
	good := sign(t, s, "orders/1", 42)
	raw, _ := base64.RawURLEncoding.DecodeString(good)
	reencode := func(b []byte) string { return base64.RawURLEncoding.EncodeToString(b) }
	v2 := bytes.Clone(raw)
	v2[0] = 2
	cases := []struct{ name, signed, lock, want string }{
		{"empty", "", "orders/1", "no signed token"},
		{"plain number", "42", "orders/1", "canonical form"},
		{"short", reencode(raw[:40]), "orders/1", "too short"},
		{"line break", good[:10] + "\n" + good[10:], "orders/1", "canonical form"},
		{"not base64", "!!!" + good[3:], "orders/1", "not URL-safe base64"},
		{"too long", strings.Repeat("A", fencing.MaxSignedTokenLen+1), "orders/1", "more than a signed token has"},
		{"longest", strings.Repeat("A", fencing.MaxSignedTokenLen), "orders/1", "version 0"},
		{"truncated", reencode(raw[:len(raw)-3]), "orders/1", "length does not match"},
		{"extended", reencode(append(bytes.Clone(raw), 0)), "orders/1", "length does not match"},
		{"unknown version", reencode(v2), "orders/1", "version 2"},
		{"another key", sign(t, other, "orders/1", 42), "orders/1", "which this verifier does not have"},
		{"another lock", good, "orders/2", `issued for lock "orders/1"`},
		{"token 0", sign(t, s, "orders/1", 0), "orders/1", "token 0"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := v.VerifyFor(c.signed, c.lock, "orders")
			var se *fencing.SignatureError
			if !errors.Is(err, fencing.ErrBadSignature) || !errors.As(err, &se) || se.Resource != "orders" {
				t.Fatalf("VerifyFor = %v, want a *SignatureError for orders", err)
			}
			if !strings.Contains(err.Error(), c.want) {
				t.Fatalf("error %q does not say %q", err, c.want)
			}
		})
	}
	// Altered: every bit of every byte but the key id (which makes it
	// another key's token, refused above) is covered by the signature.
	for i := range raw {
		if i >= 1 && i < 9 {
			continue
		}
		for bit := 0; bit < 8; bit++ {
			b := bytes.Clone(raw)
			b[i] ^= 1 << bit
			if g, err := v.Verify(reencode(b)); !errors.Is(err, fencing.ErrBadSignature) {
				t.Fatalf("byte %d bit %d flipped: verified %+v (err %v)", i, bit, g, err)
			}
		}
	}
	// The cache holds only what verified: the good token still verifies,
	// and an altered one is refused even after the good one was cached.
	if _, err := v.Verify(good); err != nil {
		t.Fatal(err)
	}
	b := bytes.Clone(raw)
	b[20] ^= 1
	if _, err := v.Verify(reencode(b)); err == nil {
		t.Fatal("an altered token verified once the good one was cached")
	}
}

// TestSignedRotation: a verifier given the old and the new key accepts
// tokens of both; one given only the new key refuses the old key's.
func TestSignedRotation(t *testing.T) {
	oldPub, oldKey := newKey(t)
	newPub, newKey := newKey(t)
	both := newVerifier(t, newPub, oldPub)
	onlyNew := newVerifier(t, newPub)
	oldTok, newTok := sign(t, oldKey, "a", 1), sign(t, newKey, "a", 2)
	for _, s := range []string{oldTok, newTok} {
		if _, err := both.Verify(s); err != nil {
			t.Errorf("verifier with both keys: %v", err)
		}
	}
	if _, err := onlyNew.Verify(newTok); err != nil {
		t.Error(err)
	}
	if _, err := onlyNew.Verify(oldTok); !errors.Is(err, fencing.ErrBadSignature) || !strings.Contains(err.Error(), oldKey.KeyID().String()) {
		t.Errorf("old key's token with the new key only: %v (want a refusal naming key %s)", err, oldKey.KeyID())
	}
}

func pemPublic(t *testing.T, pub any) []byte {
	t.Helper()
	der, err := x509.MarshalPKIXPublicKey(pub)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der})
}

func TestParseVerifier(t *testing.T) {
	pub1, s1 := newKey(t)
	pub2, s2 := newKey(t)
	dir := t.TempDir()
	f1, f2 := filepath.Join(dir, "old.pub.pem"), filepath.Join(dir, "new.pub.pem")
	os.WriteFile(f1, pemPublic(t, pub1), 0o644)
	os.WriteFile(f2, pemPublic(t, pub2), 0o644)
	v, err := fencing.LoadVerifier(f1, f2)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []*fencing.Signer{s1, s2} {
		if _, err := v.Verify(sign(t, s, "x", 3)); err != nil {
			t.Error(err)
		}
	}
	rsaKey, err := rsa.GenerateKey(rand.Reader, 1024)
	if err != nil {
		t.Fatal(err)
	}
	_, priv, _ := ed25519.GenerateKey(rand.Reader)
	der, _ := x509.MarshalPKCS8PrivateKey(priv)
	bad := []struct {
		name string
		data []byte
		want string
	}{
		{"empty", nil, "no PUBLIC KEY"},
		{"private key", pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), "never the private key"},
		{"rsa", pemPublic(t, &rsaKey.PublicKey), "not an Ed25519"},
		{"garbage block", pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: []byte("nope")}), "PEM block 1"},
		{"trailing text", append(pemPublic(t, pub1), "junk"...), "after the last PEM block"},
		{"second block bad", append(pemPublic(t, pub1), pemPublic(t, &rsaKey.PublicKey)...), "PEM block 2"},
	}
	for _, c := range bad {
		if _, err := fencing.ParseVerifier(c.data); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want an error saying %q", c.name, err, c.want)
		}
	}
	if _, err := fencing.LoadVerifier(filepath.Join(dir, "missing.pem")); err == nil {
		t.Error("loaded a missing file")
	}
	if _, err := fencing.NewVerifier(); err == nil {
		t.Error("a verifier without keys")
	}
	if _, err := fencing.NewVerifier(pub1, ed25519.PublicKey("short")); err == nil || !strings.Contains(err.Error(), "public key 2 is 5 bytes") {
		t.Errorf("a verifier with a 5-byte key: %v", err)
	}
}

// TestTableSigned: a table with a Verifier takes only signed tokens for the
// row's lock; every refusal leaves the row as it was. Observe mode lets a
// refused write through without recording its token.
func TestTableSigned(t *testing.T) {
	forEachDB(t, func(t *testing.T, db dbtest.DB) {
		ctx := context.Background()
		pub, s := newKey(t)
		_, attacker := newKey(t)
		h, plain, name := setup(t, db)
		lockName := func(k []string) string { return "totals/" + k[0] }
		tbl, err := fencing.NewTable(fencing.TableConfig{Dialect: db.Dialect, Name: name, Key: []string{"id"},
			Verifier: newVerifier(t, pub), LockName: lockName, Logger: quietLogger()})
		if err != nil {
			t.Fatal(err)
		}
		set := func(v int) map[string]any { return map[string]any{"amount": v} }
		if err := tbl.UpdateSigned(ctx, fencing.SQL(h), sign(t, s, "totals/1", 5), 1, set(100)); err != nil {
			t.Fatal(err)
		}
		refused := []struct {
			name string
			do   func() error
		}{
			{"plain token", func() error { return tbl.Update(ctx, h, 6, 1, set(1)) }},
			{"plain claim", func() error { return tbl.Claim(ctx, h, 6, 1) }},
			{"plain InTx", func() error {
				return tbl.InTx(ctx, h, 6, 1, func(*sql.Tx) error { return errors.New("ran") })
			}},
			{"forged huge token", func() error {
				return tbl.UpdateSigned(ctx, fencing.SQL(h), sign(t, attacker, "totals/1", 1<<62), 1, set(2))
			}},
			{"another lock's grant", func() error { return tbl.UpdateSigned(ctx, fencing.SQL(h), sign(t, s, "totals/2", 9), 1, set(3)) }},
			{"a plain number as signed", func() error { return tbl.UpdateSigned(ctx, fencing.SQL(h), "9", 1, set(4)) }},
			{"InTxSigned for another lock", func() error {
				return tbl.InTxSigned(ctx, h, sign(t, s, "totals/2", 9), 1, func(*sql.Tx) error { return errors.New("ran") })
			}},
		}
		for _, r := range refused {
			if err := r.do(); !errors.Is(err, fencing.ErrBadSignature) {
				t.Errorf("%s: %v, want ErrBadSignature", r.name, err)
			}
		}
		if amount, fence := row(t, h, name, 1); amount != 100 || fence != 5 {
			t.Fatalf("row after refusals: amount %d fence %d, want 100 and 5", amount, fence)
		}
		// A valid signed token that is stale is refused as stale.
		if err := tbl.UpdateSigned(ctx, fencing.SQL(h), sign(t, s, "totals/1", 4), 1, set(5)); !errors.Is(err, fencing.ErrStale) {
			t.Fatalf("older signed token: %v, want ErrStale", err)
		}
		ran := false
		if err := tbl.InTxSigned(ctx, h, sign(t, s, "totals/1", 6), 1, func(tx *sql.Tx) error { ran = true; return nil }); err != nil || !ran {
			t.Fatalf("InTxSigned: %v (ran %v)", err, ran)
		}
		// A table without a Verifier has nothing to check a signed token with.
		if err := plain.UpdateSigned(ctx, fencing.SQL(h), sign(t, s, "totals/1", 7), 1, set(6)); err == nil || !strings.Contains(err.Error(), "no Verifier") {
			t.Fatalf("UpdateSigned on a table without a Verifier: %v", err)
		}
		tbl.SetMode(fencing.Observe)
		if err := tbl.UpdateSigned(ctx, fencing.SQL(h), sign(t, attacker, "totals/1", 1<<62), 1, set(7)); err != nil {
			t.Fatalf("observe mode: %v", err)
		}
		if amount, fence := row(t, h, name, 1); amount != 7 || fence != 6 {
			t.Fatalf("observe mode let the forged write record its token: amount %d fence %d, want 7 and 6", amount, fence)
		}
		if _, err := fencing.NewTable(fencing.TableConfig{Dialect: db.Dialect, Name: name, Key: []string{"id"}, Verifier: newVerifier(t, pub)}); err == nil {
			t.Error("a table with a Verifier and no LockName")
		}
	})
}

func TestMiddlewareSigned(t *testing.T) {
	pub, s := newKey(t)
	_, attacker := newKey(t)
	var ran int
	h := fencing.Middleware(fencing.MiddlewareConfig{Store: fencing.NewMemoryStore(), Resource: func(r *http.Request) string { return r.URL.Path },
		Verifier: newVerifier(t, pub), LockName: func(r *http.Request) string { return "api" + r.URL.Path }},
		http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { ran++ }))
	do := func(path, token string) (int, string) {
		r := httptest.NewRequest(http.MethodPut, path, nil)
		r.Header.Set(fencing.TokenHeader, token)
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		var body struct{ Error string }
		json.Unmarshal(w.Body.Bytes(), &body)
		return w.Code, body.Error
	}
	if code, msg := do("/carts/1", sign(t, s, "api/carts/1", 10)); code != http.StatusOK {
		t.Fatalf("valid signed token: %d %s", code, msg)
	}
	for _, c := range []struct{ name, path, token, want string }{
		{"plain", "/carts/1", "11", "canonical form"},
		{"forged", "/carts/1", sign(t, attacker, "api/carts/1", 1<<62), "does not have"},
		{"another lock", "/carts/2", sign(t, s, "api/carts/1", 12), "issued for lock"},
	} {
		if code, msg := do(c.path, c.token); code != http.StatusForbidden || !strings.Contains(msg, c.want) {
			t.Errorf("%s: %d %q, want 403 saying %q", c.name, code, msg, c.want)
		}
	}
	if code, _ := do("/carts/1", sign(t, s, "api/carts/1", 9)); code != http.StatusConflict {
		t.Errorf("stale signed token: %d, want 409", code)
	}
	if ran != 1 {
		t.Fatalf("handler ran %d times, want 1", ran)
	}
}

func TestLedgerSigned(t *testing.T) {
	forEachDB(t, func(t *testing.T, db dbtest.DB) {
		ctx := context.Background()
		pub, s := newKey(t)
		h := dbtest.Open(t, db)
		l, err := fencing.NewLedger(db.Dialect, dbtest.Table(t, h))
		if err != nil {
			t.Fatal(err)
		}
		if err := l.EnsureTable(ctx, h); err != nil {
			t.Fatal(err)
		}
		if _, err := l.OnceSigned(ctx, h, "sms:order-1", sign(t, s, "orders/1", 3), func(context.Context) error { return nil }); err == nil {
			t.Fatal("OnceSigned on a ledger without a Verifier")
		}
		l.Verifier = newVerifier(t, pub)
		l.LockName = func(key string) string { return "orders/" + strings.TrimPrefix(key, "sms:order-") }
		action := func(context.Context) error { return errors.New("the action ran") }
		for _, c := range []struct {
			name string
			do   func() (bool, error)
		}{
			{"plain", func() (bool, error) { return l.Once(ctx, h, "sms:order-1", 3, action) }},
			{"another lock", func() (bool, error) { return l.OnceSigned(ctx, h, "sms:order-1", sign(t, s, "orders/2", 3), action) }},
			{"garbage", func() (bool, error) { return l.OnceSigned(ctx, h, "sms:order-1", "garbage", action) }},
		} {
			if ran, err := c.do(); ran || !errors.Is(err, fencing.ErrBadSignature) {
				t.Errorf("%s: ran %v, %v; want a refusal", c.name, ran, err)
			}
		}
		if st, err := l.State(ctx, h, "sms:order-1"); err != nil || st != "" {
			t.Fatalf("a refused claim left state %q (%v)", st, err)
		}
		ran, err := l.OnceSigned(ctx, h, "sms:order-1", sign(t, s, "orders/1", 3), func(context.Context) error { return nil })
		if !ran || err != nil {
			t.Fatalf("valid signed claim: ran %v, %v", ran, err)
		}
	})
}

// FuzzVerify: no input panics the verifier, and an input it accepts is the
// canonical signing of what it states (so only the key's holder made it).
func FuzzVerify(f *testing.F) {
	seed := ed25519.NewKeyFromSeed(bytes.Repeat([]byte{7}, 32))
	s := fencing.NewSigner(seed)
	v, err := fencing.NewVerifier(seed.Public().(ed25519.PublicKey))
	if err != nil {
		f.Fatal(err)
	}
	for _, name := range []string{"", "a", "totals/77", strings.Repeat("x", 1024)} {
		f.Add(sign(f, s, name, 42))
	}
	f.Add("")
	f.Add("AQ")
	f.Fuzz(func(t *testing.T, in string) {
		g, err := v.Verify(in)
		if err != nil {
			if !errors.Is(err, fencing.ErrBadSignature) {
				t.Fatalf("refusal %v does not match ErrBadSignature", err)
			}
			return
		}
		again, err := s.Sign(g)
		if err != nil || again != in {
			t.Fatalf("accepted %q, which is not the signing of %+v (%q, %v)", in, g, again, err)
		}
	})
}

// BenchmarkVerify: the cost of checking a signed token, once per token
// (fresh: every write brings a new grant) and for a holder's later writes
// (cached).
func BenchmarkVerify(b *testing.B) {
	pub, s := newKey(b)
	b.Run("fresh", func(b *testing.B) {
		v := newVerifier(b, pub)
		tokens := make([]string, b.N)
		for i := range tokens {
			tokens[i] = sign(b, s, "totals/77", fencing.Token(i+1))
		}
		b.ReportAllocs()
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			if _, err := v.VerifyFor(tokens[i], "totals/77", "totals"); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("cached", func(b *testing.B) {
		v := newVerifier(b, pub)
		tok := sign(b, s, "totals/77", 1)
		b.ReportAllocs()
		for i := 0; i < b.N; i++ {
			if _, err := v.VerifyFor(tok, "totals/77", "totals"); err != nil {
				b.Fatal(err)
			}
		}
	})
}

func BenchmarkSign(b *testing.B) {
	_, s := newKey(b)
	g := fencing.Grant{Cluster: 1, Name: "totals/77", Token: 1, Lease: 1, IssuedAt: time.Now()}
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		g.Token++
		if _, err := s.Sign(g); err != nil {
			b.Fatal(err)
		}
	}
}
