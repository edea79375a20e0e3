package cli

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strconv"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
)

// traceSettings are fence serve's tracing flags. Tracing is off unless
// endpoint is set.
type traceSettings struct {
	endpoint string  // --otlp-endpoint: the OTLP/gRPC collector, host:port
	insecure bool    // --otlp-insecure: plaintext to it
	ratio    float64 // --trace-sample-ratio: of the traces this node starts
}

// validate reports what is wrong with the settings, all of it.
func (s traceSettings) validate() error {
	var errs []error
	if s.endpoint != "" {
		host, port, err := net.SplitHostPort(s.endpoint)
		if n, perr := strconv.Atoi(port); err != nil || host == "" || perr != nil || n < 1 || n > 65535 {
			errs = append(errs, fmt.Errorf("--otlp-endpoint %q: give the collector's host:port (its OTLP/gRPC port, usually 4317)", s.endpoint))
		}
	} else if s.insecure {
		errs = append(errs, errors.New("--otlp-insecure: tracing is off without --otlp-endpoint"))
	}
	if !(s.ratio >= 0 && s.ratio <= 1) {
		errs = append(errs, fmt.Errorf("--trace-sample-ratio %v: give a fraction from 0 to 1", s.ratio))
	}
	return errors.Join(errs...)
}

// tracerProvider returns the provider that exports this node's spans to
// the collector (nil when tracing is off) and the function that flushes
// and stops it. The exporter dials lazily: a collector that is down costs
// dropped spans (logged), never the node. Beyond the flags, the exporter
// reads the standard OTEL_EXPORTER_OTLP_* (or _TRACES_*) variables —
// headers, timeout, compression, certificate — and the resource reads
// OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES; the flags win.
func (s traceSettings) tracerProvider(ctx context.Context, nodeID string, log *slog.Logger) (*sdktrace.TracerProvider, func(context.Context) error, error) {
	if s.endpoint == "" {
		return nil, func(context.Context) error { return nil }, nil
	}
	opts := []otlptracegrpc.Option{otlptracegrpc.WithEndpoint(s.endpoint)}
	if s.insecure {
		opts = append(opts, otlptracegrpc.WithInsecure())
	}
	exp, err := otlptracegrpc.New(ctx, opts...)
	if err != nil {
		return nil, nil, fmt.Errorf("--otlp-endpoint %s: %w", s.endpoint, err)
	}
	res, err := resource.New(ctx, resource.WithTelemetrySDK(),
		resource.WithAttributes(attribute.String("service.name", "fence"), attribute.String("service.instance.id", nodeID)),
		resource.WithFromEnv()) // last: the environment's values win
	if err != nil {
		log.Warn("tracing: part of the resource could not be read; exporting with the rest", "err", err)
	}
	otel.SetErrorHandler(otel.ErrorHandlerFunc(func(err error) { log.Warn("tracing: export failed", "err", err) }))
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res),
		sdktrace.WithSampler(sdktrace.ParentBased(sdktrace.TraceIDRatioBased(s.ratio))))
	return tp, tp.Shutdown, nil
}
