package validation

import (
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"net/url"
	"strconv"
	"strings"

	apivalidation "k8s.io/apimachinery/pkg/api/validation"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilvalidation "k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"kollect.dev/kollect/pkg/apis/kollect"
)

var (
	snapshotSinkTypes    = []kollect.SnapshotSinkType{kollect.SnapshotSinkFile, kollect.SnapshotSinkGit}
	databaseSinkTypes    = []kollect.DatabaseSinkType{kollect.DatabaseSinkPostgres}
	eventSinkTypes       = []kollect.EventSinkType{kollect.EventSinkNATS, kollect.EventSinkWebhook}
	deletionPolicies     = []kollect.DeletionPolicy{kollect.DeletionPolicyRetain, kollect.DeletionPolicyDelete}
	serializationFormats = []kollect.SerializationFormat{kollect.SerializationJSON, kollect.SerializationYAML, kollect.SerializationNDJSON}
)

var (
	fileEndpoint     = endpointRule{schemes: []string{"file"}, example: "file:///var/lib/kollect"}
	gitEndpoint      = endpointRule{schemes: []string{"https", "http", "ssh", "file"}, example: "https://git.example.com/org/inventory.git"}
	postgresEndpoint = endpointRule{schemes: []string{"postgres", "postgresql"}, example: "postgres://db.example.com:5432/inventory"}
	natsEndpoint     = endpointRule{schemes: []string{"nats", "tls"}, example: "nats://nats.example.com:4222", requirePort: true}
	webhookEndpoint  = endpointRule{schemes: []string{"https", "http"}, example: "https://hooks.example.com/kollect"}
)

var (
	endpointPath = specPath.Child("endpoint")
	typePath     = specPath.Child("type")
)

// ValidateSnapshotSink validates a SnapshotSink on creation.
func ValidateSnapshotSink(obj *kollect.SnapshotSink, opts Options) field.ErrorList {
	spec := &obj.Spec
	errs := sinkCommon{&obj.ObjectMeta, spec.SecretRef, spec.TLS, spec.ExportMinInterval, spec.DeletionPolicy}.validate()
	errs = append(errs, validateEnum(spec.Type, snapshotSinkTypes, typePath)...)
	errs = append(errs, validateEnum(spec.Serialization.Format, serializationFormats, specPath.Child("serialization", "format"))...)
	switch spec.Type {
	case kollect.SnapshotSinkFile:
		if !opts.FileSinks {
			errs = append(errs, field.Forbidden(typePath, "file sinks are disabled: the server runs without --file-sink-root"))
		}
		errs = append(errs, validateFileEndpoint(spec.Endpoint, opts)...)
		errs = append(errs, forbidBlock(spec.Git != nil, "git", spec.Type)...)
		if spec.File != nil {
			tmplPath := specPath.Child("file", "pathTemplate")
			if errs1 := validatePathTemplate(spec.File.PathTemplate, tmplPath); len(errs1) > 0 {
				errs = append(errs, errs1...)
			} else {
				errs = append(errs, validateLocalPath(spec.File.PathTemplate, tmplPath)...)
			}
		}
	case kollect.SnapshotSinkGit:
		errs = append(errs, opts.validateEndpoint(spec.Endpoint, gitEndpoint, endpointPath)...)
		if u, err := url.Parse(spec.Endpoint); err == nil && u.Scheme == "file" && !opts.AllowLocalGitSinks {
			errs = append(errs, field.Forbidden(endpointPath, "git repositories on the server's file system (file://) are disabled: the server runs without --allow-local-git-sinks"))
		}
		errs = append(errs, forbidBlock(spec.File != nil, "file", spec.Type)...)
		errs = append(errs, validateGitConfig(spec.Git, specPath.Child("git"))...)
	}
	return errs
}

// ValidateSnapshotSinkUpdate validates a SnapshotSink on update: type is immutable.
func ValidateSnapshotSinkUpdate(obj, old *kollect.SnapshotSink, opts Options) field.ErrorList {
	errs := ValidateSnapshotSink(obj, opts.forUpdate(obj.Spec.Endpoint, old.Spec.Endpoint))
	return append(errs, validateSinkUpdate(&obj.ObjectMeta, &old.ObjectMeta, obj.Spec.Type, old.Spec.Type)...)
}

// ValidateDatabaseSink validates a DatabaseSink on creation.
func ValidateDatabaseSink(obj *kollect.DatabaseSink, opts Options) field.ErrorList {
	spec := &obj.Spec
	errs := sinkCommon{&obj.ObjectMeta, spec.SecretRef, spec.TLS, spec.ExportMinInterval, spec.DeletionPolicy}.validate()
	errs = append(errs, validateEnum(spec.Type, databaseSinkTypes, typePath)...)
	if spec.Type != kollect.DatabaseSinkPostgres {
		return errs
	}
	if spec.Endpoint != "" {
		errs = append(errs, opts.validatePostgresEndpoint(spec.Endpoint, endpointPath)...)
	} else if spec.SecretRef == nil {
		errs = append(errs, field.Required(specPath.Child("secretRef"), `required when endpoint is empty: its "dsn" key holds the connection string`))
	}
	return append(errs, validatePostgresConfig(spec.Postgres, specPath.Child("postgres"))...)
}

// ValidateDatabaseSinkUpdate validates a DatabaseSink on update: type is immutable.
func ValidateDatabaseSinkUpdate(obj, old *kollect.DatabaseSink, opts Options) field.ErrorList {
	errs := ValidateDatabaseSink(obj, opts.forUpdate(obj.Spec.Endpoint, old.Spec.Endpoint))
	return append(errs, validateSinkUpdate(&obj.ObjectMeta, &old.ObjectMeta, obj.Spec.Type, old.Spec.Type)...)
}

// ValidateEventSink validates an EventSink on creation.
func ValidateEventSink(obj *kollect.EventSink, opts Options) field.ErrorList {
	spec := &obj.Spec
	errs := sinkCommon{&obj.ObjectMeta, spec.SecretRef, spec.TLS, spec.ExportMinInterval, spec.DeletionPolicy}.validate()
	errs = append(errs, validateEnum(spec.Type, eventSinkTypes, typePath)...)
	switch spec.Type {
	case kollect.EventSinkNATS:
		errs = append(errs, opts.validateEndpoint(spec.Endpoint, natsEndpoint, endpointPath)...)
		errs = append(errs, forbidBlock(spec.Webhook != nil, "webhook", spec.Type)...)
		errs = append(errs, validateNATSConfig(spec.NATS, specPath.Child("nats"))...)
	case kollect.EventSinkWebhook:
		errs = append(errs, opts.validateEndpoint(spec.Endpoint, webhookEndpoint, endpointPath)...)
		errs = append(errs, forbidBlock(spec.NATS != nil, "nats", spec.Type)...)
		if spec.Webhook != nil {
			errs = append(errs, validateWebhookConfig(spec.Webhook, specPath.Child("webhook"))...)
		}
	}
	return errs
}

// ValidateEventSinkUpdate validates an EventSink on update: type is immutable.
func ValidateEventSinkUpdate(obj, old *kollect.EventSink, opts Options) field.ErrorList {
	errs := ValidateEventSink(obj, opts.forUpdate(obj.Spec.Endpoint, old.Spec.Endpoint))
	return append(errs, validateSinkUpdate(&obj.ObjectMeta, &old.ObjectMeta, obj.Spec.Type, old.Spec.Type)...)
}

// validateSinkUpdate checks what an update of any sink kind may not change.
func validateSinkUpdate[T ~string](meta, oldMeta *metav1.ObjectMeta, sinkType, oldType T) field.ErrorList {
	errs := validateMetaUpdate(meta, oldMeta)
	return append(errs, apivalidation.ValidateImmutableField(sinkType, oldType, typePath)...)
}

// forUpdate skips the checks of an endpoint an update leaves as it was:
// DNS answers change, a server may lose --file-sink-root or
// --allow-local-git-sinks, and an admitted sink must stay editable (its
// labels, say) and deletable. The exporters check again what they use:
// the addresses they dial, and the flags.
func (o Options) forUpdate(endpoint, oldEndpoint string) Options {
	if endpoint == oldEndpoint {
		o.AllowPrivateSinkEndpoints = true
		o.FileSinks = true
		o.AllowLocalGitSinks = true
	}
	return o
}

// Bounds of a file sink's paths, below Linux's PATH_MAX (4096) and
// NAME_MAX (255) so that the root directory, the namespace and the
// expanded template still fit.
const (
	maxFileSinkPath = 1024
	maxFileName     = 255
)

// validateFileEndpoint checks a file sink's endpoint. Its path is relative
// to the namespace's directory under --file-sink-root (file:///reports is
// DIR/<namespace>/reports), so besides the URL form it must be a plain
// path: no control characters or backslashes, names of a length the file
// system takes.
func validateFileEndpoint(endpoint string, opts Options) field.ErrorList {
	if errs := opts.validateEndpoint(endpoint, fileEndpoint, endpointPath); len(errs) > 0 {
		return errs
	}
	u, err := url.Parse(endpoint)
	if err != nil { // validateEndpoint parsed it already
		return field.ErrorList{field.Invalid(endpointPath, endpoint, "must be a URL")}
	}
	return validateLocalPath(u.Path, endpointPath)
}

// validateLocalPath checks a slash-separated path the server will create
// on its file system: ".." and absolute paths are checked by the callers.
func validateLocalPath(p string, fldPath *field.Path) field.ErrorList {
	switch {
	case len(p) > maxFileSinkPath:
		return field.ErrorList{field.TooLong(fldPath, field.OmitValueType{}, maxFileSinkPath)}
	case strings.IndexFunc(p, isControl) >= 0:
		return field.ErrorList{field.Invalid(fldPath, strconv.Quote(p), "must not contain control characters such as NUL or newline")}
	case strings.Contains(p, `\`):
		return field.ErrorList{field.Invalid(fldPath, p, "must not contain backslashes: separate directories with '/'")}
	}
	for _, name := range strings.Split(p, "/") {
		if len(name) > maxFileName {
			return field.ErrorList{field.Invalid(fldPath, p, fmt.Sprintf("must not have a name longer than %d bytes between slashes", maxFileName))}
		}
	}
	return nil
}

func isControl(r rune) bool { return r < 0x20 || r == 0x7f }

// validateEndpoint checks an endpoint against the rule of its sink type.
func (o Options) validateEndpoint(endpoint string, rule endpointRule, fldPath *field.Path) field.ErrorList {
	u, errs := parseEndpoint(endpoint, rule, fldPath)
	switch {
	case u == nil:
		return errs
	case u.Scheme == "file":
		return validateFileURL(u, fldPath)
	default:
		return o.validateNetworkURL(u, rule, fldPath)
	}
}

// validatePostgresEndpoint also checks the libpq query parameters that
// carry a password or other hosts.
func (o Options) validatePostgresEndpoint(endpoint string, fldPath *field.Path) field.ErrorList {
	errs := o.validateEndpoint(endpoint, postgresEndpoint, fldPath)
	u, err := url.Parse(endpoint)
	if len(errs) > 0 || err != nil {
		return errs
	}
	query := u.Query()
	if query.Has("password") {
		return field.ErrorList{field.Forbidden(fldPath, "must not contain credentials: put credentials in the Secret named by spec.secretRef")}
	}
	for _, param := range []string{"host", "hostaddr"} {
		for _, value := range query[param] {
			for _, host := range strings.Split(value, ",") {
				errs = append(errs, o.validateHost(host, fldPath)...)
			}
		}
	}
	return errs
}

// sinkCommon holds the fields every sink kind has.
type sinkCommon struct {
	meta           *metav1.ObjectMeta
	secretRef      *kollect.LocalObjectReference
	tls            *kollect.TLSConfig
	interval       *metav1.Duration
	deletionPolicy kollect.DeletionPolicy
}

func (c sinkCommon) validate() field.ErrorList {
	errs := validateNamespacedMeta(c.meta)
	if c.secretRef != nil {
		errs = append(errs, validateObjectName(c.secretRef.Name, specPath.Child("secretRef", "name"))...)
	}
	if c.tls != nil {
		errs = append(errs, validateTLS(c.tls, specPath.Child("tls"))...)
	}
	errs = append(errs, validateInterval(c.interval, specPath.Child("exportMinInterval"))...)
	return append(errs, validateEnum(c.deletionPolicy, deletionPolicies, specPath.Child("deletionPolicy"))...)
}

func validateTLS(tls *kollect.TLSConfig, fldPath *field.Path) field.ErrorList {
	var errs field.ErrorList
	if len(tls.CABundle) > 0 {
		errs = append(errs, validateCABundle(tls.CABundle, fldPath.Child("caBundle"))...)
	}
	if tls.ServerName != "" && !isHostName(tls.ServerName) {
		errs = append(errs, field.Invalid(fldPath.Child("serverName"), tls.ServerName, "must be a DNS name or an IP address"))
	}
	return errs
}

// validateCABundle checks that a bundle holds PEM certificates and nothing else.
func validateCABundle(bundle []byte, fldPath *field.Path) field.ErrorList {
	count := 0
	rest := bundle
	for {
		var block *pem.Block
		block, rest = pem.Decode(rest)
		if block == nil {
			break
		}
		if block.Type != "CERTIFICATE" {
			return field.ErrorList{field.Invalid(fldPath, field.OmitValueType{}, "must hold only PEM CERTIFICATE blocks, not "+block.Type)}
		}
		if _, err := x509.ParseCertificate(block.Bytes); err != nil {
			return field.ErrorList{field.Invalid(fldPath, field.OmitValueType{}, "holds a certificate that does not parse: "+err.Error())}
		}
		count++
	}
	switch {
	case count == 0:
		return field.ErrorList{field.Invalid(fldPath, field.OmitValueType{}, "must hold at least one PEM certificate")}
	case len(strings.TrimSpace(string(rest))) > 0:
		return field.ErrorList{field.Invalid(fldPath, field.OmitValueType{}, "holds data that is not a PEM certificate")}
	}
	return nil
}

// forbidBlock forbids the configuration block of another sink type.
func forbidBlock[T ~string](set bool, block string, sinkType T) field.ErrorList {
	if !set {
		return nil
	}
	return field.ErrorList{field.Forbidden(specPath.Child(block), "may only be set when type is "+block+", not "+string(sinkType))}
}

// requireBlock reports the absent configuration block of a sink type.
func requireBlock(block string) *field.Error {
	return field.Required(specPath.Child(block), "required when type is "+block)
}

func validateNATSConfig(nats *kollect.NATSSinkConfig, fldPath *field.Path) field.ErrorList {
	if nats == nil {
		return field.ErrorList{requireBlock("nats")}
	}
	errs := streamNameRule.validate(nats.Stream, fldPath.Child("stream"))
	return append(errs, validateSubjectTemplate(nats.Subject, fldPath.Child("subject"))...)
}

func validateWebhookConfig(webhook *kollect.WebhookSinkConfig, fldPath *field.Path) field.ErrorList {
	var errs field.ErrorList
	headerPath := fldPath.Child("signatureHeader")
	if webhook.SignatureHeader == "" {
		errs = append(errs, field.Required(headerPath, ""))
	} else {
		errs = append(errs, invalid(headerPath, webhook.SignatureHeader, utilvalidation.IsHTTPHeaderName(webhook.SignatureHeader))...)
	}
	if webhook.Timeout != nil && webhook.Timeout.Duration == 0 {
		errs = append(errs, field.Invalid(fldPath.Child("timeout"), "0s", "must be positive"))
	}
	errs = append(errs, validateDuration(webhook.Timeout, maxWebhookTimeout, fldPath.Child("timeout"))...)
	if webhook.MaxAttempts < 1 || webhook.MaxAttempts > maxWebhookAttempts {
		errs = append(errs, field.Invalid(fldPath.Child("maxAttempts"), webhook.MaxAttempts, utilvalidation.InclusiveRangeError(1, maxWebhookAttempts)))
	}
	return errs
}
