#!/usr/bin/env bash
# install-ort.sh: fetch ONNX Runtime's CPU shared library for sparkconv's
# tests and `sparkconv verify`, into a project-local folder.
#
#   scripts/install-ort.sh [DEST_DIR]     (default: <repo>/.ort)
#
# Result: DEST_DIR/libonnxruntime.so (ONNX Runtime 1.30.0, linux x64).
# Go code finds it via --ort-lib, then $SPARKCONV_ORT_LIB, then <repo>/.ort.
#
# Why npm pack: `npm install onnxruntime-node` runs a postinstall script that
# downloads CUDA files; `npm pack` only fetches the package tarball, which
# already holds the CPU library at package/bin/napi-v6/linux/x64/.
# Idempotent: does nothing when the library is already there.
set -euo pipefail

ORT_VERSION="1.30.0"
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
dest="${1:-$repo/.ort}"
lib="$dest/libonnxruntime.so"

if [[ -s "$lib" ]]; then
  echo "install-ort: $lib already present"
  exit 0
fi
case "$(uname -s)/$(uname -m)" in
  Linux/x86_64) ;;
  *) echo "install-ort: only linux x86_64 is handled (got $(uname -s)/$(uname -m))" >&2; exit 1 ;;
esac
command -v npm >/dev/null || { echo "install-ort: npm is required (apt-get install -y npm)" >&2; exit 1; }

mkdir -p "$dest"
# The folder ignores itself, so no repository .gitignore entry is needed.
printf '*\n' > "$dest/.gitignore"
work="$(mktemp -d "$dest/.tmp.XXXXXX")"
trap 'rm -rf "$work"' EXIT

(cd "$work" && npm pack --silent "onnxruntime-node@$ORT_VERSION" >/dev/null)
tgz="$(ls "$work"/onnxruntime-node-*.tgz)"
tar -xzf "$tgz" -C "$work" package/bin/napi-v6/linux/x64/libonnxruntime.so.1
src="$work/package/bin/napi-v6/linux/x64/libonnxruntime.so.1"
[[ -s "$src" ]] || { echo "install-ort: $src missing from $tgz" >&2; exit 1; }
cp "$src" "$lib.tmp"
mv "$lib.tmp" "$lib"
echo "install-ort: installed ONNX Runtime $ORT_VERSION at $lib ($(stat -c %s "$lib") bytes)"
