#!/usr/bin/env bash
# Makes the Secrets the manifests in docker/k8s mount, with a fresh random
# token per component, and prints them as YAML for `kubectl apply -f -`:
#
#   scripts/k8s-credentials.sh [--ca-file ca.crt] NAMESPACE... | kubectl apply -f -
#
#   rescale/rescale-tokens         tokens.csv for rescaled (--auth_token_file):
#                                    rescale-adapter  controller  *
#                                    rescale-admin    admin       *   (for rescalectl)
#                                    agent-NAMESPACE  reporter    NAMESPACE, one per NAMESPACE
#   rescale/rescale-adapter-token  token: the adapter's (--token-file)
#   rescale/rescale-admin-token    token: the admin's, for people running rescalectl
#   NAMESPACE/rescale-agent        token: that namespace's reporter, for the agents
#                                  of its jobs; ca.crt too with --ca-file (the CA of
#                                  rescaled's certificate, which they must trust)
#
# Tokens are 43 characters of base64url from /dev/urandom (256 bits). Run it
# again to rotate every token: rescaled re-reads its file when the Secret
# changes, the clients re-read theirs.
set -euo pipefail

usage() {
  echo "usage: $0 [--ca-file CA.crt] NAMESPACE..." >&2
  exit 2
}

ca_file=""
namespaces=()
while [[ $# -gt 0 ]]; do
  case "$1" in
    --ca-file) [[ $# -ge 2 ]] || usage; ca_file="$2"; shift 2 ;;
    -h|--help) usage ;;
    -*) echo "$0: unknown flag $1" >&2; usage ;;
    *) namespaces+=("$1"); shift ;;
  esac
done
[[ ${#namespaces[@]} -gt 0 ]] || usage
for ns in "${namespaces[@]}"; do
  if ! [[ "$ns" =~ ^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$ ]]; then
    echo "$0: namespace \"$ns\" is not a DNS-1123 label" >&2
    exit 2
  fi
done
if [[ -n "$ca_file" && ! -r "$ca_file" ]]; then
  echo "$0: cannot read --ca-file \"$ca_file\"" >&2
  exit 2
fi

token() { head -c 32 /dev/urandom | base64 | tr '+/' '-_' | tr -d '=\n'; }

# A YAML block scalar of a file, indented for stringData.
indented() { sed 's/^/    /' "$1"; }

adapter=$(token)
admin=$(token)
declare -A agent
for ns in "${namespaces[@]}"; do agent[$ns]=$(token); done

cat <<YAML
apiVersion: v1
kind: Secret
metadata:
  name: rescale-tokens
  namespace: rescale
  labels: {app.kubernetes.io/part-of: rescale}
type: Opaque
stringData:
  tokens.csv: |
    # token,user,role,namespaces
    ${adapter},rescale-adapter,controller,*
    ${admin},rescale-admin,admin,*
YAML
for ns in "${namespaces[@]}"; do
  echo "    ${agent[$ns]},agent-${ns},reporter,${ns}"
done
cat <<YAML
---
apiVersion: v1
kind: Secret
metadata:
  name: rescale-adapter-token
  namespace: rescale
  labels: {app.kubernetes.io/part-of: rescale}
type: Opaque
stringData:
  token: ${adapter}
---
apiVersion: v1
kind: Secret
metadata:
  name: rescale-admin-token
  namespace: rescale
  labels: {app.kubernetes.io/part-of: rescale}
type: Opaque
stringData:
  token: ${admin}
YAML
for ns in "${namespaces[@]}"; do
  cat <<YAML
---
apiVersion: v1
kind: Secret
metadata:
  name: rescale-agent
  namespace: ${ns}
  labels: {app.kubernetes.io/part-of: rescale}
type: Opaque
stringData:
  token: ${agent[$ns]}
YAML
  if [[ -n "$ca_file" ]]; then
    echo "  ca.crt: |"
    indented "$ca_file"
  fi
done
