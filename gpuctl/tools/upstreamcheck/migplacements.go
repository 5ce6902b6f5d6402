package main

import (
	"flag"
	"fmt"
	"sort"
	"strings"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/gpus"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/server"
	"github.com/NVIDIA/mig-parted/pkg/types"
)

// mockGPUs are go-nvml's mock GPU models (pkg/nvml/mock/gpus); the A100 PCIe and SXM4
// variants share their MIG profiles and placements.
var mockGPUs = map[string]gpus.Config{
	"a100-40gb": gpus.A100_SXM4_40GB,
	"a100-80gb": gpus.A100_SXM4_80GB,
	"a30":       gpus.A30_PCIE_24GB,
}

type placementsResult struct {
	GPU      string          `json:"gpu"`
	Product  string          `json:"product"` // the mock's product name
	Profiles []profileResult `json:"profiles"`
}

type profileResult struct {
	ID         int         `json:"id"` // NVML GPU-instance profile ID
	Name       string      `json:"name"`
	Slices     uint32      `json:"slices"`
	MemoryMiB  uint64      `json:"memoryMiB"`
	Placements []placement `json:"placements"`
}

type placement struct {
	Start uint32 `json:"start"`
	Size  uint32 `json:"size"`
}

func migPlacements(args []string) (any, error) {
	fs := flag.NewFlagSet("mig-placements", flag.ContinueOnError)
	model := fs.String("gpu", "", "the GPU model")
	if err := parseFlags(fs, args, "gpu"); err != nil {
		return nil, err
	}
	config, ok := mockGPUs[*model]
	if !ok {
		known := make([]string, 0, len(mockGPUs))
		for k := range mockGPUs {
			known = append(known, k)
		}
		sort.Strings(known)
		return nil, usagef("mig-placements: --gpu must be one of %s", strings.Join(known, ", "))
	}

	srv, err := server.New(server.WithGPUs(config))
	if err != nil {
		return nil, err
	}
	gpu, ret := srv.DeviceGetHandleByIndex(0)
	if ret != nvml.SUCCESS {
		return nil, fmt.Errorf("mock GPU: %v", ret)
	}
	memory, ret := gpu.GetMemoryInfo()
	if ret != nvml.SUCCESS {
		return nil, fmt.Errorf("mock GPU memory: %v", ret)
	}

	out := placementsResult{GPU: *model, Product: config.Name, Profiles: []profileResult{}}
	for id := 0; id < nvml.GPU_INSTANCE_PROFILE_COUNT; id++ {
		info, ret := gpu.GetGpuInstanceProfileInfo(id)
		if ret == nvml.ERROR_NOT_SUPPORTED || ret == nvml.ERROR_INVALID_ARGUMENT {
			continue
		}
		if ret != nvml.SUCCESS {
			return nil, fmt.Errorf("GPU instance profile %d: %v", id, ret)
		}
		found, ret := gpu.GetGpuInstancePossiblePlacements(&info)
		if ret != nvml.SUCCESS {
			return nil, fmt.Errorf("placements of GPU instance profile %d: %v", id, ret)
		}
		name, err := profileName(config, id, info, memory.Total)
		if err != nil {
			return nil, err
		}
		p := profileResult{ID: id, Name: name, Slices: info.SliceCount, MemoryMiB: info.MemorySizeMB,
			Placements: []placement{}}
		for _, pl := range found {
			p.Placements = append(p.Placements, placement{pl.Start, pl.Size})
		}
		out.Profiles = append(out.Profiles, p)
	}
	return out, nil
}

// profileName names a GPU-instance profile ("1g.5gb", "1g.5gb+me", "1g.10gb") with
// mig-parted's types.NewMigProfile (go-nvlib underneath), the helper mig-parted uses to name
// the MIG devices it finds (pkg/mig/config/config.go), for the compute instance that spans
// the whole GPU instance. (go-nvlib's VisitMigProfiles cannot be used: with go-nvml
// v0.13.3-1 it fails on the new COMPUTE_INSTANCE_PROFILE_7_SLICE_NVL, ID 8.)
func profileName(config gpus.Config, giProfileID int, info nvml.GpuInstanceProfileInfo, memoryBytes uint64) (string, error) {
	for ciProfileID, ci := range config.MIGProfiles.ComputeInstanceProfiles[giProfileID] {
		if ci.SliceCount != info.SliceCount {
			continue
		}
		p, err := types.NewMigProfile(giProfileID, ciProfileID, nvml.COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED,
			info.MemorySizeMB, memoryBytes)
		if err != nil {
			return "", err
		}
		return p.String(), nil
	}
	return "", fmt.Errorf("GPU instance profile %d: no compute instance profile of %d slices", giProfileID, info.SliceCount)
}
