package main

import (
	"context"
	"fmt"
	"net"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/keepalive"

	"github.com/budgetd/budgetd/internal/envoy"
	budgethttp "github.com/budgetd/budgetd/internal/http"
)

// listenGRPC binds --grpc-addr, when given, and makes the Envoy rate-limit
// service on it (docs/envoy.md): over the API's service, with the same
// keys, TLS files (reloaded on SIGHUP), connection cap (--max-conns and
// --max-conns-per-ip count the connections of both listeners together)
// and, through rpc, the same metrics and access log. Its descriptors map
// to limits by the envoy member of --limits-file; without one no
// descriptor is limited.
func (d *daemon) listenGRPC(rpc *budgethttp.RPC) error {
	cfg := d.cfg
	if cfg.grpcAddr == "" {
		return nil
	}
	mapping, err := envoy.NewMapping(d.envoyDomains())
	if err != nil {
		return usageError{fmt.Sprintf("--limits-file: %v", err)}
	}
	opts := []envoy.Option{envoy.WithLogger(d.log), envoy.WithObserver(rpc)}
	if cfg.authFile != "" {
		opts = append(opts, envoy.WithAuth(d.keys.Load))
	}
	d.rls = envoy.NewServer(d.svc, mapping, opts...)
	// A connection has as long for its handshake as an HTTP one for its
	// request header (and 1 s when every slot is taken: connCap), and is
	// closed (GOAWAY, which clients answer by dialling again when they next
	// call) once it has had no call for --idle-timeout, as an idle HTTP
	// one: connCap never sheds a gRPC connection, so without this one
	// a gateway left behind would hold its slot for good.
	sopts := []grpc.ServerOption{grpc.ConnectionTimeout(headerTimeout),
		grpc.KeepaliveParams(keepalive.ServerParameters{MaxConnectionIdle: cfg.idleTimeout})}
	if d.certs != nil {
		sopts = append(sopts, grpc.Creds(credentials.NewTLS(d.certs.config())))
	}
	if d.tracing != nil {
		// Each call's server span, the parent of its decisions' spans.
		sopts = append(sopts, grpc.ChainUnaryInterceptor(d.tracing.UnaryServerInterceptor()))
	}
	ln, err := net.Listen("tcp", cfg.grpcAddr)
	if err != nil {
		return fmt.Errorf("listen on %s (--grpc-addr): %w", cfg.grpcAddr, err)
	}
	d.grpcLn, d.grpcSrv = d.conns.grpcListener(ln), d.rls.GRPC(sopts...)
	return nil
}

// envoyDomains is the Envoy mapping of --limits-file: its envoy member,
// none without a file.
func (d *daemon) envoyDomains() []envoy.Domain {
	if d.limits == nil {
		return nil
	}
	return d.limits.Envoy
}

// serveGRPC serves the rate-limit service, if any, until stopGRPC; its
// failure is sent on served.
func (d *daemon) serveGRPC(served chan<- error) {
	if d.grpcSrv == nil {
		return
	}
	scheme := "grpc"
	if d.certs != nil {
		scheme = "grpcs"
	}
	url := scheme + "://" + d.grpcLn.Addr().String()
	d.out.Info("budgetd: Envoy's rate-limit service on "+url, "grpc_url", url)
	go func() {
		if err := d.grpcSrv.Serve(d.grpcLn); err != nil {
			served <- fmt.Errorf("grpc: %w", err)
		}
	}()
}

// drainGRPC makes health checks answer NOT_SERVING, as /readyz answers 503.
func (d *daemon) drainGRPC() {
	if d.rls != nil {
		d.rls.Drain()
	}
}

// stopGRPC lets the calls in flight finish, until ctx ends; then it ends
// them.
func (d *daemon) stopGRPC(ctx context.Context) {
	if d.grpcSrv == nil {
		return
	}
	stopped := make(chan struct{})
	go func() {
		d.grpcSrv.GracefulStop()
		close(stopped)
	}()
	select {
	case <-stopped:
	case <-ctx.Done():
		d.grpcSrv.Stop()
		<-stopped
	}
}
