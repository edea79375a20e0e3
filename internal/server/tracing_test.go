package server_test

import (
	"bufio"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/fencehq/fence/api"
	"github.com/fencehq/fence/client"
	"github.com/fencehq/fence/internal/audit"
	"github.com/fencehq/fence/internal/locktest"
	"github.com/fencehq/fence/internal/server"
)

// TestTracingSpanTree takes one Lock and releases it with a tracing client
// against a tracing single-node server (each with its own provider and
// in-memory recorder, as two processes would have) and checks the span
// tree: test span → fence.client.acquire → the server's Acquire span (same
// trace, remote parent) → fence.raft.propose, .commit and .apply; the same
// for the release; and that the audit line of the grant carries the
// acquire's trace id.
func TestTracingSpanTree(t *testing.T) {
	clientSpans, serverSpans := tracetest.NewSpanRecorder(), tracetest.NewSpanRecorder()
	clientTP := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(clientSpans))
	serverTP := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(serverSpans))
	path := filepath.Join(t.TempDir(), "audit.jsonl")
	srv := locktest.Start(t, func(c *server.Config) { c.AuditFile, c.TracerProvider = path, serverTP })
	ctx, root := clientTP.Tracer("test").Start(t.Context(), "test")
	l := locktest.LockOnce(ctx, t, srv, "traced", client.WithTracerProvider(clientTP))
	root.End()

	byName := func(spans []sdktrace.ReadOnlySpan, name string, parent trace.SpanContext) sdktrace.ReadOnlySpan {
		t.Helper()
		var found []sdktrace.ReadOnlySpan
		for _, s := range spans {
			if s.Name() == name && s.Parent().SpanID() == parent.SpanID() {
				found = append(found, s)
			}
		}
		if len(found) != 1 {
			t.Fatalf("%d spans %q under span %s, want 1; spans: %s", len(found), name, parent.SpanID(), describe(spans))
		}
		if s := found[0]; s.SpanContext().TraceID() != parent.TraceID() {
			t.Fatalf("span %q in trace %s, want its parent's %s", name, s.SpanContext().TraceID(), parent.TraceID())
		}
		return found[0]
	}
	cs, ss := clientSpans.Ended(), serverSpans.Ended()
	rootSC := root.SpanContext()
	for _, call := range []struct{ client, method, command string }{
		{"fence.client.acquire", api.FenceService_Acquire_FullMethodName, "acquire"},
		{"fence.client.release", api.FenceService_Release_FullMethodName, "release"},
	} {
		c := byName(cs, call.client, rootSC)
		wantAttrs(t, c, attribute.String("fence.lock.name", "traced"), attribute.Int64("fence.token", int64(l.Token())),
			attribute.Int64("fence.lease", int64(l.LeaseNumber())))
		h := byName(ss, strings.TrimPrefix(call.method, "/"), c.SpanContext())
		if !h.Parent().IsRemote() || h.SpanKind() != trace.SpanKindServer {
			t.Errorf("%s: parent remote %v, kind %v; want a server span with a remote parent", h.Name(), h.Parent().IsRemote(), h.SpanKind())
		}
		var index attribute.Value
		for _, stage := range []string{"fence.raft.propose", "fence.raft.commit", "fence.raft.apply"} {
			s := byName(ss, stage, h.SpanContext())
			wantAttrs(t, s, attribute.String("fence.command", call.command), attribute.Int("fence.raft.batch_size", 1))
			if s.StartTime().Before(h.StartTime()) || s.EndTime().After(h.EndTime()) {
				t.Errorf("%s [%v, %v] outside its handler's span [%v, %v]", stage, s.StartTime(), s.EndTime(), h.StartTime(), h.EndTime())
			}
			if stage != "fence.raft.propose" {
				index = attrOf(s, "fence.raft.index")
			}
		}
		if index.AsInt64() == 0 {
			t.Errorf("%s: no raft index on its commit and apply spans", call.command)
		}
	}
	// The session the Lock opened: its CreateLease is in the acquire's trace.
	byName(ss, strings.TrimPrefix(api.FenceService_CreateLease_FullMethodName, "/"), byName(cs, "fence.client.acquire", rootSC).SpanContext())

	grant := auditEvent(t, path, "granted")
	if want := rootSC.TraceID().String(); grant.TraceID != want {
		t.Errorf("audit line of the grant: trace id %q, want %q", grant.TraceID, want)
	}
}

// describe lists spans by name and parent, for failure messages.
func describe(spans []sdktrace.ReadOnlySpan) string {
	var out []string
	for _, s := range spans {
		out = append(out, s.Name()+"("+s.SpanContext().SpanID().String()+"<-"+s.Parent().SpanID().String()+")")
	}
	return strings.Join(out, " ")
}

// attrOf returns s's attribute key (an empty value if s lacks it).
func attrOf(s sdktrace.ReadOnlySpan, key attribute.Key) attribute.Value {
	for _, a := range s.Attributes() {
		if a.Key == key {
			return a.Value
		}
	}
	return attribute.Value{}
}

// wantAttrs checks that s has each of want.
func wantAttrs(t *testing.T, s sdktrace.ReadOnlySpan, want ...attribute.KeyValue) {
	t.Helper()
	for _, w := range want {
		if !slices.Contains(s.Attributes(), w) {
			t.Errorf("span %s: attributes %v lack %v", s.Name(), s.Attributes(), w)
		}
	}
}

// auditEvent returns the one event of kind in the audit file at path.
func auditEvent(t *testing.T, path, kind string) audit.Event {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var found []audit.Event
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var rec audit.Record
		if err := json.Unmarshal(sc.Bytes(), &rec); err != nil {
			t.Fatalf("%q: %v", sc.Text(), err)
		}
		for _, e := range rec.Events {
			if e.Kind == kind {
				found = append(found, e)
			}
		}
	}
	if len(found) != 1 {
		t.Fatalf("%d %s events in the audit file, want 1: %+v", len(found), kind, found)
	}
	return found[0]
}
