module github.com/pglease/pglease/cmd/pglease

go 1.26.0

require github.com/pglease/pglease v0.1.0
