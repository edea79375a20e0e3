package server

import (
	"testing"

	"github.com/fencehq/fence/api"
)

// TestEveryMethodHasANeed: under a policy an unlisted method is refused, so
// a new RPC must say what it needs.
func TestEveryMethodHasANeed(t *testing.T) {
	for _, m := range api.FenceService_ServiceDesc.Methods {
		if _, ok := needs["/"+api.FenceService_ServiceDesc.ServiceName+"/"+m.MethodName]; !ok {
			t.Errorf("%s has no entry in needs", m.MethodName)
		}
	}
	for _, st := range api.FenceService_ServiceDesc.Streams {
		if _, ok := needs["/"+api.FenceService_ServiceDesc.ServiceName+"/"+st.StreamName]; !ok {
			t.Errorf("%s has no entry in needs", st.StreamName)
		}
	}
}
