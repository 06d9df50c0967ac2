//go:build !unix

package pglease

import (
	"errors"
	"net"
	"os"
)

func dupConn(net.Conn) (*os.File, error) {
	return nil, errors.New("pglease: sharing the dedicated connection's descriptor needs a Unix system")
}
