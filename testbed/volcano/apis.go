// Package volcano only pins Volcano's API packages whose CRDs controller-gen renders.
package volcano

import (
	_ "volcano.sh/apis/pkg/apis/batch/v1alpha1"
	_ "volcano.sh/apis/pkg/apis/scheduling/v1beta1"
	_ "volcano.sh/apis/pkg/apis/topology/v1alpha1"
)
