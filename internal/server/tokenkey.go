package server

import (
	"errors"
	"path/filepath"
	"time"

	"github.com/fencehq/fence/api"
	"github.com/fencehq/fence/fencing"
	"github.com/fencehq/fence/internal/fsm"
	"github.com/fencehq/fence/internal/pki"
)

// openTokenKey loads the key that signs grants (Config.TokenKeyFile, or the
// dev setup's in devDir); without either, grants carry no signed token.
func (s *Server) openTokenKey(devDir string) error {
	s.tokenKeyFile = s.cfg.TokenKeyFile
	if s.tokenKeyFile == "" && devDir != "" {
		s.tokenKeyFile = filepath.Join(devDir, pki.TokenKeyFile)
	}
	if s.tokenKeyFile == "" {
		s.log.Info("grants carry no signed token: give --token-key (make one with 'fence certs create-token-key') for storage that verifies them")
		return nil
	}
	return s.loadTokenKey()
}

func (s *Server) loadTokenKey() error {
	key, err := pki.LoadTokenKey(s.tokenKeyFile)
	if err != nil {
		return err
	}
	signer := fencing.NewSigner(key)
	s.signer.Store(signer)
	s.log.Info("signing fencing tokens", "key_file", s.tokenKeyFile, "key_id", signer.KeyID().String())
	return nil
}

// SignsTokens reports whether this node signs its grants (it has a token key).
func (s *Server) SignsTokens() bool { return s.tokenKeyFile != "" }

// ReloadTokenKey re-reads the token key file (fence serve does on SIGHUP):
// grants after it are signed with the new key. An unreadable or invalid
// file changes nothing; the error says why.
func (s *Server) ReloadTokenKey() error {
	if s.tokenKeyFile == "" {
		return errors.New("this node has no token key (--token-key): its grants carry no signed token")
	}
	return s.loadTokenKey()
}

// granted is the answer to an Acquire that got the lock: the grant, and
// its signed statement if this node has a token key.
func (s *Server) granted(name string, r fsm.Result, leaseNumber uint64) *api.AcquireResponse {
	token := r.Token
	resp := &api.AcquireResponse{Name: name, Token: token, LeaseNumber: leaseNumber, Slot: r.Slot, Shared: r.Shared}
	if signer := s.signer.Load(); signer != nil {
		// Sign fails only for names longer than the API accepts.
		resp.SignedToken, _ = signer.Sign(fencing.Grant{Cluster: s.node.ClusterID(), Name: name, Token: token,
			Lease: leaseNumber, IssuedAt: time.Now()})
	}
	return resp
}
