package main

import (
	"flag"
	"fmt"

	v1 "github.com/NVIDIA/mig-parted/api/spec/v1"
	"github.com/NVIDIA/mig-parted/cmd/nvidia-mig-parted/assert"
	"github.com/NVIDIA/mig-parted/pkg/types"
)

type migPartedResult struct {
	Configs map[string][]migConfigResult `json:"configs"`
}

type migConfigResult struct {
	DeviceFilter any             `json:"device-filter,omitempty"`
	Devices      any             `json:"devices"` // "all" or a list of GPU indices
	MigEnabled   bool            `json:"mig-enabled"`
	MigDevices   types.MigConfig `json:"mig-devices"` // profile -> count; {} when MIG is off
}

// migParted reads a mig-parted config file the way `nvidia-mig-parted apply -f F` does:
// assert.ParseConfigFile (an importable package) unmarshals it into api/spec/v1 types,
// whose UnmarshalJSON methods do all the validation. The error wrapping is applyWrapper's
// in mig-parted cmd/nvidia-mig-parted/apply/apply.go.
func migParted(args []string) (any, error) {
	fs := flag.NewFlagSet("mig-parted", flag.ContinueOnError)
	file := fs.String("file", "", "the mig-parted config file (config.yaml of the MIG manager's ConfigMap)")
	if err := parseFlags(fs, args, "file"); err != nil {
		return nil, err
	}
	spec, err := assert.ParseConfigFile(&assert.Flags{ConfigFile: *file})
	if err != nil {
		return nil, fmt.Errorf("error parsing config file: %v", err)
	}
	out := migPartedResult{Configs: map[string][]migConfigResult{}}
	for name, slice := range spec.MigConfigs {
		out.Configs[name] = configResults(slice)
	}
	return out, nil
}

func configResults(slice v1.MigConfigSpecSlice) []migConfigResult {
	out := make([]migConfigResult, 0, len(slice))
	for _, c := range slice {
		devices := c.MigDevices
		if devices == nil {
			devices = types.MigConfig{}
		}
		out = append(out, migConfigResult{c.DeviceFilter, c.Devices, c.MigEnabled, devices})
	}
	return out
}
