package cli

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"time"

	"github.com/spf13/cobra"

	"github.com/fencehq/fence/internal/pki"
)

// dashboardShutdown bounds how long a stopped 'fence dashboard' waits for
// the requests in flight (an event stream is cut, not waited for).
const dashboardShutdown = 2 * time.Second

func newDashboard(g *globals) *cobra.Command {
	var metrics, listen string
	cmd := &cobra.Command{
		Use:   "dashboard",
		Short: "Open a server's dashboard (/ui) in a browser, as this machine's fence commands connect",
		Long: `dashboard serves a server's live dashboard (its metrics port's /ui) on a local
plain-HTTP address and passes each of the page's requests on with the
certificates fence commands use (--ca/--cert/--key, $FENCE_CA/$FENCE_CERT/
$FENCE_KEY, or the dev server's in ./fence-data/tls), like kubectl proxy:
the browser needs no client certificate of its own and no trust in the
cluster's CA. Open the address it prints.

It listens only on a loopback address, answers only pages that name it by a
loopback address or localhost (a web page whose name was made to resolve to
127.0.0.1 gets nothing), and refuses cross-site writes: whoever can reach it
acts with this machine's certificate. Under a policy the page may still ask
for a bearer token; it is passed on. Stop it with Ctrl-C.`,
		Example: "  fence dashboard                      # the dev server: open http://127.0.0.1:7310/ui/\n" +
			"  fence dashboard --metrics fence-1.internal:7301 --ca ca.crt --cert me.crt --key me.key",
		Args: usage(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if !pki.IsLoopback(listen) {
				return usageError(cmd, fmt.Errorf("--listen %s: give a loopback address (127.0.0.1:PORT, [::1]:PORT or localhost:PORT): whoever reaches it acts with this machine's certificate", listen))
			}
			target, hc, err := g.metricsPort("--metrics", metrics, "")
			if err != nil {
				return err
			}
			target.Path, target.RawQuery = "", ""
			lis, err := net.Listen("tcp", listen)
			if err != nil {
				return fmt.Errorf("--listen %s: %w", listen, err)
			}
			srv := &http.Server{Handler: dashboardProxy(target, hc.Transport), ReadHeaderTimeout: 10 * time.Second}
			fmt.Fprintf(cmd.OutOrStdout(), "dashboard of %s at http://%s/ui/ (Ctrl-C stops)\n", target, lis.Addr())
			return serveUntilDone(cmd.Context(), srv, lis)
		},
	}
	f := cmd.Flags()
	f.StringVar(&metrics, "metrics", "127.0.0.1:7301", "the server's metrics port (its --metrics-addr), or its URL")
	f.StringVar(&listen, "listen", "127.0.0.1:7310", "the local address to serve the dashboard on (loopback only)")
	return cmd
}

// dashboardProxy passes requests for /ui/ to target over rt (nil: plain
// HTTP), for pages that name this proxy by a loopback address, with
// cross-origin writes refused.
func dashboardProxy(target *url.URL, rt http.RoundTripper) http.Handler {
	proxy := &httputil.ReverseProxy{
		Rewrite:   func(r *httputil.ProxyRequest) { r.SetURL(target) }, // and the Host header: the server's own
		Transport: rt,
		ErrorHandler: func(w http.ResponseWriter, _ *http.Request, err error) {
			http.Error(w, fmt.Sprintf("fence dashboard: %s: %v", target, err), http.StatusBadGateway)
		},
	}
	mux := http.NewServeMux()
	mux.Handle("/ui/", proxy)
	mux.Handle("/{$}", http.RedirectHandler("/ui/", http.StatusFound))
	guarded := http.NewCrossOriginProtection().Handler(mux)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !pki.IsLoopbackHost(r.Host) {
			http.Error(w, fmt.Sprintf("fence dashboard: open it at a loopback address (http://127.0.0.1:PORT/ui/) or localhost, not %q", r.Host), http.StatusForbidden)
			return
		}
		guarded.ServeHTTP(w, r)
	})
}

// serveUntilDone serves srv on lis until ctx ends, then shuts it down.
func serveUntilDone(ctx context.Context, srv *http.Server, lis net.Listener) error {
	served := make(chan error, 1)
	go func() { served <- srv.Serve(lis) }()
	select {
	case err := <-served:
		return err
	case <-ctx.Done():
	}
	stop, cancel := context.WithTimeout(context.Background(), dashboardShutdown)
	defer cancel()
	if err := srv.Shutdown(stop); err != nil && !errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	srv.Close() // event streams still open
	<-served
	return nil
}
