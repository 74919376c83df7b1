#!/bin/sh
# Regenerates the wire code under internal/extpb from proto/. Needs protoc on
# PATH; the two Go plugins are the ones pinned in ../tools/go.mod (make proto
# builds them into .tools/bin and puts that first on PATH).
# Usage: gen.sh [OUT_DIR]   (default: internal/extpb, i.e. in place)
set -eu
cd "$(dirname "$0")"
out=${1:-internal/extpb}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
protoc -I proto \
	--go_out="$tmp" --go_opt=paths=source_relative \
	--go-grpc_out="$tmp" --go-grpc_opt=paths=source_relative \
	agenthost/ext/v1/ext.proto
mkdir -p "$out"
cp "$tmp"/agenthost/ext/v1/*.go "$out"/
