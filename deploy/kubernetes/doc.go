// Package kubernetes holds idserver's Kubernetes manifests (the *.yaml
// files beside this one, applied with kubectl apply -k) and the test that
// decodes them as the API server would and checks the settings they must
// keep.
package kubernetes
