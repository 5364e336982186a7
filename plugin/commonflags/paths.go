package commonflags

import (
	"flag"
	"fmt"
	"path/filepath"
)

// CheckAbsolutePaths refuses a relative value of the named flags of fs, for the three node
// programs alike. Their path flags name host paths, directories under --host-root and the
// kubelet's sockets, which the rendered DaemonSets pass as absolute paths: a relative one
// resolves against the container's working directory, which nobody chose, and a gRPC client
// reads "unix://dir/kubelet.sock" as a host named "dir", an error far from the flag. An empty
// value passes (it means "off" where a flag allows it). Call it right after fs.Parse; a name
// fs does not define is a programming error and panics.
func CheckAbsolutePaths(fs *flag.FlagSet, names ...string) error {
	for _, name := range names {
		f := fs.Lookup(name)
		if f == nil {
			panic("commonflags.CheckAbsolutePaths: no flag --" + name)
		}
		v := f.Value.String()
		if v == "" || filepath.IsAbs(v) {
			continue
		}
		example := ""
		if filepath.IsAbs(f.DefValue) {
			example = " such as " + f.DefValue + " (the default)"
		} else if abs, err := filepath.Abs(v); err == nil {
			example = " such as " + abs
		}
		return fmt.Errorf("--%s %q is a relative path: give an absolute path%s; a relative one would resolve against the process's working directory", name, v, example)
	}
	return nil
}
