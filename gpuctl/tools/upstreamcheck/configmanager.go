package main

import (
	"fmt"
	"os"
	"strings"
)

// The config-manager's fallback strategies and the name the "named" strategy looks for.
// Mirrors the constants of k8s-device-plugin cmd/config-manager/main.go (package main).
const (
	fallbackNamed        = "named"
	fallbackSingle       = "single"
	fallbackEmpty        = "empty"
	namedConfigFallback  = "default"
	operatorFallbacks    = fallbackEmpty // gpu-operator controllers/object_controls.go sets FALLBACK_STRATEGIES=empty
	configManagerEmptyTo = "/dev/null"   // what updateSymlink links an empty selection to
)

// selectConfig is the config-manager's choice of ConfigMap key for a node: `label` is the
// value of the node's nvidia.com/device-plugin.config label, `defaultConfig` the
// DEFAULT_CONFIG env (ClusterPolicy devicePlugin.config.default). "" means the empty config.
// Mirrors updateConfigName in k8s-device-plugin cmd/config-manager/main.go (package main),
// error texts included (also its use of `config` in the missing-default message, which
// leaves the name out).
func selectConfig(dir, config, defaultConfig string, fallbacks []string) (string, error) {
	files, err := configFileNames(dir)
	if err != nil {
		return "", fmt.Errorf("error getting list of configuration files: %v", err)
	}
	if len(files) == 0 {
		return "", fmt.Errorf("no configuration files available")
	}
	filenames := make([]string, 0, len(files))
	for f := range files {
		filenames = append(filenames, f)
	}

	if config != "" {
		if !files[config] {
			return "", fmt.Errorf("specified config %v does not exist", config)
		}
		return config, nil
	}

	if defaultConfig != "" {
		if !files[defaultConfig] {
			return "", fmt.Errorf("specified config %v does not exist", config)
		}
		return defaultConfig, nil
	}

	for _, fallback := range fallbacks {
		switch fallback {
		case fallbackNamed:
			if files[namedConfigFallback] {
				return namedConfigFallback, nil
			}
		case fallbackSingle:
			if len(filenames) == 1 {
				return filenames[0], nil
			}
		case fallbackEmpty:
			return "", nil
		default:
			return "", fmt.Errorf("unknown fallback strategy: %v", fallback)
		}
	}
	return "", fmt.Errorf("no config was set, no default was provided, and all fallbacks failed")
}

// configFileNames mirrors getConfigFileNameMap in cmd/config-manager/main.go: the ConfigMap
// volume's own "..data" entries and any directories are not configs.
func configFileNames(dir string) (map[string]bool, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("error reading directory: %v", err)
	}
	names := make(map[string]bool)
	for _, e := range entries {
		if !e.IsDir() && !strings.HasPrefix(e.Name(), "..") {
			names[e.Name()] = true
		}
	}
	return names, nil
}
