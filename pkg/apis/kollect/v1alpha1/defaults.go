package v1alpha1

import (
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

// Defaults that are not zero values. Export intervals are deliberately not
// defaulted: an absent interval falls through the precedence chain
// (ref, sink, inventory, 30s) at export time. The snapshot path, commit
// message and NATS subject name the cluster (--cluster-name), so that the
// servers of many clusters can share one directory, repository or stream
// with the defaults.
const (
	DefaultSinkNamespace    = "kollect-system"
	DefaultPathTemplate     = "{cluster}/{namespace}/{inventory}.{ext}"
	DefaultGitBranch        = "main"
	DefaultGitAuthorName    = "Kollect"
	DefaultGitAuthorEmail   = "kollect@kollect.dev"
	DefaultGitCommitMessage = "kollect: {cluster}/{namespace}/{inventory} ({itemCount} items, {checksum})"
	DefaultPostgresSchema   = "public"
	DefaultPostgresTable    = "kollect_inventory"
	DefaultNATSSubject      = "kollect.{cluster}.{namespace}.{inventory}"
	DefaultSignatureHeader  = "X-Kollect-Signature"
	DefaultWebhookTimeout   = 10 * time.Second
	DefaultWebhookAttempts  = 5
	// DefaultKubeconfigKey is the key of a member's kubeconfig Secret.
	DefaultKubeconfigKey = "kubeconfig"
)

func addDefaultingFuncs(scheme *runtime.Scheme) error {
	return RegisterDefaults(scheme)
}

// SetDefaults_ProfileExport defaults the export mode and, in Resource mode, what is kept and pruned.
func SetDefaults_ProfileExport(obj *ProfileExport) {
	if obj.Mode == "" {
		obj.Mode = ExportModeAttributes
	}
	if obj.Mode != ExportModeResource {
		return
	}
	if obj.Include == "" {
		obj.Include = IncludeSpecAndStatus
	}
	if obj.Prune == nil {
		obj.Prune = &ResourcePrune{}
	}
}

// SetDefaults_ResourcePrune prunes managedFields and the last-applied annotation unless told otherwise.
func SetDefaults_ResourcePrune(obj *ResourcePrune) {
	if obj.ManagedFields == nil {
		obj.ManagedFields = ptrTrue()
	}
	if obj.LastAppliedAnnotation == nil {
		obj.LastAppliedAnnotation = ptrTrue()
	}
}

// SetDefaults_ClusterInventorySpec defaults the sink namespace.
func SetDefaults_ClusterInventorySpec(obj *ClusterInventorySpec) {
	if obj.SinkNamespace == "" {
		obj.SinkNamespace = DefaultSinkNamespace
	}
}

// SetDefaults_SnapshotSinkSpec defaults the encoding and deletion policy.
func SetDefaults_SnapshotSinkSpec(obj *SnapshotSinkSpec) {
	if obj.Serialization.Format == "" {
		obj.Serialization.Format = SerializationJSON
	}
	if obj.DeletionPolicy == "" {
		obj.DeletionPolicy = DeletionPolicyRetain
	}
	if obj.Type == SnapshotSinkFile && obj.File == nil {
		obj.File = &FileSinkConfig{}
	}
}

// SetDefaults_FileSinkConfig defaults the path template.
func SetDefaults_FileSinkConfig(obj *FileSinkConfig) {
	if obj.PathTemplate == "" {
		obj.PathTemplate = DefaultPathTemplate
	}
}

// SetDefaults_GitSinkConfig defaults branch, path, message and author.
func SetDefaults_GitSinkConfig(obj *GitSinkConfig) {
	if obj.Branch == "" {
		obj.Branch = DefaultGitBranch
	}
	if obj.PathTemplate == "" {
		obj.PathTemplate = DefaultPathTemplate
	}
	if obj.CommitMessage == "" {
		obj.CommitMessage = DefaultGitCommitMessage
	}
	if obj.AuthorName == "" {
		obj.AuthorName = DefaultGitAuthorName
	}
	if obj.AuthorEmail == "" {
		obj.AuthorEmail = DefaultGitAuthorEmail
	}
}

// SetDefaults_DatabaseSinkSpec defaults the deletion policy and the postgres block.
func SetDefaults_DatabaseSinkSpec(obj *DatabaseSinkSpec) {
	if obj.DeletionPolicy == "" {
		obj.DeletionPolicy = DeletionPolicyRetain
	}
	if obj.Type == DatabaseSinkPostgres && obj.Postgres == nil {
		obj.Postgres = &PostgresSinkConfig{}
	}
}

// SetDefaults_PostgresSinkConfig defaults schema and table.
func SetDefaults_PostgresSinkConfig(obj *PostgresSinkConfig) {
	if obj.Schema == "" {
		obj.Schema = DefaultPostgresSchema
	}
	if obj.Table == "" {
		obj.Table = DefaultPostgresTable
	}
}

// SetDefaults_EventSinkSpec defaults the deletion policy and the webhook block.
func SetDefaults_EventSinkSpec(obj *EventSinkSpec) {
	if obj.DeletionPolicy == "" {
		obj.DeletionPolicy = DeletionPolicyRetain
	}
	if obj.Type == EventSinkWebhook && obj.Webhook == nil {
		obj.Webhook = &WebhookSinkConfig{}
	}
}

// SetDefaults_NATSSinkConfig defaults the subject template.
func SetDefaults_NATSSinkConfig(obj *NATSSinkConfig) {
	if obj.Subject == "" {
		obj.Subject = DefaultNATSSubject
	}
}

// SetDefaults_WebhookSinkConfig defaults header, timeout and attempts.
func SetDefaults_WebhookSinkConfig(obj *WebhookSinkConfig) {
	if obj.SignatureHeader == "" {
		obj.SignatureHeader = DefaultSignatureHeader
	}
	if obj.Timeout == nil {
		obj.Timeout = &metav1.Duration{Duration: DefaultWebhookTimeout}
	}
	if obj.MaxAttempts == 0 {
		obj.MaxAttempts = DefaultWebhookAttempts
	}
}

// SetDefaults_MemberClusterSpec defaults the key of the kubeconfig Secret.
func SetDefaults_MemberClusterSpec(obj *MemberClusterSpec) {
	if obj.KubeconfigSecretRef.Key == "" {
		obj.KubeconfigSecretRef.Key = DefaultKubeconfigKey
	}
}

func ptrTrue() *bool {
	t := true
	return &t
}
