package pglease_test

import (
	"context"
	"os"

	"github.com/jackc/pgx/v5"
)

func pgxConnect(ctx context.Context) (*pgx.Conn, error) {
	return pgx.Connect(ctx, os.Getenv("DATABASE_URL"))
}
