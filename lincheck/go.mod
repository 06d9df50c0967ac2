module github.com/pglease/pglease/lincheck

go 1.26.0

require github.com/anishathalye/porcupine v1.3.1
