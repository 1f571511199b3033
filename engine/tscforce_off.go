//go:build !tscforce

package engine

const tscForced = false
