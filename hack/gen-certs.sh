#!/usr/bin/env bash
# Generates the certificates an in-cluster Kollect install needs, with openssl:
#
#   ca.crt/.key             serving CA; its certificate is the APIService caBundle
#   serving.crt/.key        kollect-apiserver serving cert for kollect-api.<ns>.svc
#   etcd-ca.crt/.key        a separate CA for etcd (client and peer authentication)
#   etcd-server.crt/.key    etcd client-port cert (every member's DNS name, localhost)
#   etcd-peer.crt/.key      etcd peer cert (every member's DNS name)
#   etcd-client.crt/.key    client cert kollect-apiserver presents to etcd
#
# and, next to them, the manifests built from them:
#
#   secrets.yaml      Secrets kollect-serving-cert, kollect-etcd-tls, kollect-etcd-client
#   apiservice.yaml   artifacts/deploy/11-apiservice.yaml with the real caBundle
#
# The output directory holds private keys: keep it out of Git (the default,
# _output/, is git-ignored) and never write it under artifacts/.
#
# Idempotent: an existing CA is kept; a leaf certificate is reissued only when
# it is missing, not signed by the current CA, within 30 days of expiry, or
# its names changed. The manifests are rewritten from the files every run.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
APISERVICE_SRC="${ROOT}/artifacts/deploy/11-apiservice.yaml"

NAMESPACE="kollect-system"
CLUSTER_DOMAIN="cluster.local"
ETCD_REPLICAS=3
DAYS=365
CA_DAYS=3650
FORCE=0
PRINT_CA_BUNDLE=0
OUT=""

usage() {
	cat <<EOF
Usage: $(basename "$0") [options] OUTPUT_DIR

Generates the CAs, certificates and Secret manifests of an in-cluster Kollect
install into OUTPUT_DIR (created if missing; keep it out of Git), and a copy of
the APIService manifest with the real caBundle.

Options:
  --namespace NS          namespace of the install (default: ${NAMESPACE}); the
                          manifests in artifacts/deploy assume kollect-system
  --cluster-domain D      cluster DNS domain for the *.svc.D names (default: ${CLUSTER_DOMAIN})
  --etcd-replicas N       etcd members to issue names for (default: ${ETCD_REPLICAS})
  --days N                validity of leaf certificates in days (default: ${DAYS})
  --force                 regenerate everything, CAs included (then re-apply the
                          Secrets AND the APIService, and restart the pods)
  --print-ca-bundle       print only the base64 caBundle afterwards (for scripting)
  -h, --help              this message

Then:
  kubectl apply -f artifacts/deploy/00-namespace.yaml
  kubectl apply -f OUTPUT_DIR/secrets.yaml
  kubectl apply -f artifacts/deploy -l app.kubernetes.io/component!=apiservice
  kubectl apply -f OUTPUT_DIR/apiservice.yaml
EOF
}

die() {
	echo "gen-certs: error: $*" >&2
	exit 1
}
log() {
	if [[ "${PRINT_CA_BUNDLE}" == 0 ]]; then echo "gen-certs: $*"; else echo "gen-certs: $*" >&2; fi
}

while (($# > 0)); do
	case "$1" in
	--namespace) NAMESPACE="${2:?--namespace needs a value}"; shift 2 ;;
	--cluster-domain) CLUSTER_DOMAIN="${2:?--cluster-domain needs a value}"; shift 2 ;;
	--etcd-replicas) ETCD_REPLICAS="${2:?--etcd-replicas needs a value}"; shift 2 ;;
	--days) DAYS="${2:?--days needs a value}"; shift 2 ;;
	--force) FORCE=1; shift ;;
	--print-ca-bundle) PRINT_CA_BUNDLE=1; shift ;;
	-h | --help) usage; exit 0 ;;
	--) shift; break ;;
	-*) usage >&2; die "unknown option $1" ;;
	*)
		[[ -z "${OUT}" ]] || { usage >&2; die "only one OUTPUT_DIR may be given"; }
		OUT="$1"; shift ;;
	esac
done
if (($# > 0)); then
	[[ -z "${OUT}" && $# -eq 1 ]] || { usage >&2; die "only one OUTPUT_DIR may be given"; }
	OUT="$1"
fi
[[ -n "${OUT}" ]] || { usage >&2; exit 2; }
[[ "${ETCD_REPLICAS}" =~ ^[1-9][0-9]?$ ]] || die "--etcd-replicas must be a number from 1 to 99"
[[ "${DAYS}" =~ ^[1-9][0-9]*$ ]] || die "--days must be a positive number"
[[ "${NAMESPACE}" =~ ^[a-z0-9]([-a-z0-9]*[a-z0-9])?$ ]] || die "--namespace ${NAMESPACE} is not a valid namespace name"
command -v openssl >/dev/null 2>&1 || die "openssl is not installed"
[[ -f "${APISERVICE_SRC}" ]] || die "${APISERVICE_SRC} not found"

case "$(cd "$(dirname "${OUT}")" 2>/dev/null && pwd)/$(basename "${OUT}")/" in
"${ROOT}/artifacts/"*) die "refusing to write private keys under artifacts/; choose e.g. _output/certs" ;;
esac

umask 077
mkdir -p "${OUT}"
OUT="$(cd "${OUT}" && pwd)"

if [[ "${FORCE}" == 1 ]]; then
	log "--force: regenerating every key and certificate in ${OUT}"
	rm -f "${OUT}"/{ca,serving,etcd-ca,etcd-server,etcd-peer,etcd-client}.{crt,key,ext}
fi

# newkey FILE: an ECDSA P-256 key (PKCS#8), unless one exists.
newkey() {
	[[ -s "$1" ]] || openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$1" 2>/dev/null
}

# ca NAME CN: a self-signed CA, kept when it exists and is valid for 90 more days.
ca() {
	local name="$1" cn="$2"
	if [[ -s "${OUT}/${name}.crt" && -s "${OUT}/${name}.key" ]] &&
		openssl x509 -in "${OUT}/${name}.crt" -noout -checkend $((90 * 86400)) >/dev/null; then
		log "keeping CA ${name} ($(openssl x509 -in "${OUT}/${name}.crt" -noout -enddate))"
		return
	fi
	[[ ! -e "${OUT}/${name}.crt" ]] || log "CA ${name} expires within 90 days: regenerating it (re-apply Secrets and APIService)"
	rm -f "${OUT}/${name}.crt" "${OUT}/${name}.key"
	newkey "${OUT}/${name}.key"
	openssl req -x509 -new -sha256 -key "${OUT}/${name}.key" -days "${CA_DAYS}" \
		-subj "/O=kollect.dev/CN=${cn}" \
		-addext "basicConstraints=critical,CA:TRUE,pathlen:0" \
		-addext "keyUsage=critical,keyCertSign,cRLSign" \
		-addext "subjectKeyIdentifier=hash" \
		-out "${OUT}/${name}.crt"
	log "generated CA ${name}"
}

# leaf NAME CA SUBJECT EKU SAN: a certificate signed by CA. SAN is an openssl
# subjectAltName value ("DNS:a,DNS:b,IP:127.0.0.1") or empty.
leaf() {
	local name="$1" ca="$2" subj="$3" eku="$4" san="$5"
	local ext="${OUT}/${name}.ext" want
	want="$(printf 'subject=%s\nbasicConstraints=critical,CA:FALSE\nkeyUsage=critical,digitalSignature,keyEncipherment\nextendedKeyUsage=%s\n' "${subj}" "${eku}")"
	[[ -z "${san}" ]] || want+=$'\n'"subjectAltName=${san}"
	if [[ -s "${OUT}/${name}.crt" && -s "${OUT}/${name}.key" && -f "${ext}" ]] &&
		[[ "$(cat "${ext}")" == "${want}" ]] &&
		openssl verify -CAfile "${OUT}/${ca}.crt" "${OUT}/${name}.crt" >/dev/null 2>&1 &&
		openssl x509 -in "${OUT}/${name}.crt" -noout -checkend $((30 * 86400)) >/dev/null; then
		log "keeping ${name}.crt"
		return
	fi
	newkey "${OUT}/${name}.key"
	printf '%s\n' "${want}" | sed 1d >"${ext}.tmp"
	openssl req -new -sha256 -key "${OUT}/${name}.key" -subj "${subj}" -out "${OUT}/${name}.csr"
	openssl x509 -req -sha256 -in "${OUT}/${name}.csr" \
		-CA "${OUT}/${ca}.crt" -CAkey "${OUT}/${ca}.key" \
		-set_serial "0x$(openssl rand -hex 16)" -days "${DAYS}" \
		-extfile "${ext}.tmp" -out "${OUT}/${name}.crt" 2>/dev/null
	rm -f "${OUT}/${name}.csr" "${ext}.tmp"
	printf '%s' "${want}" >"${ext}"
	log "issued ${name}.crt (${subj}${san:+; ${san}})"
}

SVC="kollect-api"
ETCD="kollect-etcd"

# kollect-apiserver serving certificate: the aggregator dials
# <service>.<namespace>.svc and verifies it against the APIService caBundle.
ca ca "kollect-ca"
leaf serving ca "/O=kollect.dev/CN=${SVC}.${NAMESPACE}.svc" serverAuth \
	"DNS:${SVC}.${NAMESPACE}.svc,DNS:${SVC}.${NAMESPACE}.svc.${CLUSTER_DOMAIN},DNS:${SVC}.${NAMESPACE},DNS:${SVC}"

# etcd: its own CA, so nothing the serving CA signs can authenticate to etcd.
etcd_names=()
for ((i = 0; i < ETCD_REPLICAS; i++)); do
	etcd_names+=("DNS:${ETCD}-${i}.${ETCD}.${NAMESPACE}.svc" "DNS:${ETCD}-${i}.${ETCD}.${NAMESPACE}.svc.${CLUSTER_DOMAIN}")
done
etcd_peer_san="$(IFS=,; echo "${etcd_names[*]}")"
ca etcd-ca "kollect-etcd-ca"
# Server auth for clients; client auth too, because etcd's gRPC gateway dials
# itself with this certificate. localhost/127.0.0.1 serve port-forwarded etcdctl.
leaf etcd-server etcd-ca "/O=kollect.dev/CN=${ETCD}" serverAuth,clientAuth \
	"${etcd_peer_san},DNS:${ETCD}.${NAMESPACE}.svc,DNS:${ETCD}.${NAMESPACE}.svc.${CLUSTER_DOMAIN},DNS:localhost,IP:127.0.0.1"
# Peers check that a connecting member's IP resolves from one of these names.
leaf etcd-peer etcd-ca "/O=kollect.dev/CN=${ETCD}-peer" serverAuth,clientAuth "${etcd_peer_san}"
leaf etcd-client etcd-ca "/O=kollect.dev/CN=kollect-apiserver" clientAuth ""

b64() { base64 <"$1" | tr -d '\n'; }
CA_BUNDLE="$(b64 "${OUT}/ca.crt")"

# Secrets: written whole each run, so the file always matches the certificates.
{
	cat <<EOF
# Generated by hack/gen-certs.sh; holds private keys. Do not commit.
apiVersion: v1
kind: Secret
metadata:
  name: kollect-serving-cert
  namespace: ${NAMESPACE}
  labels: {app.kubernetes.io/name: kollect-apiserver, app.kubernetes.io/part-of: kollect}
type: kubernetes.io/tls
data:
  ca.crt: $(b64 "${OUT}/ca.crt")
  tls.crt: $(b64 "${OUT}/serving.crt")
  tls.key: $(b64 "${OUT}/serving.key")
---
apiVersion: v1
kind: Secret
metadata:
  name: kollect-etcd-tls
  namespace: ${NAMESPACE}
  labels: {app.kubernetes.io/name: kollect-etcd, app.kubernetes.io/part-of: kollect}
type: Opaque
data:
  ca.crt: $(b64 "${OUT}/etcd-ca.crt")
  server.crt: $(b64 "${OUT}/etcd-server.crt")
  server.key: $(b64 "${OUT}/etcd-server.key")
  peer.crt: $(b64 "${OUT}/etcd-peer.crt")
  peer.key: $(b64 "${OUT}/etcd-peer.key")
---
apiVersion: v1
kind: Secret
metadata:
  name: kollect-etcd-client
  namespace: ${NAMESPACE}
  labels: {app.kubernetes.io/name: kollect-apiserver, app.kubernetes.io/part-of: kollect}
type: kubernetes.io/tls
data:
  ca.crt: $(b64 "${OUT}/etcd-ca.crt")
  tls.crt: $(b64 "${OUT}/etcd-client.crt")
  tls.key: $(b64 "${OUT}/etcd-client.key")
EOF
} >"${OUT}/secrets.yaml.tmp"
mv -f "${OUT}/secrets.yaml.tmp" "${OUT}/secrets.yaml"

# The APIService with the real caBundle (and namespace), from the committed manifest.
grep -q '^  caBundle: ' "${APISERVICE_SRC}" || die "${APISERVICE_SRC} has no '  caBundle: ' line to replace"
sed -e "s|^  caBundle: .*|  caBundle: ${CA_BUNDLE}|" \
	-e "s|^    namespace: kollect-system$|    namespace: ${NAMESPACE}|" \
	"${APISERVICE_SRC}" >"${OUT}/apiservice.yaml.tmp"
mv -f "${OUT}/apiservice.yaml.tmp" "${OUT}/apiservice.yaml"
chmod 0644 "${OUT}"/*.crt "${OUT}/apiservice.yaml"

if [[ "${PRINT_CA_BUNDLE}" == 1 ]]; then
	echo "${CA_BUNDLE}"
	exit 0
fi
log "wrote ${OUT}/secrets.yaml and ${OUT}/apiservice.yaml"
cat <<EOF

Next:
  kubectl apply -f ${ROOT#"${PWD}"/}/artifacts/deploy/00-namespace.yaml
  kubectl apply -f ${OUT}/secrets.yaml
  kubectl apply -f ${ROOT#"${PWD}"/}/artifacts/deploy -l app.kubernetes.io/component!=apiservice
  kubectl apply -f ${OUT}/apiservice.yaml
EOF
