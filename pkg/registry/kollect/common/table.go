package common

import (
	"context"
	"fmt"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/duration"

	"kollect.dev/kollect/pkg/apis/kollect"
)

// Table converts objects of one kind to kubectl rows: a name column first,
// the kind's columns, and an age column last.
type Table[T runtime.Object] struct {
	// Columns are the kind's own columns, between NAME and AGE.
	Columns []metav1.TableColumnDefinition
	// Cells returns the values of Columns for one object.
	Cells func(obj T) []any
}

var (
	nameColumn = metav1.TableColumnDefinition{Name: "Name", Type: "string", Format: "name", Description: metav1.ObjectMeta{}.SwaggerDoc()["name"]}
	ageColumn  = metav1.TableColumnDefinition{Name: "Age", Type: "string", Description: metav1.ObjectMeta{}.SwaggerDoc()["creationTimestamp"]}
)

// ConvertToTable implements rest.TableConvertor.
func (t Table[T]) ConvertToTable(_ context.Context, object runtime.Object, tableOptions runtime.Object) (*metav1.Table, error) {
	table := &metav1.Table{}
	if opts, ok := tableOptions.(*metav1.TableOptions); !ok || !opts.NoHeaders {
		table.ColumnDefinitions = append(append([]metav1.TableColumnDefinition{nameColumn}, t.Columns...), ageColumn)
	}
	row := func(obj runtime.Object) error {
		typed, ok := obj.(T)
		if !ok {
			return fmt.Errorf("cannot render %T in this table", obj)
		}
		m, err := meta.Accessor(obj)
		if err != nil {
			return err
		}
		cells := append(append([]any{m.GetName()}, t.Cells(typed)...), Age(m.GetCreationTimestamp()))
		table.Rows = append(table.Rows, metav1.TableRow{Cells: cells, Object: runtime.RawExtension{Object: obj}})
		return nil
	}
	if meta.IsListType(object) {
		if err := meta.EachListItem(object, row); err != nil {
			return nil, err
		}
		if l, err := meta.ListAccessor(object); err == nil {
			table.ResourceVersion = l.GetResourceVersion()
			table.Continue = l.GetContinue()
			table.RemainingItemCount = l.GetRemainingItemCount()
		}
		return table, nil
	}
	if err := row(object); err != nil {
		return nil, err
	}
	if m, err := meta.Accessor(object); err == nil {
		table.ResourceVersion = m.GetResourceVersion()
	}
	return table, nil
}

// Age renders a timestamp the way kubectl does ("5m", "3d"), or "<unknown>".
func Age(t metav1.Time) string {
	if t.IsZero() {
		return "<unknown>"
	}
	return duration.HumanDuration(time.Since(t.Time))
}

// Since renders an optional timestamp as an age, or "<none>".
func Since(t *metav1.Time) string {
	if t == nil || t.IsZero() {
		return "<none>"
	}
	return Age(*t)
}

// ConditionStatus renders a condition as its status, or its reason when it
// is not True, so that one column says both whether and why.
func ConditionStatus(conds []metav1.Condition, typ string) string {
	c := meta.FindStatusCondition(conds, typ)
	switch {
	case c == nil:
		return "Unknown"
	case c.Status == metav1.ConditionTrue:
		return "True"
	case c.Reason != "":
		return c.Reason
	default:
		return string(c.Status)
	}
}

// Column is a shorthand for a string column definition.
func Column(name, description string) metav1.TableColumnDefinition {
	return metav1.TableColumnDefinition{Name: name, Type: "string", Description: description}
}

// WideColumn is a column shown only with -o wide.
func WideColumn(name, description string) metav1.TableColumnDefinition {
	return metav1.TableColumnDefinition{Name: name, Type: "string", Description: description, Priority: 1}
}

// ItemCount renders the collected count of a collection report.
func ItemCount(obs *kollect.CollectionObservation) int64 {
	if obs == nil {
		return 0
	}
	return obs.ItemCount
}

// Selector renders a label selector the way kubectl does, or "<none>".
func Selector(sel *metav1.LabelSelector) string {
	if sel == nil {
		return "<none>"
	}
	s, err := metav1.LabelSelectorAsSelector(sel)
	if err != nil {
		return "<invalid>"
	}
	if s.Empty() {
		return "<all>"
	}
	return s.String()
}

// InventoryColumns are the columns of Inventories and ClusterInventories.
var InventoryColumns = []metav1.TableColumnDefinition{
	Column("Sinks", "Sinks holding the current inventory, of those referenced."),
	{Name: "Items", Type: "integer", Description: "Items in the last export."},
	Column("Synced", "True when every sink holds the current inventory, else the reason."),
	Column("Last Export", "Time since the latest export to any sink."),
}

// InventoryCells renders the columns of InventoryColumns.
func InventoryCells(s *kollect.InventoryStatus) []any {
	sinks := s.SinksSynced
	if sinks == "" {
		sinks = "0/0"
	}
	return []any{sinks, s.ItemCount, ConditionStatus(s.Conditions, kollect.ConditionSynced), Since(s.LastExportTime)}
}

// SinkColumns are the columns of the three sink kinds.
var SinkColumns = []metav1.TableColumnDefinition{
	Column("Type", "The sink type."),
	Column("Endpoint", "Where the sink writes; credentials live in the Secret, never here."),
	Column("Interval", "The sink's default re-export interval, if set."),
	Column("Ready", "Whether the last connection probe succeeded, or why not."),
}

// SinkCells renders the columns of SinkColumns.
func SinkCells(typ, endpoint string, interval *metav1.Duration, s *kollect.SinkStatus) []any {
	iv := "<none>"
	if interval != nil {
		iv = interval.Duration.String()
	}
	if endpoint == "" {
		endpoint = "<in secret>"
	}
	return []any{typ, endpoint, iv, ConditionStatus(s.Conditions, kollect.ConditionReady)}
}

// ScopeColumns are the columns of Scopes and ClusterScopes.
var ScopeColumns = []metav1.TableColumnDefinition{
	Column("Min Interval", "The floor under export intervals."),
	Column("Kinds", "The kinds that may be collected, or <all>."),
	{Name: "Sinks", Type: "integer", Description: "How many sinks the allowlists name; 0 allows all."},
}

// ScopeCells renders the columns of ScopeColumns.
func ScopeCells(floor *metav1.Duration, kinds []kollect.GroupKind, sinkLists ...[]string) []any {
	fl := "<none>"
	if floor != nil {
		fl = floor.Duration.String()
	}
	ks := "<all>"
	if len(kinds) > 0 {
		names := make([]string, len(kinds))
		for i, k := range kinds {
			names[i] = k.Kind
			if k.Group != "" {
				names[i] = k.Kind + "." + k.Group
			}
		}
		ks = strings.Join(names, ",")
	}
	sinks := 0
	for _, l := range sinkLists {
		sinks += len(l)
	}
	return []any{fl, ks, int64(sinks)}
}

// ItemColumns are the columns of InventoryItems and ClusterInventoryItems.
var ItemColumns = []metav1.TableColumnDefinition{
	Column("Cluster", "The cluster the collected object lives in."),
	Column("Kind", "The kind of the collected object."),
	Column("Source", "The collected object, as namespace/name."),
	Column("Target", "The target that collected it."),
	WideColumn("Hash", "The first 12 hex digits of the content hash."),
}

// ItemCells renders the columns of ItemColumns.
func ItemCells(m *metav1.ObjectMeta, src *kollect.ItemSource, hash string) []any {
	source := src.Name
	if src.Namespace != "" {
		source = src.Namespace + "/" + src.Name
	}
	if len(hash) > 12 {
		hash = hash[:12]
	}
	return []any{src.Cluster, src.Kind, source, m.Labels[kollect.LabelTarget], hash}
}

// ItemFields are the field selectors of an item: its source's, and
// attributes.<name> of each selectable attribute with a scalar value
// (kollect.AttributeFieldValue).
func ItemFields(src *kollect.ItemSource, attributes map[string]kollect.Value, selectable []string) fields.Set {
	set := sourceFields(src)
	for _, name := range selectable {
		if v, ok := attributes[name]; ok {
			if text, ok := kollect.AttributeFieldValue(v); ok {
				set[kollect.AttributeFieldPrefix+name] = text
			}
		}
	}
	return set
}

// sourceFields are the field selectors of an item's source.
func sourceFields(src *kollect.ItemSource) fields.Set {
	return fields.Set{
		"source.cluster":    src.Cluster,
		"source.apiVersion": src.APIVersion,
		"source.kind":       src.Kind,
		"source.namespace":  src.Namespace,
		"source.name":       src.Name,
		"source.uid":        string(src.UID),
	}
}
