package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strings"

	cli "github.com/urfave/cli/v2"
	"golang.org/x/mod/semver"

	spec "github.com/NVIDIA/k8s-device-plugin/api/config/v1"
)

// operatorEnv is the device plugin container's environment under the GPU Operator
// (gpu-operator assets/state-device-plugin/0500_daemonset.yaml, and CONFIG_FILE from
// handleDevicePluginConfig in controllers/object_controls.go). MIG_STRATEGY is added from
// ClusterPolicy mig.strategy (applyMIGConfiguration there).
var operatorEnv = map[string]string{
	"PASS_DEVICE_SPECS":    "true",
	"FAIL_ON_INIT_ERROR":   "true",
	"DEVICE_LIST_STRATEGY": "envvar",
	"DEVICE_ID_STRATEGY":   "uuid",
	"MPS_ROOT":             "/run/nvidia/mps",
}

// pluginFlags mirrors, from the flags of k8s-device-plugin cmd/nvidia-device-plugin/main.go
// (package main), those that spec.NewConfig and validateFlags read: same names, defaults
// and env vars, so that urfave/cli gives the same command line > env > file precedence.
func pluginFlags() []cli.Flag {
	return []cli.Flag{
		&cli.StringFlag{Name: "mig-strategy", Value: spec.MigStrategyNone, EnvVars: []string{"MIG_STRATEGY"}},
		&cli.BoolFlag{Name: "fail-on-init-error", Value: true, EnvVars: []string{"FAIL_ON_INIT_ERROR"}},
		&cli.BoolFlag{Name: "pass-device-specs", Value: false, EnvVars: []string{"PASS_DEVICE_SPECS"}},
		&cli.StringSliceFlag{Name: "device-list-strategy", Value: cli.NewStringSlice(spec.DeviceListStrategyEnvVar),
			EnvVars: []string{"DEVICE_LIST_STRATEGY"}},
		&cli.StringFlag{Name: "device-id-strategy", Value: spec.DeviceIDStrategyUUID, EnvVars: []string{"DEVICE_ID_STRATEGY"}},
		&cli.StringFlag{Name: "mps-root", EnvVars: []string{"MPS_ROOT"}},
		&cli.StringFlag{Name: "device-discovery-strategy", Value: "auto", EnvVars: []string{"DEVICE_DISCOVERY_STRATEGY"}},
		&cli.IntSliceFlag{Name: "imex-channel-ids", EnvVars: []string{"IMEX_CHANNEL_IDS"}},
		&cli.BoolFlag{Name: "imex-required", EnvVars: []string{"IMEX_REQUIRED"}},
		&cli.StringFlag{Name: "config-file", EnvVars: []string{"CONFIG_FILE"}},
	}
}

type pluginResult struct {
	Selected    string        `json:"selected"`
	MigStrategy string        `json:"migStrategy"`
	Sharing     sharingResult `json:"sharing"`
	Warnings    []string      `json:"warnings"` // what the plugin logs as ignored in the config
}

type sharingResult struct {
	Strategy                   spec.SharingStrategy `json:"strategy"`
	RenameByDefault            bool                 `json:"renameByDefault"`
	FailRequestsGreaterThanOne bool                 `json:"failRequestsGreaterThanOne"`
	Resources                  []resourceResult     `json:"resources"`
}

type resourceResult struct {
	Name     spec.ResourceName `json:"name"`
	Rename   spec.ResourceName `json:"rename"`
	Replicas int               `json:"replicas"`
	Devices  json.RawMessage   `json:"devices"` // "all", a count, or a list, as upstream marshals it
}

var computeCapability = regexp.MustCompile(`^\d+\.\d+$`)

func pluginConfig(args []string) (any, error) {
	fs := flag.NewFlagSet("plugin-config", flag.ContinueOnError)
	dir := fs.String("dir", "", "the mounted device-plugin ConfigMap: one file per key")
	migStrategy := fs.String("mig-strategy", "", "ClusterPolicy mig.strategy")
	nodeConfig := fs.String("node-config", "", "the node's nvidia.com/device-plugin.config label")
	defaultConfig := fs.String("default", "", "ClusterPolicy devicePlugin.config.default")
	fallbacks := fs.String("fallback-strategies", operatorFallbacks, "the config-manager's FALLBACK_STRATEGIES")
	cc := fs.String("compute-capability", "", "the GPU's CUDA compute capability, for the MPS replica limit")
	migEnabled := fs.Bool("mig-enabled", false, "the node's GPUs have MIG mode enabled")
	if err := parseFlags(fs, args, "dir", "mig-strategy"); err != nil {
		return nil, err
	}
	switch *migStrategy {
	case spec.MigStrategyNone, spec.MigStrategySingle, spec.MigStrategyMixed:
	default:
		return nil, usagef("plugin-config: --mig-strategy must be none, single or mixed")
	}
	if *cc != "" && !computeCapability.MatchString(*cc) {
		return nil, usagef("plugin-config: --compute-capability must look like 8.0")
	}

	warnings := captureWarnings() // before any upstream code logs

	// config-manager-init: pick the key; CONFIG_FILE then points at it (or /dev/null).
	var strategies []string
	for _, s := range strings.Split(*fallbacks, ",") { // urfave/cli splits a StringSlice env var this way
		strategies = append(strategies, strings.TrimSpace(s))
	}
	selected, err := selectConfig(*dir, *nodeConfig, *defaultConfig, strategies)
	if err != nil {
		return nil, err
	}
	configFile := configManagerEmptyTo
	if selected != "" {
		configFile = filepath.Join(*dir, selected)
	}

	// nvidia-device-plugin: load and validate, as startPlugins does. Refusals carry the whole
	// chain the container logs, as start/startPlugins in cmd/nvidia-device-plugin/main.go (and
	// start/startDaemons in cmd/mps-control-daemon/main.go) wrap it.
	config, err := loadPluginConfig(configFile, *migStrategy)
	if err != nil {
		return nil, fmt.Errorf("error starting plugins: unable to load config: %v", err)
	}
	spec.DisableResourceNamingInConfig(config)
	if err := validateFlags(config); err != nil {
		return nil, fmt.Errorf("error starting plugins: unable to validate flags: %v", err)
	}
	mps := config.Sharing.SharingStrategy() == spec.SharingStrategyMPS
	// With MIG enabled and strategy single, the plugin's devices are MIG devices (internal/rm/
	// device_map.go); getMPSOptions in internal/plugin/mps.go (an internal package) refuses
	// those. Under "none" the GPUs are served whole; "mixed" is refused by validateFlags.
	if mps && *migEnabled && *config.Flags.MigStrategy != spec.MigStrategyNone {
		return nil, fmt.Errorf("error starting plugins: error getting plugins: unable to create plugins: " +
			"failed to create plugin: sharing using MPS is not supported for MIG devices")
	}

	// nvidia-mps-control-daemon: one MPS server per full GPU takes a bounded number of clients.
	if mps && *cc != "" {
		if err := assertMPSReplicas(config, *cc); err != nil {
			return nil, fmt.Errorf("error starting plugins: error getting daemons: invalid MPS configuration: %w", err)
		}
	}

	return pluginResult{
		Selected:    selected,
		MigStrategy: *config.Flags.MigStrategy,
		Sharing:     sharingOf(config),
		Warnings:    warnings.lines(),
	}, nil
}

// loadPluginConfig runs spec.NewConfig under a urfave/cli context built like the plugin's,
// with the operator's environment, so that file, env and defaults combine exactly as there.
// Mirrors loadConfig in cmd/nvidia-device-plugin/main.go (package main).
func loadPluginConfig(configFile, migStrategy string) (*spec.Config, error) {
	flags := pluginFlags()
	for _, f := range flags {
		for _, env := range f.(interface{ GetEnvVars() []string }).GetEnvVars() {
			os.Unsetenv(env) // only the operator's environment counts, not ours
		}
	}
	env := map[string]string{"CONFIG_FILE": configFile, "MIG_STRATEGY": migStrategy}
	for k, v := range operatorEnv {
		env[k] = v
	}
	for k, v := range env {
		os.Setenv(k, v)
	}

	var config *spec.Config
	app := &cli.App{
		Name: "nvidia-device-plugin", Flags: flags, Writer: io.Discard, ErrWriter: io.Discard,
		Action: func(c *cli.Context) error {
			var err error
			config, err = spec.NewConfig(c, flags)
			if err != nil {
				return fmt.Errorf("unable to finalize config: %v", err)
			}
			config.Flags.GFD = nil
			return nil
		},
	}
	if err := app.Run([]string{"nvidia-device-plugin"}); err != nil {
		return nil, err
	}
	return config, nil
}

// validateFlags mirrors validateFlags in cmd/nvidia-device-plugin/main.go (package main),
// less its NVML probe (CDI device-list strategies need an NVML system; there is none here,
// and the operator's default strategy is envvar).
func validateFlags(config *spec.Config) error {
	if _, err := spec.NewDeviceListStrategies(*config.Flags.Plugin.DeviceListStrategy); err != nil {
		return fmt.Errorf("invalid --device-list-strategy option: %v", err)
	}
	if id := *config.Flags.Plugin.DeviceIDStrategy; id != spec.DeviceIDStrategyUUID && id != spec.DeviceIDStrategyIndex {
		return fmt.Errorf("invalid --device-id-strategy option: %v", id)
	}
	if config.Sharing.SharingStrategy() == spec.SharingStrategyMPS {
		if *config.Flags.MigStrategy == spec.MigStrategyMixed {
			return fmt.Errorf("using --mig-strategy=mixed is not supported with MPS")
		}
		if config.Flags.MpsRoot == nil || *config.Flags.MpsRoot == "" {
			return fmt.Errorf("using MPS requires --mps-root to be specified")
		}
	}
	switch s := *config.Flags.DeviceDiscoveryStrategy; s {
	case "auto", "nvml", "tegra":
	default:
		return fmt.Errorf("invalid --device-discovery-strategy option %v", s)
	}
	switch s := *config.Flags.MigStrategy; s {
	case spec.MigStrategyNone, spec.MigStrategySingle, spec.MigStrategyMixed:
	default:
		return fmt.Errorf("unknown MIG strategy: %v", s)
	}
	if err := spec.AssertChannelIDsValid(config.Imex.ChannelIDs); err != nil {
		return fmt.Errorf("invalid IMEX channel IDs: %w", err)
	}
	return nil
}

// assertMPSReplicas applies the MPS control daemon's per-GPU client limit to the full GPUs
// (resource nvidia.com/gpu). Mirrors mpsDevice.assertReplicas / maxClients in
// k8s-device-plugin cmd/mps-control-daemon/mps/device.go (unexported, so not callable).
func assertMPSReplicas(config *spec.Config, computeCapability string) error {
	maxClients := 16
	if semver.Compare(semver.Canonical("v"+computeCapability), semver.Canonical("v7.5")) >= 0 {
		maxClients = 48
	}
	for _, r := range config.Sharing.MPS.Resources {
		if r.Name == "nvidia.com/gpu" && r.Replicas > maxClients {
			return fmt.Errorf("invalid device maximum allowed replicas exceeded: %d > %d", r.Replicas, maxClients)
		}
	}
	return nil
}

// sharingOf reports the active strategy's replicated resources, as the plugin holds them.
func sharingOf(config *spec.Config) sharingResult {
	out := sharingResult{Strategy: config.Sharing.SharingStrategy(), Resources: []resourceResult{}}
	if out.Strategy == spec.SharingStrategyNone {
		return out
	}
	rrs := config.Sharing.ReplicatedResources()
	out.RenameByDefault = rrs.RenameByDefault
	out.FailRequestsGreaterThanOne = rrs.FailRequestsGreaterThanOne
	for _, r := range rrs.Resources {
		devices, err := r.Devices.MarshalJSON()
		if err != nil {
			devices = json.RawMessage("null")
		}
		out.Resources = append(out.Resources, resourceResult{r.Name, r.Rename, r.Replicas, devices})
	}
	return out
}
