// kube-scheduler, as cmd/kube-scheduler of the pinned k8s.io/kubernetes release builds it. The test bed starts it
// only where a test needs ordinary pods placed on KWOK nodes (the Helm charts' own Deployments); the gangs' pods
// name the agent as their scheduler, so it never touches those.
package main

import (
	"os"

	"k8s.io/component-base/cli"
	_ "k8s.io/component-base/logs/json/register"
	_ "k8s.io/component-base/metrics/prometheus/clientgo"
	_ "k8s.io/component-base/metrics/prometheus/version"
	"k8s.io/kubernetes/cmd/kube-scheduler/app"
)

func main() {
	os.Exit(cli.Run(app.NewSchedulerCommand()))
}
