package main

import (
	"bytes"
	"flag"
	"io"
	"strings"

	"k8s.io/klog/v2"
)

// logLines keeps what upstream code logs at WARNING (e.g. "Setting the 'rename' field in
// sharing.timeSlicing.resources is not yet supported in the config. Ignoring...").
type logLines struct{ buf bytes.Buffer }

// captureWarnings routes klog's warnings into a buffer and everything else nowhere, so that
// stderr carries only the refusal line.
func captureWarnings() *logLines {
	fs := flag.NewFlagSet("klog", flag.ContinueOnError)
	klog.InitFlags(fs)
	for name, value := range map[string]string{
		"logtostderr": "false", "alsologtostderr": "false", "stderrthreshold": "FATAL", "skip_headers": "true",
	} {
		_ = fs.Set(name, value)
	}
	l := &logLines{}
	// klog writes a message to the output of its severity and of every lower one.
	klog.SetOutputBySeverity("INFO", io.Discard)
	klog.SetOutputBySeverity("WARNING", &l.buf)
	klog.SetOutputBySeverity("ERROR", io.Discard)
	klog.SetOutputBySeverity("FATAL", io.Discard)
	return l
}

func (l *logLines) lines() []string {
	out := []string{}
	for _, line := range strings.Split(l.buf.String(), "\n") {
		if line = strings.TrimSpace(line); line != "" {
			out = append(out, line)
		}
	}
	return out
}
