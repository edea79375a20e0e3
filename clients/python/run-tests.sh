#!/usr/bin/env bash
# Runs the Python client's checks, for people and CI: the generated code is
# up to date (generate.sh --check), mypy, and pytest — the unit tests and the
# tests against real fence servers built from this checkout (go build
# ./cmd/fence; Go from PATH or /usr/local/go/bin). Installs the Debian
# packages it needs if they are missing (apt-get update first; as root).
# With FENCE_REQUIRE_PYTHON=1 nothing may be skipped: a skip fails the run.
# PYTHON picks the interpreter (default /usr/bin/python3, Debian's, which the
# packages install into). Extra arguments go to pytest.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
PY=${PYTHON:-/usr/bin/python3}

pkgs=(python3 python3-grpcio python3-protobuf python3-pytest python3-pytest-timeout python3-mypy
      protobuf-compiler protobuf-compiler-grpc)
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "run-tests.sh: installing ${missing[*]}"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}"
fi
command -v go >/dev/null || export PATH=$PATH:/usr/local/go/bin

echo "== generate.sh --check"
"$here/generate.sh" --check
echo "== mypy"
(cd "$here" && "$PY" -m mypy)
echo "== pytest"
cd "$here"
exec "$PY" -m pytest -p no:cacheprovider -rs --timeout 300 "$@"
