package main

import (
	"context"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
)

// ---- the upsert reference with notifications ----

// notifyBell is the upsert reference's doorbell in peer ref-notify: one
// connection of the locker listens on the table's channel, and every
// notification (a release) ends the current generation, waking every
// blocked lock of the locker to try again. It is the least a durable
// hand-off through a table can do: the release's DELETE notifies in its
// own statement, without waiting for its WAL flush, and the waiter's
// INSERT waits for its own; no queue, no token order beyond the
// sequence's, no session binding, no liveness of the waiters. Every
// waiter of every locker wakes at each release (a herd), and one wins.
type notifyBell struct {
	conn *pgx.Conn
	mu   sync.Mutex
	gen  chan struct{}
	done chan struct{}
}

// fallbackWait bounds a blocked lock's wait for a notification (a
// notification sent before the waiter's try committed its refusal is not
// missed: the generation is taken before the try).
const fallbackWait = time.Second

func openNotifyBell(ctx context.Context, dsn, channel string) (*notifyBell, error) {
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return nil, err
	}
	if _, err := conn.Exec(ctx, "LISTEN "+pgx.Identifier{channel}.Sanitize()); err != nil {
		conn.Close(ctx)
		return nil, err
	}
	b := &notifyBell{conn: conn, gen: make(chan struct{}), done: make(chan struct{})}
	go b.loop()
	return b, nil
}

func (b *notifyBell) loop() {
	defer close(b.done)
	for {
		if _, err := b.conn.WaitForNotification(context.Background()); err != nil {
			return // closed
		}
		b.mu.Lock()
		close(b.gen)
		b.gen = make(chan struct{})
		b.mu.Unlock()
	}
}

// current is the generation a waiter waits on; take it before the try.
func (b *notifyBell) current() <-chan struct{} {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.gen
}

func (b *notifyBell) close() {
	_ = b.conn.PgConn().Conn().Close() // ends WaitForNotification
	<-b.done
}
