package pglease_test

import (
	"context"
	"log"
	"net/http"
	"os"
	"time"

	"github.com/pglease/pglease"
)

// A leader's liveness probe: /healthz fails (503) when the lead function
// is still running 15s after its term ended, as when it is stuck in a call
// that ignores its context; Kubernetes then restarts the process, and
// another replica can lead. Failing renewals alone leave it healthy: the
// term ends, lead returns and the elector campaigns again.
//
//	livenessProbe:
//	  httpGet: {path: /healthz, port: 8080}
//	  periodSeconds: 10
//	  failureThreshold: 3
func ExampleElector_ServeHTTP() {
	ctx := context.Background()
	client, err := pglease.Open(ctx, os.Getenv("DATABASE_URL"), pglease.Config{})
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close()

	elector, err := client.NewElector("example-controller-leader", func(ctx context.Context) error {
		<-ctx.Done() // lead until leadership ends, then return promptly
		return nil
	}, pglease.ElectorConfig{HealthTolerance: 15 * time.Second})
	if err != nil {
		log.Fatal(err)
	}

	mux := http.NewServeMux()
	mux.Handle("/healthz", elector)
	srv := &http.Server{Addr: ":8080", Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() { log.Println(srv.ListenAndServe()) }()
	defer srv.Close()

	if err := elector.Run(ctx); err != nil {
		log.Println(err)
	}
}
