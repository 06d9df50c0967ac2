package pglease

import "context"

// The hooks: what the recipes (the elector, Run, LeaseSet) use of the
// client beyond its exported API, as etcd's mutex and election use their
// Session. A recipe calls these two and nothing else unexported of Client
// (recipes_test.go keeps the rule); their bodies are where the recipes
// meet the wake-ups and the client's life, so a change there leaves the
// recipes alone.

// goBackground runs fn on a goroutine that Close waits for, with a context
// that ends when Close stops the client's background work. Once Close
// waits it starts nothing and returns false.
func (c *Client) goBackground(fn func(ctx context.Context)) bool {
	return c.life.goBackground(func() { fn(c.life.bg) })
}
