// kube-controller-manager, as cmd/kube-controller-manager of the pinned k8s.io/kubernetes release builds it.
// The test bed runs its garbage collector (owned objects go with their owner) and service-account controllers.
package main

import (
	"os"

	"k8s.io/component-base/cli"
	_ "k8s.io/component-base/logs/json/register"
	_ "k8s.io/component-base/metrics/prometheus/clientgo"
	_ "k8s.io/component-base/metrics/prometheus/version"
	"k8s.io/kubernetes/cmd/kube-controller-manager/app"
)

func main() {
	os.Exit(cli.Run(app.NewControllerManagerCommand()))
}
