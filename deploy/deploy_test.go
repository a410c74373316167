// Package deploy checks the deployment files in this directory: the
// Kubernetes manifests decode into the Kubernetes API types and describe
// three voters with stable IDs, and every flag they (and the systemd unit)
// pass to `cluster node` is one the node has. It is a module of its own so
// that the root module does not pull in Kubernetes.
package deploy

import (
	"bytes"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"
)

var (
	flagsOnce sync.Once
	flagsOut  string
)

// nodeFlags returns the flags of `cluster node`, from its -h output in the
// root module (built once per test run).
func nodeFlags(t *testing.T) []string {
	t.Helper()
	flagsOnce.Do(func() { flagsOut = nodeHelp() })
	var flags []string
	for _, m := range regexp.MustCompile(`(?m)^\s+-([a-z][a-z0-9-]*)`).FindAllStringSubmatch(flagsOut, -1) {
		flags = append(flags, m[1])
	}
	if !slices.Contains(flags, "bootstrap") || !slices.Contains(flags, "tls-cert") {
		t.Fatalf("could not read the node's flags from `cluster node -h`:\n%s", flagsOut)
	}
	return flags
}

func nodeHelp() string {
	cmd := exec.Command("go", "run", "./examples/cluster", "node", "-h")
	cmd.Dir = ".."
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	_ = cmd.Run() // -h exits 2
	return out.String()
}

// passedFlags returns the flag names in a shell command line after "node".
func passedFlags(cmdline string) []string {
	_, after, ok := strings.Cut(cmdline, " node ")
	if !ok {
		return nil
	}
	var out []string
	for _, f := range strings.Fields(after) {
		if strings.HasPrefix(f, "-") && len(f) > 1 {
			out = append(out, strings.TrimLeft(f, "-"))
		}
	}
	return out
}

func TestKubernetesManifests(t *testing.T) {
	raw, err := os.ReadFile("kubernetes/termfence.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var (
		svc *corev1.Service
		sts *appsv1.StatefulSet
		pdb *policyv1.PodDisruptionBudget
	)
	for _, doc := range strings.Split(string(raw), "\n---\n") {
		var tm metav1.TypeMeta
		if err := yaml.Unmarshal([]byte(doc), &tm); err != nil {
			t.Fatal(err)
		}
		var obj any
		switch tm.Kind {
		case "Service":
			svc = &corev1.Service{}
			obj = svc
		case "StatefulSet":
			sts = &appsv1.StatefulSet{}
			obj = sts
		case "PodDisruptionBudget":
			pdb = &policyv1.PodDisruptionBudget{}
			obj = pdb
		default:
			t.Fatalf("unexpected kind %q", tm.Kind)
		}
		if err := yaml.UnmarshalStrict([]byte(doc), obj); err != nil {
			t.Fatalf("%s does not decode strictly: %v", tm.Kind, err)
		}
	}
	if svc == nil || sts == nil || pdb == nil {
		t.Fatal("want a Service, a StatefulSet and a PodDisruptionBudget")
	}
	if svc.Spec.ClusterIP != corev1.ClusterIPNone || sts.Spec.ServiceName != svc.Name {
		t.Errorf("the StatefulSet's serviceName %q must name the headless Service %q (clusterIP None, got %q)", sts.Spec.ServiceName, svc.Name, svc.Spec.ClusterIP)
	}
	if sts.Spec.Replicas == nil || *sts.Spec.Replicas != 3 {
		t.Errorf("replicas %v, want 3 voters", sts.Spec.Replicas)
	}
	if pdb.Spec.MaxUnavailable == nil || pdb.Spec.MaxUnavailable.IntValue() != 1 {
		t.Errorf("PodDisruptionBudget maxUnavailable %v, want 1 (two of three keep the quorum)", pdb.Spec.MaxUnavailable)
	}
	labels := sts.Spec.Template.Labels
	for what, sel := range map[string]*metav1.LabelSelector{"StatefulSet": sts.Spec.Selector, "PodDisruptionBudget": pdb.Spec.Selector} {
		for k, v := range sel.MatchLabels {
			if labels[k] != v {
				t.Errorf("%s selector %v does not match the pod labels %v", what, sel.MatchLabels, labels)
			}
		}
	}
	if len(sts.Spec.Template.Spec.Containers) != 1 {
		t.Fatal("want one container")
	}
	c := sts.Spec.Template.Spec.Containers[0]
	cmdline := strings.Join(c.Args, " ")
	known := nodeFlags(t)
	passed := passedFlags(cmdline)
	if len(passed) < 8 {
		t.Fatalf("found only %d flags in %q", len(passed), cmdline)
	}
	for _, f := range passed {
		if !slices.Contains(known, f) {
			t.Errorf("the StatefulSet passes -%s, which `cluster node` does not have (it has %v)", f, known)
		}
	}
	for _, want := range []string{"id", "raft", "advertise", "http", "data", "bootstrap", "tls-cert", "tls-key", "tls-ca", "token-key"} {
		if !slices.Contains(passed, want) {
			t.Errorf("the StatefulSet does not pass -%s", want)
		}
	}
	// Stable IDs: -id is the pod name, the bootstrap list names the pods
	// termfence-0..2 at their headless-Service DNS names.
	var peers string
	for _, e := range c.Env {
		if e.Name == "PEERS" {
			peers = e.Value
		}
	}
	for i := range 3 {
		pod := sts.Name + "-" + string(rune('0'+i))
		want := pod + "=" + pod + "." + svc.Name + "." + sts.Namespace + ".svc.cluster.local:7101"
		if !strings.Contains(peers, want) {
			t.Errorf("PEERS %q does not name %s", peers, want)
		}
	}
	if !strings.Contains(cmdline, `-id "$POD_NAME"`) {
		t.Errorf("-id is not the pod name: %s", cmdline)
	}
	// Probes on /livez and /readyz; data on the claim template's volume.
	probe := func(p *corev1.Probe) string {
		if p == nil || p.Exec == nil {
			return ""
		}
		return strings.Join(p.Exec.Command, " ")
	}
	if !strings.Contains(probe(c.LivenessProbe), "/livez") || !strings.Contains(probe(c.ReadinessProbe), "/readyz") {
		t.Errorf("probes: liveness %q, readiness %q; want /livez and /readyz", probe(c.LivenessProbe), probe(c.ReadinessProbe))
	}
	if len(sts.Spec.VolumeClaimTemplates) != 1 || !slices.ContainsFunc(c.VolumeMounts, func(m corev1.VolumeMount) bool {
		return m.Name == sts.Spec.VolumeClaimTemplates[0].Name && strings.Contains(cmdline, "-data "+m.MountPath)
	}) {
		t.Errorf("-data is not on the claim template's volume")
	}
}

func TestSystemdUnitFlags(t *testing.T) {
	raw, err := os.ReadFile("systemd/termfence-node@.service")
	if err != nil {
		t.Fatal(err)
	}
	unit := strings.ReplaceAll(string(raw), "\\\n", " ")
	var exec string
	for _, line := range strings.Split(unit, "\n") {
		if strings.HasPrefix(line, "ExecStart=") {
			exec = line
		}
	}
	known := nodeFlags(t)
	passed := passedFlags(exec)
	if len(passed) < 8 {
		t.Fatalf("found only %d flags in %q", len(passed), exec)
	}
	for _, f := range passed {
		if !slices.Contains(known, f) {
			t.Errorf("the systemd unit passes -%s, which `cluster node` does not have", f)
		}
	}
}
