// Package kubernetes holds the example manifests (fence.yaml) and checks
// them offline: each object decodes strictly into the Kubernetes API's own
// Go types (k8s.io/api: an unknown or misspelled field, or a value of the
// wrong type, fails), and the references between the objects, the probes'
// ports and fence serve's flags are checked as a cluster and fence would.
// It is a module of its own so that k8s.io/api stays out of fence's
// dependencies: cd packaging/kubernetes && go test ./...
package kubernetes

import (
	"bytes"
	"fmt"
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/spf13/cobra"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/validation"
	"sigs.k8s.io/yaml"

	"github.com/fencehq/fence/internal/cli"
)

// manifests are the objects of fence.yaml, by kind.
type manifests struct {
	services    map[string]*corev1.Service
	statefulSet *appsv1.StatefulSet
	pdb         *policyv1.PodDisruptionBudget
}

// load decodes fence.yaml strictly, one object per document.
func load(t *testing.T) manifests {
	t.Helper()
	data, err := os.ReadFile("fence.yaml")
	if err != nil {
		t.Fatal(err)
	}
	m := manifests{services: map[string]*corev1.Service{}}
	for i, doc := range bytes.Split(data, []byte("\n---\n")) {
		var tm metav1.TypeMeta
		if err := yaml.Unmarshal(doc, &tm); err != nil {
			t.Fatalf("document %d: %v", i, err)
		}
		var obj any
		switch tm.APIVersion + " " + tm.Kind {
		case "v1 Service":
			obj = &corev1.Service{}
		case "apps/v1 StatefulSet":
			m.statefulSet = &appsv1.StatefulSet{}
			obj = m.statefulSet
		case "policy/v1 PodDisruptionBudget":
			m.pdb = &policyv1.PodDisruptionBudget{}
			obj = m.pdb
		default:
			t.Fatalf("document %d: %s %s: not a kind this test knows", i, tm.APIVersion, tm.Kind)
		}
		if err := yaml.UnmarshalStrict(doc, obj); err != nil {
			t.Fatalf("document %d (%s): %v", i, tm.Kind, err)
		}
		if s, ok := obj.(*corev1.Service); ok {
			m.services[s.Name] = s
		}
	}
	return m
}

func TestManifests(t *testing.T) {
	m := load(t)
	sts, pdb := m.statefulSet, m.pdb
	if sts == nil || pdb == nil || len(m.services) != 2 {
		t.Fatalf("fence.yaml: want a StatefulSet, a PodDisruptionBudget and 2 Services; have %d Services, StatefulSet %v, PDB %v", len(m.services), sts != nil, pdb != nil)
	}
	spec := sts.Spec
	if spec.Replicas == nil || *spec.Replicas != 3 || spec.PodManagementPolicy != appsv1.ParallelPodManagement {
		t.Errorf("StatefulSet: want 3 replicas started in parallel (a new cluster bootstraps only with a majority)")
	}
	podLabels := labels.Set(spec.Template.Labels)
	selects := func(what string, sel *metav1.LabelSelector) {
		s, err := metav1.LabelSelectorAsSelector(sel)
		if err != nil || s.Empty() || !s.Matches(podLabels) {
			t.Errorf("%s's selector %v does not select the pods (%v): %v", what, sel, podLabels, err)
		}
	}
	selects("StatefulSet", spec.Selector)
	selects("PodDisruptionBudget", pdb.Spec.Selector)
	if mu := pdb.Spec.MaxUnavailable; mu == nil || mu.IntValue() != 1 {
		t.Errorf("PodDisruptionBudget: maxUnavailable %v, want 1", mu)
	}

	// The headless Service gives the pods the names they advertise; it
	// publishes them before they are ready, as members must find each other
	// to elect the leader that makes them ready.
	headless := m.services[spec.ServiceName]
	if headless == nil || headless.Spec.ClusterIP != corev1.ClusterIPNone || !headless.Spec.PublishNotReadyAddresses {
		t.Fatalf("serviceName %q: want a headless Service in fence.yaml that publishes not-ready addresses", spec.ServiceName)
	}

	if n := len(spec.Template.Spec.Containers); n != 1 {
		t.Fatalf("%d containers, want 1", n)
	}
	c := spec.Template.Spec.Containers[0]
	ports := map[string]int32{}
	for _, p := range c.Ports {
		if errs := validation.IsValidPortName(p.Name); len(errs) > 0 {
			t.Errorf("port name %q: %v", p.Name, errs)
		}
		ports[p.Name] = p.ContainerPort
	}
	for name, s := range m.services {
		if !labels.SelectorFromSet(s.Spec.Selector).Matches(podLabels) || len(s.Spec.Selector) == 0 {
			t.Errorf("Service %s does not select the pods", name)
		}
		for _, p := range s.Spec.Ports {
			if _, ok := ports[p.TargetPort.String()]; !ok {
				t.Errorf("Service %s: targetPort %s is not a container port (%v)", name, p.TargetPort.String(), ports)
			}
		}
	}
	for what, p := range map[string]*corev1.Probe{"startupProbe": c.StartupProbe, "livenessProbe": c.LivenessProbe, "readinessProbe": c.ReadinessProbe} {
		if p == nil || p.HTTPGet == nil || p.HTTPGet.Scheme != corev1.URISchemeHTTPS || ports[p.HTTPGet.Port.String()] != 7301 {
			t.Errorf("%s: want an HTTPS GET on the metrics port 7301: %+v", what, p)
		}
	}
	if p := c.ReadinessProbe; p != nil && p.HTTPGet != nil && p.HTTPGet.Path != "/readyz" {
		t.Errorf("readinessProbe: path %q, want /readyz (can serve clients)", p.HTTPGet.Path)
	}

	pod, csc := spec.Template.Spec.SecurityContext, c.SecurityContext
	if pod == nil || pod.RunAsNonRoot == nil || !*pod.RunAsNonRoot || pod.FSGroup == nil ||
		csc == nil || csc.ReadOnlyRootFilesystem == nil || !*csc.ReadOnlyRootFilesystem ||
		csc.AllowPrivilegeEscalation == nil || *csc.AllowPrivilegeEscalation {
		t.Errorf("want a non-root pod with an fsGroup (for the data volume), a read-only root file system, no privilege escalation")
	}

	// Every mount is a volume or a claim; the secrets' files are readable
	// by the group only (fence refuses a key open to others).
	vols := map[string]*corev1.Volume{}
	for i, v := range spec.Template.Spec.Volumes {
		vols[v.Name] = &spec.Template.Spec.Volumes[i]
		if v.Secret != nil && (v.Secret.DefaultMode == nil || *v.Secret.DefaultMode != 0o440) {
			t.Errorf("volume %s: secret defaultMode %s, want 0440", v.Name, octal(v.Secret.DefaultMode))
		}
	}
	for _, pvc := range spec.VolumeClaimTemplates {
		vols[pvc.Name] = nil
	}
	for _, vm := range c.VolumeMounts {
		if _, ok := vols[vm.Name]; !ok {
			t.Errorf("volumeMount %s: no such volume or claim", vm.Name)
		}
	}

	checkArgs(t, c)
}

// octal prints a file mode that may be unset.
func octal(mode *int32) string {
	if mode == nil {
		return "unset"
	}
	return fmt.Sprintf("%#o", *mode)
}

// envRef is a $(VAR) reference in a container's args.
var envRef = regexp.MustCompile(`\$\(([A-Za-z_][A-Za-z0-9_]*)\)`)

// checkArgs: every $(VAR) in the args is a variable of the container (the
// kubelet leaves an unknown one as it is, silently), and the args, with the
// variables filled in as for pod fence-0, are flags fence serve accepts.
func checkArgs(t *testing.T, c corev1.Container) {
	env := map[string]string{}
	for _, e := range c.Env {
		env[e.Name] = ""
		if f := e.ValueFrom; f != nil && f.FieldRef != nil {
			env[e.Name] = map[string]string{"metadata.name": "fence-0", "metadata.namespace": "fence-test"}[f.FieldRef.FieldPath]
		}
	}
	if len(c.Args) == 0 || c.Args[0] != "serve" {
		t.Fatalf("args %q: want serve and its flags", c.Args)
	}
	var args []string
	for _, a := range c.Args[1:] {
		a = envRef.ReplaceAllStringFunc(a, func(ref string) string {
			v, ok := env[ref[2:len(ref)-1]]
			if !ok || v == "" {
				t.Errorf("arg %q: %s is not a variable of the container with a value", a, ref)
			}
			return v
		})
		args = append(args, a)
	}
	cmd := serve(t)
	if err := cmd.ParseFlags(args); err != nil {
		t.Errorf("fence serve %s: %v", strings.Join(args, " "), err)
	} else if rest := cmd.Flags().Args(); len(rest) > 0 {
		t.Errorf("fence serve: stray arguments %q", rest)
	}
	for _, a := range args {
		if strings.HasPrefix(a, "--bootstrap=") && !strings.Contains(a, "fence-0=fence-0.fence.fence-test.svc.cluster.local:7302,") {
			t.Errorf("%s: want each pod's raft address by its headless Service name", a)
		}
	}
}

// serve is a fresh 'fence serve' command.
func serve(t *testing.T) *cobra.Command {
	cmd, _, err := cli.NewRoot().Find([]string{"serve"})
	if err != nil {
		t.Fatal(err)
	}
	return cmd
}
