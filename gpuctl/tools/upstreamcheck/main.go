// Command upstreamcheck checks gpuctl's outputs with the real upstream Go code of the NVIDIA
// device plugin, mig-parted and go-nvml, imported as modules (never copied). Where the logic
// to check lives in an upstream `main` package, which Go cannot import, it is mirrored here
// in a few lines that cite the upstream file.
//
// Every subcommand prints JSON on stdout. A refusal exits 1 with one line on stderr: the
// error text the upstream program logs. Usage errors exit 2.
package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"runtime/debug"
	"strings"
)

// Version is what `upstreamcheck --version` prints; gpuctl pins it (gpuctl/tools/pins.py), so
// bump it whenever this program's behaviour changes, or gpuctl keeps using a cached older build.
const Version = "v2"

const usage = `usage: upstreamcheck COMMAND [FLAGS]
  --version          print "upstreamcheck ` + Version + `"
  version            upstream module versions this binary was built with
  plugin-config      --dir DIR --mig-strategy none|single|mixed [--node-config KEY] [--default KEY]
                     [--fallback-strategies empty] [--compute-capability 8.0] [--mig-enabled]
  mig-parted         --file F
  mig-placements     --gpu a100-40gb|a100-80gb|a30
  mig-apply          --file F --config NAME --gpu a100-40gb|a100-80gb|a30|h100-80gb [--gpus N]`

// usageError makes run exit 2 instead of 1.
type usageError struct{ msg string }

func (e usageError) Error() string { return e.msg }

func usagef(format string, args ...any) error { return usageError{fmt.Sprintf(format, args...)} }

func main() { os.Exit(run(os.Args[1:], os.Stdout, os.Stderr)) }

func run(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprintln(stderr, usage)
		return 2
	}
	var out any
	var err error
	switch args[0] {
	case "--version":
		fmt.Fprintf(stdout, "upstreamcheck %s\n", Version)
		return 0
	case "version":
		out, err = versions()
	case "plugin-config":
		out, err = pluginConfig(args[1:])
	case "mig-parted":
		out, err = migParted(args[1:])
	case "mig-placements":
		out, err = migPlacements(args[1:])
	case "mig-apply":
		out, err = migApply(args[1:])
	case "-h", "--help", "help":
		fmt.Fprintln(stdout, usage)
		return 0
	default:
		err = usagef("unknown command %q", args[0])
	}
	var uerr usageError
	switch {
	case errors.As(err, &uerr):
		fmt.Fprintf(stderr, "upstreamcheck: %s\n%s\n", uerr.msg, usage)
		return 2
	case err != nil:
		// One line, as the contract with gpuctl says; upstream texts are one line already.
		fmt.Fprintln(stderr, strings.ReplaceAll(err.Error(), "\n", " "))
		return 1
	}
	enc := json.NewEncoder(stdout)
	enc.SetIndent("", "  ")
	if err := enc.Encode(out); err != nil {
		fmt.Fprintln(stderr, err)
		return 1
	}
	return 0
}

// parseFlags parses args with fs, turning every problem (unknown flag, stray argument,
// missing required flag) into a usage error.
func parseFlags(fs *flag.FlagSet, args []string, required ...string) error {
	fs.SetOutput(io.Discard)
	if err := fs.Parse(args); err != nil {
		return usagef("%s: %v", fs.Name(), err)
	}
	if fs.NArg() > 0 {
		return usagef("%s: unexpected argument %q", fs.Name(), fs.Arg(0))
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	for _, name := range required {
		if !set[name] {
			return usagef("%s: --%s is required", fs.Name(), name)
		}
	}
	return nil
}

var upstreamModules = map[string]string{
	"github.com/NVIDIA/k8s-device-plugin": "k8s-device-plugin",
	"github.com/NVIDIA/mig-parted":        "mig-parted",
	"github.com/NVIDIA/go-nvml":           "go-nvml",
}

// versions reports the upstream module versions compiled into this binary, read from the
// build info so that it cannot drift from go.mod.
func versions() (map[string]string, error) {
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return nil, errors.New("no build information in this binary")
	}
	out := map[string]string{"source": Version}
	for _, dep := range info.Deps {
		if dep.Replace != nil {
			dep = dep.Replace
		}
		if key, ok := upstreamModules[dep.Path]; ok {
			out[key] = dep.Version
		}
	}
	return out, nil
}
