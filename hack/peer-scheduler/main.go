// Command peer-scheduler is the peer that `make bench-k8s` measures Phalanx against: kube-scheduler
// with the scheduler-plugins Coscheduling plugin registered, and nothing else added. Built by
// ../build-peer-scheduler.sh; versions pinned in go.mod (see there for why v1.34).
package main

import (
	"os"

	"k8s.io/component-base/cli"
	_ "k8s.io/component-base/metrics/prometheus/clientgo" // client-go metrics, as kube-scheduler registers them
	_ "k8s.io/component-base/metrics/prometheus/version"
	"k8s.io/kubernetes/cmd/kube-scheduler/app"

	// Decodes CoschedulingArgs in the KubeSchedulerConfiguration.
	_ "sigs.k8s.io/scheduler-plugins/apis/config/scheme"
	"sigs.k8s.io/scheduler-plugins/pkg/coscheduling"
)

func main() {
	command := app.NewSchedulerCommand(app.WithPlugin(coscheduling.Name, coscheduling.New))
	os.Exit(cli.Run(command))
}
