// promql-engine evaluates PromQL with Prometheus's own engine (github.com/prometheus/prometheus/promql) over
// series written in promqltest's `load` notation, for tests/conformance/test_promql_engine.py: the queries
// gpuctl builds (gpuctl/model/promql.py) are run as a Prometheus server runs them.
//
// stdin: {"load": "load 1m\n  metric{a=\"b\"} 0+1x60\n", "at": "60m", "queries": ["..."]}
// stdout: {"<query>": [{"metric": {...}, "value": [<unix time>, "<value>"]}], ...}, as /api/v1/query's result;
// a query the engine refuses answers {"error": "..."} instead.
package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/prometheus/prometheus/promql"
	"github.com/prometheus/prometheus/promql/promqltest"
)

type input struct {
	Load    string   `json:"load"`
	At      string   `json:"at"`
	Queries []string `json:"queries"`
}

func main() {
	var in input
	if err := json.NewDecoder(os.Stdin).Decode(&in); err != nil {
		fmt.Fprintln(os.Stderr, "reading the input:", err)
		os.Exit(2)
	}
	at, err := time.ParseDuration(in.At)
	if err != nil {
		fmt.Fprintln(os.Stderr, "at:", err)
		os.Exit(2)
	}
	storage := promqltest.LoadedStorage(&testing.T{}, in.Load)
	defer storage.Close()
	engine := promql.NewEngine(promql.EngineOpts{MaxSamples: 50_000_000, Timeout: time.Minute,
		LookbackDelta: 5 * time.Minute})
	ts := time.Unix(0, 0).Add(at)
	out := map[string]any{}
	for _, expr := range in.Queries {
		query, err := engine.NewInstantQuery(context.Background(), storage, nil, expr, ts)
		if err != nil {
			out[expr] = map[string]string{"error": err.Error()}
			continue
		}
		result := query.Exec(context.Background())
		if result.Err != nil {
			out[expr] = map[string]string{"error": result.Err.Error()}
			continue
		}
		vector, err := result.Vector()
		if err != nil {
			out[expr] = map[string]string{"error": err.Error()}
			continue
		}
		samples := []any{}
		for _, s := range vector {
			samples = append(samples, map[string]any{"metric": s.Metric.Map(),
				"value": []any{float64(ts.Unix()), strconv.FormatFloat(s.F, 'f', -1, 64)}})
		}
		out[expr] = samples
		query.Close()
	}
	if err := json.NewEncoder(os.Stdout).Encode(out); err != nil {
		os.Exit(1)
	}
}
