module github.com/specdeploy/specdeploy/hack/cluster/inference

go 1.26.0

require sigs.k8s.io/gateway-api-inference-extension v1.6.2 // indirect
