package main

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"sync/atomic"
)

// certReloader serves the certificate and client CAs most recently loaded,
// so that SIGHUP can replace them without a restart.
type certReloader struct {
	certFile, keyFile, caFile string
	current                   atomic.Pointer[tls.Config]
}

func newCertReloader(cfg config) (*certReloader, error) {
	r := &certReloader{certFile: cfg.tlsCert, keyFile: cfg.tlsKey, caFile: cfg.tlsClientCA}
	if err := r.load(); err != nil {
		return nil, err
	}
	return r, nil
}

// load reads the files; on any error the configuration in force stays.
func (r *certReloader) load() error {
	cert, err := tls.LoadX509KeyPair(r.certFile, r.keyFile)
	if err != nil {
		return fmt.Errorf("--tls-cert/--tls-key: %w", err)
	}
	c := &tls.Config{MinVersion: tls.VersionTLS12, Certificates: []tls.Certificate{cert}, NextProtos: []string{"h2", "http/1.1"}}
	if r.caFile != "" {
		pem, err := os.ReadFile(r.caFile)
		if err != nil {
			return fmt.Errorf("--tls-client-ca: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return errors.New("--tls-client-ca: no PEM certificate in " + r.caFile)
		}
		c.ClientCAs, c.ClientAuth = pool, tls.RequireAndVerifyClientCert
	}
	r.current.Store(c)
	return nil
}

// config is the listener's TLS configuration: each handshake takes the
// configuration loaded last.
func (r *certReloader) config() *tls.Config {
	return &tls.Config{
		MinVersion: tls.VersionTLS12,
		NextProtos: []string{"h2", "http/1.1"},
		GetConfigForClient: func(*tls.ClientHelloInfo) (*tls.Config, error) {
			return r.current.Load(), nil
		},
	}
}
