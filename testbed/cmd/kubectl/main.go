// kubectl, as cmd/kubectl of the pinned k8s.io/kubernetes release builds it: for the tests that drive the test bed
// as an operator does, plugins (kubectl-fed) included.
package main

import (
	"k8s.io/component-base/cli"
	"k8s.io/kubectl/pkg/cmd"
	"k8s.io/kubectl/pkg/cmd/util"
)

func main() {
	command := cmd.NewDefaultKubectlCommand()
	if err := cli.RunNoErrOutput(command); err != nil {
		util.CheckErr(err)
	}
}
