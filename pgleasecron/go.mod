module github.com/pglease/pglease/pgleasecron

go 1.26.0

require (
	github.com/pglease/pglease v0.1.0
	github.com/robfig/cron/v3 v3.0.1
)
