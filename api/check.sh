#!/usr/bin/env bash
# Checks the API (api/fence/v1/fence.proto) with pinned buf v1.75.0:
#   lint      buf's STANDARD rules (api/buf.yaml);
#   breaking  no change that breaks a client of the last release, whose API
#             is api/released.binpb (FILE rules: wire and generated code);
#   current   the committed Go code is what api/generate.sh makes of it.
# Usage: api/check.sh            all three
#        api/check.sh release    after a release: record its API in
#                                api/released.binpb (commit it with the tag)
set -euo pipefail
cd "$(dirname "$0")"
buf() { go run github.com/bufbuild/buf/cmd/buf@v1.75.0 "$@"; }
if [ "${1:-}" = release ]; then
  buf build --exclude-source-info -o released.binpb
  echo "api/released.binpb now holds the API of this working tree"
  exit 0
fi
echo "buf lint"
buf lint
echo "buf breaking (against api/released.binpb)"
buf breaking --against released.binpb
echo "generated Go code is current"
./generate.sh >/dev/null
if ! git diff --quiet -- . ../internal/transport/transportpb; then
  echo "api/generate.sh changes the committed code: run it and commit the result"
  git diff --stat -- . ../internal/transport/transportpb
  exit 1
fi
