#!/usr/bin/env bash
# Builds the minimal OpenTelemetry Collector the OTLP tests push to (core
# otlpreceiver, contrib fileexporter and core debugexporter, collector
# v0.161.0 / v1.67.0) into OUT.
#
#   scripts/otelcol/build.sh OUT
#
# Needs Go 1.26 or later and the Go module proxy for the first build (about
# 110 MB of modules; some minutes on 2 cores); later builds only link.
# OTELCOL_BUILD_NICE (default 0) and OTELCOL_BUILD_JOBS (default: the cores)
# make it gentler on a shared machine.
set -euo pipefail

if [[ $# -ne 1 ]]; then
	echo "usage: $0 OUT" >&2
	exit 2
fi
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
case "$1" in /*) out=$1 ;; *) out=$PWD/$1 ;; esac

if ! command -v go >/dev/null 2>&1; then
	echo "$0: go not found on PATH (the collector's modules need Go 1.26 or later)" >&2
	exit 1
fi
jobs=${OTELCOL_BUILD_JOBS:-$(nproc)}
mkdir -p "$(dirname "$out")"
cd "$here"
# -mod=readonly: go.mod and go.sum are the truth. -trimpath, -s -w: a
# smaller binary without local paths. CGO_ENABLED=0: no C toolchain needed.
nice -n "${OTELCOL_BUILD_NICE:-0}" env GOFLAGS="-p=$jobs -mod=readonly -buildvcs=false" \
	CGO_ENABLED=0 go build -trimpath -ldflags='-s -w' -o "$out" .
