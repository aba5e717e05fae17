#!/usr/bin/env bash
# Installs Rescale's build and test dependencies from Debian 12 packages.
#
# Idempotent: it asks dpkg which packages are missing and calls apt-get only
# for those, so on a machine that has everything it finishes in well under a
# second. Uses sudo when not run as root. Nothing is downloaded from anywhere
# but the distribution's own package mirrors.
set -euo pipefail

packages=(
  build-essential
  cmake
  pkg-config
  # scripts/check-doc-links.py (the doc_links test)
  python3
  # the Python trainer SDK (client/python), built and tested with Debian's
  # /usr/bin/python3: its gRPC runtime, pip/setuptools to install it, pytest,
  # and PyTorch (CPU, gloo) for rescale.torch and the real DDP tests
  python3-grpcio
  python3-protobuf
  python3-pip
  python3-setuptools
  python3-pytest
  python3-torch
  protobuf-compiler
  protobuf-compiler-grpc
  libprotobuf-dev
  libgrpc++-dev
  grpc-proto
  libabsl-dev
  libspdlog-dev
  catch2
  libbenchmark-dev
  nlohmann-json3-dev
  libyaml-cpp-dev
  libcli11-dev
  libcurl4-openssl-dev
  libcpp-httplib-dev
  libsqlite3-dev
  # SHA-256 and constant-time comparison of auth tokens; test certificates
  libssl-dev
  # /metrics of rescaled and rescale-adapter (prometheus-cpp core + pull),
  # and promtool, which the metrics tests run on the exposition
  prometheus-cpp-dev
  prometheus
  # etcd: its v3 API's .proto files (rescaled --state=etcd://, generated at
  # build time) and the server the HA tests start
  golang-etcd-server-dev
  golang-github-gogo-protobuf-dev
  golang-github-grpc-ecosystem-grpc-gateway-dev
  etcd-server
  # make fuzz: libFuzzer targets need clang, and libFuzzer's runtime
  # (libclang_rt.fuzzer*.a) ships in clang 14's runtime package
  clang
  libclang-rt-14-dev
)

missing=()
for pkg in "${packages[@]}"; do
  status=$(dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null || true)
  if [[ "$status" != "install ok installed" ]]; then
    missing+=("$pkg")
  fi
done

# kubectl, for `kubectl kustomize docker/k8s` in the manifest tests:
# Debian's kubernetes-client, unless a kubectl is already installed (from
# another package, e.g. a cloud SDK, which Debian's would conflict with).
if ! command -v kubectl > /dev/null 2>&1; then
  status=$(dpkg-query -W -f='${Status}' kubernetes-client 2>/dev/null || true)
  if [[ "$status" != "install ok installed" ]]; then
    missing+=(kubernetes-client)
  fi
fi

if [[ ${#missing[@]} -eq 0 ]]; then
  exit 0
fi

echo "install-deps: installing ${missing[*]}" >&2
sudo_cmd=()
if [[ $(id -u) -ne 0 ]]; then
  sudo_cmd=(sudo)
fi
export DEBIAN_FRONTEND=noninteractive
"${sudo_cmd[@]}" apt-get update -qq
"${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}"
