package main

import (
	"flag"
	"fmt"
	"io"
	"sort"
	"strings"
	_ "unsafe" // go:linkname, see useMockNvml

	"github.com/sirupsen/logrus"

	nvdev "github.com/NVIDIA/go-nvlib/pkg/nvlib/device"
	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/gpus"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/server"
	v1 "github.com/NVIDIA/mig-parted/api/spec/v1"
	"github.com/NVIDIA/mig-parted/cmd/nvidia-mig-parted/assert"
	"github.com/NVIDIA/mig-parted/pkg/mig/config"
	"github.com/NVIDIA/mig-parted/pkg/mig/mode"
	"github.com/NVIDIA/mig-parted/pkg/mig/state"
	"github.com/NVIDIA/mig-parted/pkg/types"
)

// applyGPUs are the go-nvml mock GPUs (pkg/nvml/mock/gpus) `mig-apply` can apply a config to: the
// mig-placements ones and the H100, whose MIG tables model 7 memory slots where NVIDIA's MIG user guide has
// 8 (3g/7g and 1g.20gb are one slot narrower), so it accepts a few layouts a real H100 refuses and never
// refuses one it accepts. Not the H200 and B200 mocks: their GPU-instance memory sizes are a little over
// 1/8 of the GPU, which go-nvlib's getMigMemorySizeGB rounds up to 1g.35gb / 1g.45gb, so NVIDIA's own
// names (1g.18gb, 1g.23gb, 3g.71gb, ...) match no profile and mig-parted would apply nothing.
var applyGPUs = map[string]gpus.Config{
	"a100-40gb": gpus.A100_SXM4_40GB,
	"a100-80gb": gpus.A100_SXM4_80GB,
	"a30":       gpus.A30_PCIE_24GB,
	"h100-80gb": gpus.H100_SXM5_80GB,
}

type migApplyResult struct {
	Config  string           `json:"config"`
	GPU     string           `json:"gpu"`
	Product string           `json:"product"` // the mock's product name
	GPUs    []appliedGPUInfo `json:"gpus"`
}

type appliedGPUInfo struct {
	Index      int              `json:"index"`
	MigEnabled bool             `json:"mig-enabled"`
	MigDevices types.MigConfig  `json:"mig-devices"` // profile -> count, as mig-parted reads it back; {} when MIG is off
	Placements []placedInstance `json:"placements"`  // one per GPU instance, by start
}

type placedInstance struct {
	Profile string `json:"profile"`
	Start   uint32 `json:"start"`
	Size    uint32 `json:"size"`
}

// migApply answers what `nvidia-mig-parted apply -f FILE -c CONFIG` does on a node of --gpus GPUs of one
// model, with go-nvml's mock of that GPU as the NVML it drives: success and the MIG devices (profile,
// placement) each GPU ends with, or mig-parted's own error (exit 1). The file is parsed and the config
// selected by mig-parted's assert.ParseConfigFile and assert.GetSelectedMigConfig (as applyWrapper does,
// cmd/nvidia-mig-parted/apply/apply.go); the per-GPU steps are those of ApplyMigMode (apply/mode.go) and
// ApplyMigConfig (apply/config.go) through mig-parted's pkg/mig/mode and pkg/mig/config managers, which
// order and create the instances (config.SetMigConfig: iteratePermutationsUntilSuccess); the result is
// read back with config.GetMigConfig and state.Fetch (pkg/mig/state, what `checkpoint` saves).
func migApply(args []string) (any, error) {
	fs := flag.NewFlagSet("mig-apply", flag.ContinueOnError)
	file := fs.String("file", "", "the mig-parted config file (config.yaml of the MIG manager's ConfigMap)")
	selected := fs.String("config", "", "the config to apply (the node's nvidia.com/mig.config label)")
	model := fs.String("gpu", "", "the GPU model")
	count := fs.Int("gpus", 1, "GPUs on the node")
	if err := parseFlags(fs, args, "file", "config", "gpu"); err != nil {
		return nil, err
	}
	gpuConfig, ok := applyGPUs[*model]
	if !ok {
		known := make([]string, 0, len(applyGPUs))
		for k := range applyGPUs {
			known = append(known, k)
		}
		sort.Strings(known)
		return nil, usagef("mig-apply: --gpu must be one of %s", strings.Join(known, ", "))
	}
	if *count < 1 || *count > 16 {
		return nil, usagef("mig-apply: --gpus must be 1 to 16")
	}
	// mig-parted logs every failed ordering at ERROR; stderr carries only the refusal line.
	logrus.SetOutput(io.Discard)

	flags := &assert.Flags{ConfigFile: *file, SelectedConfig: *selected}
	spec, err := assert.ParseConfigFile(flags)
	if err != nil {
		return nil, fmt.Errorf("error parsing config file: %v", err)
	}
	migConfig, err := assert.GetSelectedMigConfig(flags, spec)
	if err != nil {
		return nil, fmt.Errorf("error selecting MIG config: %v", err)
	}

	configs := make([]gpus.Config, *count)
	for i := range configs {
		configs[i] = gpuConfig
	}
	srv, err := server.New(server.WithGPUs(configs...), server.WithNVMLVersion("12.570.0"))
	if err != nil {
		return nil, err
	}
	for _, d := range srv.Devices {
		placeLikeTheDriver(d.(*server.Device))
	}
	if err := useMockNvml(srv); err != nil {
		return nil, err
	}

	modeManager := mode.NewNvmlMigModeManager(srv)
	configManager := config.NewNvmlMigConfigManager(srv)
	// ApplyMigConfigWithHooks (apply/apply.go): the mode for every GPU first, then the devices.
	if err := walkMockGPUs(srv, migConfig, func(mc *v1.MigConfigSpec, i int) error {
		return applyMode(modeManager, mc, i)
	}); err != nil {
		return nil, fmt.Errorf("error applying MIG configuration with hooks: %v", err)
	}
	if err := walkMockGPUs(srv, migConfig, func(mc *v1.MigConfigSpec, i int) error {
		return applyConfig(modeManager, configManager, mc, i)
	}); err != nil {
		return nil, fmt.Errorf("error applying MIG configuration with hooks: %v", err)
	}
	return appliedState(srv, *selected, *model, gpuConfig, configManager)
}

// walkMockGPUs is assert.WalkSelectedMigConfigForEachGPU (cmd/nvidia-mig-parted/assert/assert.go) with the
// mock's GPUs for util.GetGPUDeviceIDs, which reads /proc/modules and the PCI bus of the machine it runs on.
func walkMockGPUs(srv *server.Server, migConfig v1.MigConfigSpecSlice, f func(*v1.MigConfigSpec, int) error) error {
	for _, mc := range migConfig {
		for i, d := range srv.Devices {
			pci, ret := d.GetPciInfo()
			if ret != nvml.SUCCESS {
				return fmt.Errorf("error enumerating GPU device IDs: %v", ret)
			}
			if !mc.MatchesDeviceFilter(types.DeviceID(pci.PciDeviceId)) || !mc.MatchesDevices(i) {
				continue
			}
			spec := mc
			if err := f(&spec, i); err != nil {
				return err
			}
		}
	}
	return nil
}

// applyMode is the per-GPU body of apply.ApplyMigMode (apply/mode.go) with the nvidia module loaded; the
// mock applies a mode at once, so no GPU reset is pending.
func applyMode(modeManager mode.Manager, mc *v1.MigConfigSpec, i int) error {
	desired := mode.Disabled
	if mc.MigEnabled {
		desired = mode.Enabled
	}
	capable, err := modeManager.IsMigCapable(i)
	if err != nil {
		return fmt.Errorf("error checking MIG capable: %v", err)
	}
	if !capable && (mc.MatchesAllDevices() || !mc.MigEnabled) {
		return nil
	}
	if !capable {
		return fmt.Errorf("cannot set MIG mode on non MIG-capable GPU")
	}
	if err := modeManager.SetMigMode(i, desired); err != nil {
		return fmt.Errorf("error setting MIG mode: %v", err)
	}
	return nil
}

// applyConfig is the per-GPU body of apply.ApplyMigConfig (apply/config.go).
func applyConfig(modeManager mode.Manager, configManager config.Manager, mc *v1.MigConfigSpec, i int) error {
	capable, err := modeManager.IsMigCapable(i)
	if err != nil {
		return fmt.Errorf("error checking MIG capable: %v", err)
	}
	if !capable && (mc.MatchesAllDevices() || !mc.MigEnabled) {
		return nil
	}
	if !capable {
		return fmt.Errorf("cannot set MIG config on non MIG-capable GPU")
	}
	m, err := modeManager.GetMigMode(i)
	if err != nil {
		return fmt.Errorf("error getting MIG mode: %v", err)
	}
	if mc.MigEnabled && m == mode.Disabled {
		return fmt.Errorf("unable to apply MIG config with MIG mode disabled")
	}
	if !mc.MigEnabled && m == mode.Enabled {
		return fmt.Errorf("MIG mode is currently enabled, but the configuration specifies it should be disabled")
	}
	if !mc.MigEnabled {
		return nil
	}
	current, err := configManager.GetMigConfig(i)
	if err != nil {
		return fmt.Errorf("error getting MIGConfig: %v", err)
	}
	if current.Equals(mc.MigDevices) {
		return nil
	}
	if err := configManager.SetMigConfig(i, mc.MigDevices); err != nil {
		return fmt.Errorf("error setting MIGConfig: %v", err)
	}
	return nil
}

// placeLikeTheDriver gives the mock's CreateGpuInstance what NVML's has and go-nvml's mock lacks, room: the
// instance takes the lowest free start among the profile's possible placements (the mock's own tables,
// GetGpuInstancePossiblePlacements), and fails with ERROR_INSUFFICIENT_RESOURCES when every one overlaps
// an instance already there. (The lowest-start choice is gpuctl's reading of the driver, as in the MIG
// user guide's `nvidia-smi mig -cgi 9,3g.20gb`: 0:4, then 4:4; mig-parted tries every ordering anyway.)
func placeLikeTheDriver(d *server.Device) {
	d.CreateGpuInstanceFunc = func(info *nvml.GpuInstanceProfileInfo) (nvml.GpuInstance, nvml.Return) {
		possible, ret := d.GetGpuInstancePossiblePlacements(info)
		if ret != nvml.SUCCESS {
			return nil, ret
		}
		for _, p := range possible {
			free := true
			for gi := range d.GpuInstances {
				q := gi.Info.Placement
				if p.Start < q.Start+q.Size && q.Start < p.Start+p.Size {
					free = false
					break
				}
			}
			if free {
				placement := p
				gi, ret := d.CreateGpuInstanceWithPlacement(info, &placement)
				if ret == nvml.SUCCESS {
					placeComputeLikeTheDriver(gi.(*server.GpuInstance), info.SliceCount)
				}
				return gi, ret
			}
		}
		return nil, nvml.ERROR_INSUFFICIENT_RESOURCES
	}
}

// placeComputeLikeTheDriver is the same rule for compute instances: the mock's CreateComputeInstance never
// runs out, so mig-parted's config.SetMigConfig, which first tries the next instance of a profile as a second
// compute instance in the GPU instance it has just made (reuseGI), would put two 3g.20gb in one 3g GPU
// instance. Here the compute instances of a GPU instance hold at most its slices (SliceCount of each
// profile; the mock's compute-instance placement tables are empty).
func placeComputeLikeTheDriver(gi *server.GpuInstance, slices uint32) {
	create := gi.CreateComputeInstanceFunc
	gi.CreateComputeInstanceFunc = func(info *nvml.ComputeInstanceProfileInfo) (nvml.ComputeInstance, nvml.Return) {
		used := uint32(0)
		for ci := range gi.ComputeInstances {
			held, ret := gi.GetComputeInstanceProfileInfo(int(ci.Info.ProfileId), nvml.COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED)
			if ret != nvml.SUCCESS {
				return nil, ret
			}
			used += held.SliceCount
		}
		if used+info.SliceCount > slices {
			return nil, nvml.ERROR_INSUFFICIENT_RESOURCES
		}
		return create(info)
	}
}

// mig-parted's pkg/types parses a profile name ("3g.20gb") against the profiles of the GPUs its package
// NVML finds (pkg/types/nvdev.go: nvdevParseMigProfile -> go-nvlib devicelib.ParseMigProfile), the real
// libnvidia-ml unless types.SetMockNVdevlib swaps in upstream's fixed 40 GB test device. upstreamcheck sets
// the same two package variables to the model's go-nvml mock instead.
//
//go:linkname migPartedNvml github.com/NVIDIA/mig-parted/pkg/types.nvmllib
var migPartedNvml nvml.Interface

//go:linkname migPartedNvdev github.com/NVIDIA/mig-parted/pkg/types.nvdevlib
var migPartedNvdev nvdev.Interface

func useMockNvml(srv *server.Server) error {
	lib := nvdev.New(srv, nvdev.WithVerifySymbols(false))
	known, err := mockProfiles(lib, srv)
	if err != nil {
		return err
	}
	migPartedNvml = srv
	migPartedNvdev = profileList{lib, known}
	return nil
}

// profileList is go-nvlib's device library with the profile list of devicelib.GetMigProfiles made as its
// VisitMigProfiles makes it (pkg/nvlib/device/device.go), except for compute-instance profile IDs
// go-nvlib v0.10.0 cannot name: go-nvml v0.13.3-1 counts COMPUTE_INSTANCE_PROFILE_7_SLICE_NVL (8), on
// which go-nvlib's NewMigProfile fails, so its own list fails for every GPU.
type profileList struct {
	nvdev.Interface
	profiles []nvdev.MigProfile
}

func (l profileList) GetMigProfiles() ([]nvdev.MigProfile, error) { return l.profiles, nil }

// ParseMigProfile is go-nvlib's devicelib.ParseMigProfile (pkg/nvlib/device/mig_profile.go) over the list.
func (l profileList) ParseMigProfile(profile string) (nvdev.MigProfile, error) {
	for _, p := range l.profiles {
		if p.Matches(profile) {
			return p, nil
		}
	}
	return nil, fmt.Errorf("unable to parse profile string into a valid profile")
}

func mockProfiles(lib nvdev.Interface, srv *server.Server) ([]nvdev.MigProfile, error) {
	d := srv.Devices[0]
	memory, ret := d.GetMemoryInfo()
	if ret != nvml.SUCCESS {
		return nil, fmt.Errorf("mock GPU memory: %v", ret)
	}
	var out []nvdev.MigProfile
	for i := 0; i < nvml.GPU_INSTANCE_PROFILE_COUNT; i++ {
		gi, ret := d.GetGpuInstanceProfileInfo(i)
		if ret == nvml.ERROR_NOT_SUPPORTED || ret == nvml.ERROR_INVALID_ARGUMENT {
			continue
		}
		if ret != nvml.SUCCESS {
			return nil, fmt.Errorf("GPU instance profile %d: %v", i, ret)
		}
		for j := 0; j < nvml.COMPUTE_INSTANCE_PROFILE_COUNT; j++ {
			for k := 0; k < nvml.COMPUTE_INSTANCE_ENGINE_PROFILE_COUNT; k++ {
				p, err := lib.NewMigProfile(i, j, k, gi.MemorySizeMB, memory.Total)
				if err != nil {
					if j == nvml.COMPUTE_INSTANCE_PROFILE_7_SLICE_NVL {
						continue
					}
					return nil, fmt.Errorf("error creating MIG profile: %v", err)
				}
				info := p.GetInfo()
				if info.C > info.G || (info.C < info.G && info.C*2 > info.G+1) {
					continue // VisitMigProfiles' own heuristic
				}
				out = append(out, p)
			}
		}
	}
	return out, nil
}

// appliedState reads each GPU back: mig-parted's config.GetMigConfig (the profile counts its assert
// compares) and state.Fetch (the GPU instances with their placements).
func appliedState(srv *server.Server, selected, model string, gpuConfig gpus.Config,
	configManager config.Manager) (*migApplyResult, error) {
	fetched, err := state.NewMigStateManager(srv).Fetch()
	if err != nil {
		return nil, fmt.Errorf("error fetching MIG state: %v", err)
	}
	out := &migApplyResult{Config: selected, GPU: model, Product: gpuConfig.Name, GPUs: []appliedGPUInfo{}}
	for i, device := range fetched.Devices {
		gpu := appliedGPUInfo{Index: i, MigEnabled: device.MigMode == mode.Enabled, MigDevices: types.MigConfig{},
			Placements: []placedInstance{}}
		if gpu.MigEnabled {
			if gpu.MigDevices, err = configManager.GetMigConfig(i); err != nil {
				return nil, fmt.Errorf("error getting MIGConfig: %v", err)
			}
		}
		d := srv.Devices[i]
		memory, _ := d.GetMemoryInfo()
		for _, gi := range device.GpuInstances {
			info, ret := d.GetGpuInstanceProfileInfo(gi.ProfileID)
			if ret != nvml.SUCCESS {
				return nil, fmt.Errorf("GPU instance profile %d: %v", gi.ProfileID, ret)
			}
			for _, ci := range gi.ComputeInstances {
				p, err := types.NewMigProfile(gi.ProfileID, ci.ProfileID, ci.EngProfileID, info.MemorySizeMB, memory.Total)
				if err != nil {
					return nil, err
				}
				gpu.Placements = append(gpu.Placements, placedInstance{p.String(), gi.Placement.Start, gi.Placement.Size})
			}
		}
		sort.Slice(gpu.Placements, func(a, b int) bool { return gpu.Placements[a].Start < gpu.Placements[b].Start })
		out.GPUs = append(out.GPUs, gpu)
	}
	return out, nil
}
