package validation

import (
	"math"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/utils/ptr"

	"kollect.dev/kollect/pkg/apis/kollect"
)

// TestValidQuotas: 0 (nothing allowed) and maxItemBytes up to etcd's
// limit, in any unit, are valid.
func TestValidQuotas(t *testing.T) {
	for name, mutate := range map[string]func(*kollect.ScopeSpec){
		"zero quotas": func(s *kollect.ScopeSpec) {
			s.MaxTargets, s.MaxInventories, s.MaxSinks = ptr.To[int32](0), ptr.To[int32](0), ptr.To[int32](0)
			s.MaxItems, s.MaxItemBytes = ptr.To[int64](0), ptr.To(resource.MustParse("0"))
		},
		"no quotas": func(s *kollect.ScopeSpec) {
			s.MaxTargets, s.MaxInventories, s.MaxSinks, s.MaxItems, s.MaxItemBytes = nil, nil, nil, nil, nil
		},
		"maxItemBytes at etcd's limit":  func(s *kollect.ScopeSpec) { s.MaxItemBytes = ptr.To(resource.MustParse("1572864")) },
		"maxItemBytes in decimal units": func(s *kollect.ScopeSpec) { s.MaxItemBytes = ptr.To(resource.MustParse("1.5k")) },
		"large counts": func(s *kollect.ScopeSpec) {
			s.MaxTargets, s.MaxItems = ptr.To[int32](math.MaxInt32), ptr.To[int64](math.MaxInt64)
		},
	} {
		s := validScope()
		mutate(&s.Spec)
		if errs := ValidateScope(s); len(errs) > 0 {
			t.Errorf("%s: %v", name, errs)
		}
	}
}

// TestQuotaMessages: a refused quota names its field and says why, in the
// words clients match on (kube's own "greater than or equal to 0").
func TestQuotaMessages(t *testing.T) {
	for _, tc := range []struct {
		name   string
		mutate func(*kollect.ScopeSpec)
		field  string
		want   string
	}{
		{"maxTargets", func(s *kollect.ScopeSpec) { s.MaxTargets = ptr.To[int32](-1) }, "spec.maxTargets", "greater than or equal to 0"},
		{"maxInventories", func(s *kollect.ScopeSpec) { s.MaxInventories = ptr.To[int32](-1) }, "spec.maxInventories", "greater than or equal to 0"},
		{"maxSinks", func(s *kollect.ScopeSpec) { s.MaxSinks = ptr.To[int32](-1) }, "spec.maxSinks", "greater than or equal to 0"},
		{"maxItems", func(s *kollect.ScopeSpec) { s.MaxItems = ptr.To[int64](-1) }, "spec.maxItems", "greater than or equal to 0"},
		{"negative maxItemBytes", func(s *kollect.ScopeSpec) { s.MaxItemBytes = ptr.To(resource.MustParse("-1Ki")) }, "spec.maxItemBytes", "greater than or equal to 0"},
		{"maxItemBytes over 1.5Mi", func(s *kollect.ScopeSpec) { s.MaxItemBytes = ptr.To(resource.MustParse("2Mi")) }, "spec.maxItemBytes", "at most 1.5Mi"},
	} {
		s := validScope()
		tc.mutate(&s.Spec)
		errs := ValidateScope(s)
		if len(errs) != 1 || errs[0].Field != tc.field || !strings.Contains(errs[0].Error(), tc.want) {
			t.Errorf("%s: %v, want one error on %s saying %q", tc.name, errs, tc.field, tc.want)
		}
		cs := validClusterScope()
		cs.Spec.MaxTargets, cs.Spec.MaxInventories, cs.Spec.MaxSinks, cs.Spec.MaxItems, cs.Spec.MaxItemBytes =
			s.Spec.MaxTargets, s.Spec.MaxInventories, s.Spec.MaxSinks, s.Spec.MaxItems, s.Spec.MaxItemBytes
		if errs := ValidateClusterScope(cs); len(errs) != 1 || errs[0].Field != tc.field || !strings.Contains(errs[0].Error(), tc.want) {
			t.Errorf("cluster scope, %s: %v, want one error on %s saying %q", tc.name, errs, tc.field, tc.want)
		}
	}
}
