//go:build race

package expression

const raceBuild = true
