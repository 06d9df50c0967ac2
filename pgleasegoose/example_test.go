package pgleasegoose_test

import (
	"context"
	"database/sql"
	"fmt"
	"log"
	"os"
	"testing/fstest"

	_ "github.com/jackc/pgx/v5/stdlib" // database/sql driver "pgx"
	"github.com/pressly/goose/v3"
	"github.com/pressly/goose/v3/database"

	"github.com/pglease/pglease"
	"github.com/pglease/pglease/pgleasegoose"
)

// Every pod of a deployment runs this at start-up: one of them applies
// the migrations while the others wait for its lease, then find nothing
// left to do. With fast failover, a pod killed mid-migration hands over at
// once. A pod that loses the lease stops: its migration cannot commit.
func Example() {
	ctx := context.Background()
	dsn := os.Getenv("DATABASE_URL")

	leases, err := pglease.Open(ctx, dsn, pglease.Config{Table: "example_goose_leases"})
	if err != nil {
		log.Fatal(err)
	}
	defer leases.Close()
	db, err := sql.Open("pgx", dsn)
	if err != nil {
		log.Fatal(err)
	}
	defer db.Close()

	migrations := fstest.MapFS{ // usually an embed.FS of .sql files
		"00001_widgets.sql": {Data: []byte(`-- +goose Up
CREATE TABLE example_goose_widgets (id bigint PRIMARY KEY);
-- +goose Down
DROP TABLE example_goose_widgets;
`)},
	}
	locker := pgleasegoose.New(leases, "goose", pglease.WithFastFailover())
	// goose's version table, each row written only while the lease is held.
	store, err := locker.Store(database.DialectPostgres, "example_goose_db_version")
	if err != nil {
		log.Fatal(err)
	}
	p, err := goose.NewProvider(goose.DialectCustom, db, migrations,
		goose.WithStore(store), goose.WithSessionLocker(locker))
	if err != nil {
		log.Fatal(err)
	}
	upCtx, cancel := locker.Context(ctx) // ends if the lease is lost: goose stops at once
	defer cancel()
	results, err := p.Up(upCtx)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("applied", len(results), "migration(s)")

	// Clean up after the example.
	if _, err := p.DownTo(ctx, 0); err != nil {
		log.Fatal(err)
	}
	if _, err := db.ExecContext(ctx, `DROP TABLE example_goose_db_version`); err != nil {
		log.Fatal(err)
	}
	// Output:
	// applied 1 migration(s)
}
