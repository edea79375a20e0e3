package server

import (
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/reflection"

	"github.com/fencehq/fence/api"
)

// openMethods need no identity under a policy: the standard health service
// (probes have none) and server reflection (it describes the public API).
var openMethods = map[string]bool{
	healthpb.Health_Check_FullMethodName:                             true,
	healthpb.Health_Watch_FullMethodName:                             true,
	healthpb.Health_List_FullMethodName:                              true,
	"/grpc.reflection.v1.ServerReflection/ServerReflectionInfo":      true,
	"/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo": true,
}

// serveHealth registers the standard gRPC health service (grpc.health.v1)
// and server reflection on g, and keeps the health status current until
// stop closes: SERVING, for "" and for fence.v1.FenceService, while this node can
// serve clients — it leads and has taken over, or it follows a leader it
// knows (clients are sent there) — else NOT_SERVING.
func (s *Server) serveHealth(g *grpc.Server, stop <-chan struct{}) {
	hs := health.NewServer()
	healthpb.RegisterHealthServer(g, hs)
	reflection.Register(g)
	set := func() {
		st := healthpb.HealthCheckResponse_NOT_SERVING
		if s.CanServe() {
			st = healthpb.HealthCheckResponse_SERVING
		}
		hs.SetServingStatus("", st)
		hs.SetServingStatus(api.FenceService_ServiceDesc.ServiceName, st)
	}
	set()
	go func() {
		t := time.NewTicker(250 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-t.C:
				set()
			case <-stop:
				hs.Shutdown()
				return
			}
		}
	}()
}

// CanServe reports whether this node can serve clients: it is the ready
// leader, or it follows a leader it knows (and sends clients there).
func (s *Server) CanServe() bool {
	if s.node == nil {
		return false
	}
	if s.Ready() {
		return true
	}
	name, _, _ := s.node.Leader()
	return name != ""
}
