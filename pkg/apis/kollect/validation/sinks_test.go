package validation

import (
	"fmt"
	"sort"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/util/validation/field"

	"kollect.dev/kollect/pkg/apis/kollect"
)

// withoutLocalSinks is a server started without --file-sink-root and
// without --allow-local-git-sinks.
var withoutLocalSinks = Options{LookupIP: fakeLookup}

// TestLocalSinkFlags: file sinks, and git sinks on the server's file
// system, exist only on a server started with the flag that allows them;
// an update that keeps the endpoint keeps an admitted sink editable.
func TestLocalSinkFlags(t *testing.T) {
	localGit := func() *kollect.SnapshotSink {
		s := validGitSink()
		s.Spec.Endpoint = "file:///srv/git/inventory.git"
		return s
	}
	relabel := func(s *kollect.SnapshotSink) { s.Labels = map[string]string{"edited": "true"} }
	tests := []struct {
		name string
		errs field.ErrorList
		want []fieldErr
		// message is in the first error's detail.
		message string
	}{
		{"file sink without --file-sink-root", ValidateSnapshotSink(validFileSink(), withoutLocalSinks),
			[]fieldErr{{"spec.type", field.ErrorTypeForbidden}}, "--file-sink-root"},
		{"file sink with --file-sink-root", ValidateSnapshotSink(validFileSink(), testOptions), nil, ""},
		{"file sink update keeping the endpoint, without the flag", func() field.ErrorList {
			obj, old := validFileSink(), validFileSink()
			relabel(obj)
			return ValidateSnapshotSinkUpdate(obj, old, withoutLocalSinks)
		}(), nil, ""},
		{"file sink update moving the endpoint, without the flag", func() field.ErrorList {
			obj, old := validFileSink(), validFileSink()
			obj.Spec.Endpoint = "file:///elsewhere"
			return ValidateSnapshotSinkUpdate(obj, old, withoutLocalSinks)
		}(), []fieldErr{{"spec.type", field.ErrorTypeForbidden}}, "--file-sink-root"},
		{"local git sink without --allow-local-git-sinks", ValidateSnapshotSink(localGit(), withoutLocalSinks),
			[]fieldErr{{"spec.endpoint", field.ErrorTypeForbidden}}, "--allow-local-git-sinks"},
		{"local git sink with --allow-local-git-sinks", ValidateSnapshotSink(localGit(), testOptions), nil, ""},
		{"local git sink update keeping the endpoint, without the flag", func() field.ErrorList {
			obj, old := localGit(), localGit()
			relabel(obj)
			return ValidateSnapshotSinkUpdate(obj, old, withoutLocalSinks)
		}(), nil, ""},
		{"git sink update moving to a local repository, without the flag", func() field.ErrorList {
			obj, old := localGit(), validGitSink()
			return ValidateSnapshotSinkUpdate(obj, old, withoutLocalSinks)
		}(), []fieldErr{{"spec.endpoint", field.ErrorTypeForbidden}}, "--allow-local-git-sinks"},
		{"remote git sink without the flags", ValidateSnapshotSink(validGitSink(), withoutLocalSinks), nil, ""},
		{"git sink with an upper-case FILE scheme", func() field.ErrorList {
			s := localGit()
			s.Spec.Endpoint = "FILE:///srv/git/inventory.git"
			return ValidateSnapshotSink(s, withoutLocalSinks)
		}(), []fieldErr{{"spec.endpoint", field.ErrorTypeForbidden}}, "--allow-local-git-sinks"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := fieldErrs(tc.errs)
			if fmt.Sprint(got) != fmt.Sprint(tc.want) {
				t.Fatalf("errors:\n got  %v\n want %v\n full: %v", got, tc.want, tc.errs)
			}
			if tc.message != "" && !strings.Contains(tc.errs[0].Detail, tc.message) {
				t.Errorf("error %q does not name %s", tc.errs[0].Error(), tc.message)
			}
		})
	}
}

// TestFileSinkPaths: a file sink's endpoint path (relative to the
// namespace's directory) and path template are plain relative paths.
func TestFileSinkPaths(t *testing.T) {
	long := strings.Repeat("a", 256)
	tests := []struct {
		name, endpoint, template string
		want                     []fieldErr
	}{
		{"the namespace's directory itself", "file:///", "", nil},
		{"a directory", "file:///reports", "", nil},
		{"doubled slashes and dots, cleaned", "file:////reports//./daily/", "", nil},
		{"a name of 255 bytes", "file:///" + long[:255], "", nil},
		{"a template naming another namespace's directory, inside this one", "file:///reports", "team-b/{inventory}.{ext}", nil},
		{"the default template, with the cluster", "file:///reports", "{cluster}/{namespace}/{inventory}.{ext}", nil},
		{"a template going up through the cluster", "file:///reports", "{cluster}/../../{inventory}.{ext}", []fieldErr{{"spec.file.pathTemplate", field.ErrorTypeInvalid}}},
		{"..", "file:///../team-b", "", []fieldErr{{"spec.endpoint", field.ErrorTypeInvalid}}},
		{".. after a name", "file:///reports/../../team-b", "", []fieldErr{{"spec.endpoint", field.ErrorTypeInvalid}}},
		{"percent-encoded ..", "file:///%2e%2e/team-b", "", []fieldErr{{"spec.endpoint", field.ErrorTypeInvalid}}},
		{"percent-encoded .. and slash", "file:///reports/%2E%2E%2F%2e%2e/team-b", "", []fieldErr{{"spec.endpoint", field.ErrorTypeInvalid}}},
		{"backslashes", `file:///reports\..\..\team-b`, "", []fieldErr{{"spec.endpoint", field.ErrorTypeInvalid}}},
		{"percent-encoded backslashes", "file:///reports%5C..%5Cteam-b", "", []fieldErr{{"spec.endpoint", field.ErrorTypeInvalid}}},
		{"NUL", "file:///reports%00.json", "", []fieldErr{{"spec.endpoint", field.ErrorTypeInvalid}}},
		{"newline", "file:///reports%0Aevil", "", []fieldErr{{"spec.endpoint", field.ErrorTypeInvalid}}},
		{"DEL", "file:///reports%7F", "", []fieldErr{{"spec.endpoint", field.ErrorTypeInvalid}}},
		{"a name of 256 bytes", "file:///" + long, "", []fieldErr{{"spec.endpoint", field.ErrorTypeInvalid}}},
		{"a path of 1,025 bytes", "file://" + strings.Repeat("/abcdefgh", 113) + "/abcdefg", "", []fieldErr{{"spec.endpoint", field.ErrorTypeTooLong}}},
		{"a host", "file://team-b/reports", "", []fieldErr{{"spec.endpoint", field.ErrorTypeInvalid}}},
		{"a relative URL", "file:reports", "", []fieldErr{{"spec.endpoint", field.ErrorTypeInvalid}}},
		{"a template going up", "file:///reports", "../team-b/{inventory}.{ext}", []fieldErr{{"spec.file.pathTemplate", field.ErrorTypeInvalid}}},
		{"an absolute template", "file:///reports", "/etc/{inventory}.{ext}", []fieldErr{{"spec.file.pathTemplate", field.ErrorTypeInvalid}}},
		{"a template with a backslash", "file:///reports", `{namespace}\..\x.{ext}`, []fieldErr{{"spec.file.pathTemplate", field.ErrorTypeInvalid}}},
		{"a template with NUL", "file:///reports", "{inventory}\x00.{ext}", []fieldErr{{"spec.file.pathTemplate", field.ErrorTypeInvalid}}},
		{"a template with a tab", "file:///reports", "{inventory}\t.{ext}", []fieldErr{{"spec.file.pathTemplate", field.ErrorTypeInvalid}}},
		{"a template with a 256-byte name", "file:///reports", long + "/{inventory}.{ext}", []fieldErr{{"spec.file.pathTemplate", field.ErrorTypeInvalid}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := validFileSink()
			s.Spec.Endpoint = tc.endpoint
			if tc.template != "" {
				s.Spec.File.PathTemplate = tc.template
			}
			errs := ValidateSnapshotSink(s, testOptions)
			got := fieldErrs(errs)
			want := append([]fieldErr(nil), tc.want...)
			sort.Slice(want, func(i, j int) bool { return want[i].String() < want[j].String() })
			if fmt.Sprint(got) != fmt.Sprint(want) {
				t.Errorf("errors:\n got  %v\n want %v\n full: %v", got, want, errs)
			}
		})
	}
}
