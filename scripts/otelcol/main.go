// Command allocmux-otelcol is a minimal OpenTelemetry Collector used to test
// allocmux's OTLP profiles export: the core OTLP receiver, the
// contrib file exporter (one JSON line per request) and the core debug
// exporter. Profiles need the feature gate service.profilesSupport, which
// main enables by default (a --feature-gates flag can still override it).
package main

import (
	"log"
	"os"

	"github.com/open-telemetry/opentelemetry-collector-contrib/exporter/fileexporter"
	"go.opentelemetry.io/collector/component"
	"go.opentelemetry.io/collector/confmap"
	"go.opentelemetry.io/collector/confmap/provider/envprovider"
	"go.opentelemetry.io/collector/confmap/provider/fileprovider"
	"go.opentelemetry.io/collector/exporter"
	"go.opentelemetry.io/collector/exporter/debugexporter"
	"go.opentelemetry.io/collector/featuregate"
	"go.opentelemetry.io/collector/otelcol"
	"go.opentelemetry.io/collector/receiver"
	"go.opentelemetry.io/collector/receiver/otlpreceiver"
)

const profilesGate = "service.profilesSupport"

func components() (otelcol.Factories, error) {
	var f otelcol.Factories
	var err error
	f.Receivers, err = otelcol.MakeFactoryMap[receiver.Factory](otlpreceiver.NewFactory())
	if err != nil {
		return f, err
	}
	f.Exporters, err = otelcol.MakeFactoryMap[exporter.Factory](
		fileexporter.NewFactory(),
		debugexporter.NewFactory(),
	)
	if err != nil {
		return f, err
	}
	f.Telemetry = newTelemetryFactory()
	f.ReceiverModules = map[component.Type]string{
		otlpreceiver.NewFactory().Type(): "go.opentelemetry.io/collector/receiver/otlpreceiver v0.161.0",
	}
	f.ExporterModules = map[component.Type]string{
		fileexporter.NewFactory().Type():  "github.com/open-telemetry/opentelemetry-collector-contrib/exporter/fileexporter v0.161.0",
		debugexporter.NewFactory().Type(): "go.opentelemetry.io/collector/exporter/debugexporter v0.161.0",
	}
	return f, nil
}

func main() {
	// The profiles signal is alpha: turn its gate on here so that the config
	// alone decides what runs. --feature-gates=-service.profilesSupport still
	// turns it off (flags are applied after this).
	if err := featuregate.GlobalRegistry().Set(profilesGate, true); err != nil {
		log.Fatalf("feature gate %s: %v", profilesGate, err)
	}

	info := component.BuildInfo{
		Command:     "allocmux-otelcol",
		Description: "Minimal OpenTelemetry Collector for allocmux OTLP profiles tests",
		Version:     "0.161.0-allocmux",
	}
	set := otelcol.CollectorSettings{
		BuildInfo: info,
		Factories: components,
		ConfigProviderSettings: otelcol.ConfigProviderSettings{
			ResolverSettings: confmap.ResolverSettings{
				ProviderFactories: []confmap.ProviderFactory{
					fileprovider.NewFactory(),
					envprovider.NewFactory(),
				},
				DefaultScheme: "env",
			},
		},
	}
	if err := otelcol.NewCommand(set).Execute(); err != nil {
		os.Exit(1)
	}
}
