package main

import (
	"fmt"
	"io"
	"runtime"
	"runtime/debug"

	"github.com/prometheus/client_golang/prometheus"
)

// version is set at build time with -ldflags "-X main.version=v1.2.3";
// otherwise it is the module version Go recorded, or "devel".
var version = ""

// buildInfo is what budgetd knows about its own build.
type buildInfo struct {
	version, revision, goVersion string
}

func readBuildInfo() buildInfo {
	b := buildInfo{version: version, revision: "unknown", goVersion: runtime.Version()}
	if info, ok := debug.ReadBuildInfo(); ok {
		if b.version == "" && info.Main.Version != "" && info.Main.Version != "(devel)" {
			b.version = info.Main.Version
		}
		for _, s := range info.Settings {
			if s.Key == "vcs.revision" {
				b.revision = s.Value
			}
		}
	}
	if b.version == "" {
		b.version = "devel"
	}
	return b
}

func printVersion(w io.Writer) error {
	b := readBuildInfo()
	_, err := fmt.Fprintf(w, "budgetd %s (revision %s, %s)\n", b.version, b.revision, b.goVersion)
	return err
}

// buildInfoCollector is budgetd_build_info: always 1, with the build in its
// labels.
func buildInfoCollector() prometheus.Collector {
	b := readBuildInfo()
	return prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name:        "budgetd_build_info",
		Help:        "Always 1; the labels say which budgetd is running.",
		ConstLabels: prometheus.Labels{"version": b.version, "revision": b.revision, "goversion": b.goVersion},
	}, func() float64 { return 1 })
}
