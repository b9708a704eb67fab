#!/usr/bin/env bash
# Registers a member cluster with a Kollect hub:
#
#   in the member (with its admin kubeconfig)
#     Namespace          kollect-member
#     ServiceAccount     kollect-member/kollect-collector
#     ClusterRole        kollect-collector: get, list, watch on the --resource
#                        kinds only (default: apps/deployments, namespaces)
#     ClusterRoleBinding kollect-collector: the role to the ServiceAccount
#     Secret             kollect-member/kollect-collector-token, a long-lived
#                        token of the ServiceAccount
#                        (type kubernetes.io/service-account-token)
#   in the hub
#     Secret             <name>-kubeconfig (key kubeconfig) in --secret-namespace:
#                        the member's server URL and CA, inline, and the token
#
# and prints the MemberCluster to apply on the hub (or applies it, --apply).
# Re-running it updates everything in place (the role's rules are replaced).
# It needs kubectl only ($KUBECTL, default kubectl); objects are written with
# server-side apply, so no copy of the Secret's data lands in a
# last-applied-configuration annotation.
set -euo pipefail

KUBECTL="${KUBECTL:-kubectl}"
NAMESPACE=kollect-member
SA=kollect-collector
ROLE=kollect-collector
TOKEN_SECRET=kollect-collector-token
MANAGER=kollect-register-member

name=""
member_kubeconfig=""
member_context=""
hub_kubeconfig=""
hub_context=""
secret_namespace=kollect-system
server=""
timeout=60
apply=0
resources=()

usage() {
	cat <<EOF
Usage: $(basename "$0") --name NAME --member-kubeconfig FILE --hub-kubeconfig FILE [options]

Creates a least-privilege ServiceAccount in the member, stores a kubeconfig for
it in a Secret on the hub, and prints the MemberCluster that refers to it.

Required:
  --name NAME                the MemberCluster's name (a DNS label: it becomes the items' source.cluster)
  --member-kubeconfig FILE   a kubeconfig with admin rights on the member
  --hub-kubeconfig FILE      a kubeconfig that may write Secrets on the hub

Options:
  --member-context CTX       context of the member kubeconfig (default: its current one)
  --hub-context CTX          context of the hub kubeconfig (default: its current one)
  --resource GROUP/RESOURCE  a kind the hub may get, list and watch in the member;
                             repeatable; "core/RESOURCE", "/RESOURCE" or "RESOURCE"
                             for the core group (default: apps/deployments and
                             core/namespaces). No wildcards.
  --secret-namespace NS      the hub namespace of the Secret (default: ${secret_namespace})
  --server URL               the member's API server as the hub reaches it
                             (default: the member kubeconfig's); must be https://
  --timeout SECONDS          how long to wait for the token (default: ${timeout})
  --apply                    apply the MemberCluster to the hub instead of printing it
  -h, --help                 this message

Environment: KUBECTL, the kubectl binary (default: kubectl).
EOF
}

die() {
	echo "register-member: error: $*" >&2
	exit 1
}
log() { echo "register-member: $*" >&2; }

need_value() {
	[[ $# -ge 2 && -n "$2" ]] || die "$1 needs a value"
}

while [[ $# -gt 0 ]]; do
	case "$1" in
	--name) need_value "$@"; name=$2; shift 2 ;;
	--member-kubeconfig) need_value "$@"; member_kubeconfig=$2; shift 2 ;;
	--member-context) need_value "$@"; member_context=$2; shift 2 ;;
	--hub-kubeconfig) need_value "$@"; hub_kubeconfig=$2; shift 2 ;;
	--hub-context) need_value "$@"; hub_context=$2; shift 2 ;;
	--resource) need_value "$@"; resources+=("$2"); shift 2 ;;
	--secret-namespace) need_value "$@"; secret_namespace=$2; shift 2 ;;
	--server) need_value "$@"; server=$2; shift 2 ;;
	--timeout) need_value "$@"; timeout=$2; shift 2 ;;
	--apply) apply=1; shift ;;
	-h | --help) usage; exit 0 ;;
	*) die "unknown argument '$1' (see --help)" ;;
	esac
done

[[ -n "${name}" ]] || die "--name is required: the MemberCluster's name"
[[ -n "${member_kubeconfig}" ]] || die "--member-kubeconfig is required: a kubeconfig with admin rights on the member"
[[ -n "${hub_kubeconfig}" ]] || die "--hub-kubeconfig is required: a kubeconfig that may write Secrets on the hub"
[[ -r "${member_kubeconfig}" ]] || die "--member-kubeconfig ${member_kubeconfig}: no such readable file"
[[ -r "${hub_kubeconfig}" ]] || die "--hub-kubeconfig ${hub_kubeconfig}: no such readable file"
command -v "${KUBECTL}" >/dev/null 2>&1 || die "kubectl not found (${KUBECTL}); install it or set KUBECTL"
# A DNS label, as the hub requires of a MemberCluster's name: checked before
# anything is written, so that no Secret is left for a MemberCluster refused.
[[ "${name}" =~ ^[a-z0-9]([-a-z0-9]*[a-z0-9])?$ && ${#name} -le 63 ]] ||
	die "--name '${name}' is not a DNS label of at most 63 characters (lower-case letters, digits, '-'), as a MemberCluster's name must be"
[[ "${secret_namespace}" =~ ^[a-z0-9]([-a-z0-9]*[a-z0-9])?$ ]] || die "--secret-namespace '${secret_namespace}' is not a namespace name"
[[ "${timeout}" =~ ^[1-9][0-9]*$ ]] || die "--timeout '${timeout}' is not a number of seconds"

member=("${KUBECTL}" --kubeconfig="${member_kubeconfig}")
[[ -z "${member_context}" ]] || member+=(--context="${member_context}")
hub=("${KUBECTL}" --kubeconfig="${hub_kubeconfig}")
[[ -z "${hub_context}" ]] || hub+=(--context="${hub_context}")

# The rules: one per kind, get, list and watch only.
((${#resources[@]})) || resources=(apps/deployments core/namespaces)
groups=() names=() rules=""
for r in "${resources[@]}"; do
	if [[ "${r}" == */* ]]; then
		group=${r%%/*} resource=${r#*/}
	else
		group="" resource=${r}
	fi
	[[ "${group}" == core ]] && group=""
	[[ "${resource}" =~ ^[a-z0-9]([-a-z0-9]*[a-z0-9])?$ ]] ||
		die "--resource '${r}': '${resource}' is not a resource name such as deployments (no wildcards, no subresources)"
	[[ -z "${group}" || "${group}" =~ ^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$ ]] ||
		die "--resource '${r}': '${group}' is not an API group such as apps (no wildcards)"
	groups+=("${group}") names+=("${resource}")
	rules+="
- apiGroups: [\"${group}\"]
  resources: [\"${resource}\"]
  verbs: [\"get\", \"list\", \"watch\"]"
done

# The member: reachable, and the context may grant what the role holds.
for what in clusterroles clusterrolebindings; do
	if ! answer=$("${member[@]}" auth can-i create "${what}" 2>&1); then
		die "the member kubeconfig may not create ${what} (kubectl auth can-i: ${answer}); use the member's admin context"
	fi
done
# A kind the member does not serve is named anyway (a CRD installed later),
# with a warning, since it is more often a typo.
for i in "${!names[@]}"; do
	group=${groups[i]} resource=${names[i]}
	served=$("${member[@]}" api-resources --api-group="${group}" -o name 2>/dev/null || true)
	if ! grep -qxF "${resource}${group:+.${group}}" <<<"${served}"; then
		log "warning: the member serves no '${resource}' in API group '${group}' (yet); the role names it anyway"
	fi
done

if [[ -z "${server}" ]]; then
	server=$("${member[@]}" config view --minify --raw -o jsonpath='{.clusters[0].cluster.server}')
	[[ -n "${server}" ]] || die "the member kubeconfig's context has no cluster server; pass --server"
fi
[[ "${server}" =~ ^https://[^[:space:]\"\'@?#]+$ ]] ||
	die "the member's server '${server}' is not an https:// URL without credentials, query or spaces: the hub accepts only those (pass --server)"
tls_server_name=$("${member[@]}" config view --minify --raw -o jsonpath='{.clusters[0].cluster.tls-server-name}')
[[ "${tls_server_name}" =~ ^[-a-zA-Z0-9.:]*$ ]] || die "the member kubeconfig's tls-server-name '${tls_server_name}' is not a host name"

# The hub's namespace, checked before anything is written in the member.
if ! out=$("${hub[@]}" get namespace "${secret_namespace}" -o name 2>&1); then
	if [[ "${out}" == *NotFound* || "${out}" == *"not found"* ]]; then
		die "the hub has no namespace ${secret_namespace} (--secret-namespace): install Kollect there first, or name another"
	fi
	log "warning: cannot check the hub's namespace ${secret_namespace}: ${out}"
fi

log "applying namespace ${NAMESPACE}, ServiceAccount ${SA}, ClusterRole and ClusterRoleBinding ${ROLE}, Secret ${TOKEN_SECRET} in the member"
"${member[@]}" apply --server-side --force-conflicts --field-manager="${MANAGER}" -f - >/dev/null <<EOF
apiVersion: v1
kind: Namespace
metadata:
  name: ${NAMESPACE}
---
apiVersion: v1
kind: ServiceAccount
metadata:
  name: ${SA}
  namespace: ${NAMESPACE}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata:
  name: ${ROLE}
rules:${rules}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata:
  name: ${ROLE}
roleRef:
  apiGroup: rbac.authorization.k8s.io
  kind: ClusterRole
  name: ${ROLE}
subjects:
- kind: ServiceAccount
  name: ${SA}
  namespace: ${NAMESPACE}
---
apiVersion: v1
kind: Secret
metadata:
  name: ${TOKEN_SECRET}
  namespace: ${NAMESPACE}
  annotations:
    kubernetes.io/service-account.name: ${SA}
type: kubernetes.io/service-account-token
EOF

# kube-controller-manager's token controller fills the Secret in.
log "waiting up to ${timeout}s for the token"
token=""
deadline=$((SECONDS + timeout))
while :; do
	token=$("${member[@]}" get secret -n "${NAMESPACE}" "${TOKEN_SECRET}" -o jsonpath='{.data.token}')
	[[ -z "${token}" ]] || break
	((SECONDS < deadline)) ||
		die "Secret ${NAMESPACE}/${TOKEN_SECRET} in the member got no token within ${timeout}s: kube-controller-manager's serviceaccount-token-controller fills it in; is it running?"
	sleep 1
done
token=$(printf '%s' "${token}" | base64 -d)

# The CA the member's admin trusts for this server; else the cluster's own
# (the token Secret's ca.crt, kube-controller-manager's --root-ca-file).
ca=$("${member[@]}" config view --minify --raw --flatten -o jsonpath='{.clusters[0].cluster.certificate-authority-data}')
if [[ -z "${ca}" ]]; then
	ca=$("${member[@]}" get secret -n "${NAMESPACE}" "${TOKEN_SECRET}" -o jsonpath='{.data.ca\.crt}')
fi
[[ -n "${ca}" ]] || die "no CA for the member: its kubeconfig has no certificate-authority(-data) and the token Secret no ca.crt"

dir=$(mktemp -d)
trap 'rm -rf "${dir}"' EXIT
umask 077
{
	echo "apiVersion: v1"
	echo "kind: Config"
	echo "clusters:"
	echo "- name: ${name}"
	echo "  cluster:"
	echo "    server: \"${server}\""
	echo "    certificate-authority-data: ${ca}"
	[[ -z "${tls_server_name}" ]] || echo "    tls-server-name: \"${tls_server_name}\""
	echo "users:"
	echo "- name: ${SA}"
	echo "  user:"
	echo "    token: \"${token}\""
	echo "contexts:"
	echo "- name: ${name}"
	echo "  context:"
	echo "    cluster: ${name}"
	echo "    user: ${SA}"
	echo "current-context: ${name}"
} >"${dir}/kubeconfig"

log "applying Secret ${secret_namespace}/${name}-kubeconfig in the hub"
"${hub[@]}" create secret generic "${name}-kubeconfig" -n "${secret_namespace}" \
	--from-file=kubeconfig="${dir}/kubeconfig" --dry-run=client -o yaml |
	"${hub[@]}" apply --server-side --force-conflicts --field-manager="${MANAGER}" -f - >/dev/null

membercluster="apiVersion: kollect.dev/v1alpha1
kind: MemberCluster
metadata:
  name: ${name}
spec:
  kubeconfigSecretRef:
    namespace: ${secret_namespace}
    name: ${name}-kubeconfig
    key: kubeconfig"

if ((apply)); then
	log "applying MemberCluster ${name} in the hub"
	printf '%s\n' "${membercluster}" | "${hub[@]}" apply --server-side --field-manager="${MANAGER}" -f - >&2
else
	log "done; apply this MemberCluster on the hub:"
	printf '%s\n' "${membercluster}"
fi
