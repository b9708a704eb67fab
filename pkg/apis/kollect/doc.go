// +k8s:deepcopy-gen=package
// +groupName=kollect.dev

// Package kollect is the internal version of the kollect.dev API. The registry
// validates and stores objects through these types; clients only ever see the
// versioned ones.
package kollect
