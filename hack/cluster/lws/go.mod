module github.com/specdeploy/specdeploy/hack/cluster/lws

go 1.26.0
