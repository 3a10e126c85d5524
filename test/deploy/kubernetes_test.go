package deploy_test

import (
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"
)

// k8sDir holds the Kubernetes example: a Sandbox and a NetworkPolicy.
const k8sDir = "deploy/kubernetes"

// k8sObject is one YAML document of the manifests; spec is decoded by kind.
type k8sObject struct {
	file       string
	APIVersion string `yaml:"apiVersion"`
	Kind       string `yaml:"kind"`
	Metadata   struct {
		Name string `yaml:"name"`
	} `yaml:"metadata"`
	Spec yaml.Node `yaml:"spec"`
}

// sandboxSpec is what the test reads of agent-sandbox's Sandbox spec
// (agents.x-k8s.io/v1alpha1): the CRD requires spec.podTemplate with a pod
// spec, whose containers need a name and an image.
type sandboxSpec struct {
	PodTemplate struct {
		Metadata struct {
			Labels map[string]string `yaml:"labels"`
		} `yaml:"metadata"`
		Spec *struct {
			Containers []container `yaml:"containers"`
		} `yaml:"spec"`
	} `yaml:"podTemplate"`
}

type container struct {
	Name    string   `yaml:"name"`
	Image   string   `yaml:"image"`
	Command []string `yaml:"command"`
	Args    []string `yaml:"args"`
	Env     []struct {
		Name      string  `yaml:"name"`
		Value     *string `yaml:"value"`
		ValueFrom *struct {
			SecretKeyRef *struct {
				Name     string `yaml:"name"`
				Key      string `yaml:"key"`
				Optional *bool  `yaml:"optional"`
			} `yaml:"secretKeyRef"`
			ResourceFieldRef *struct {
				Resource string `yaml:"resource"`
			} `yaml:"resourceFieldRef"`
		} `yaml:"valueFrom"`
	} `yaml:"env"`
	Ports []struct {
		Name          string `yaml:"name"`
		ContainerPort int    `yaml:"containerPort"`
		Protocol      string `yaml:"protocol"`
	} `yaml:"ports"`
	ReadinessProbe *probe `yaml:"readinessProbe"`
	LivenessProbe  *probe `yaml:"livenessProbe"`
	Resources      struct {
		Limits map[string]string `yaml:"limits"`
	} `yaml:"resources"`
}

type probe struct {
	HTTPGet *struct {
		Path string    `yaml:"path"`
		Port yaml.Node `yaml:"port"` // a number, or a container port's name
	} `yaml:"httpGet"`
}

// networkPolicySpec is what the test reads of a networking.k8s.io/v1
// NetworkPolicy.
type networkPolicySpec struct {
	PodSelector *labelSelector `yaml:"podSelector"`
	PolicyTypes []string       `yaml:"policyTypes"`
	Ingress     []struct {
		From []struct {
			PodSelector       *labelSelector `yaml:"podSelector"`
			NamespaceSelector *yaml.Node     `yaml:"namespaceSelector"`
			IPBlock           *yaml.Node     `yaml:"ipBlock"`
		} `yaml:"from"`
		Ports []struct {
			Protocol string    `yaml:"protocol"`
			Port     yaml.Node `yaml:"port"`
		} `yaml:"ports"`
	} `yaml:"ingress"`
}

type labelSelector struct {
	MatchLabels      map[string]string `yaml:"matchLabels"`
	MatchExpressions []yaml.Node       `yaml:"matchExpressions"`
}

// readManifests parses every YAML document of every .yaml file in dir.
func readManifests(t *testing.T, dir string) []k8sObject {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(repoPath(t, dir), "*.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no manifests in %s: %v", dir, err)
	}
	var objs []k8sObject
	for _, f := range files {
		r, err := os.Open(f)
		if err != nil {
			t.Fatal(err)
		}
		dec := yaml.NewDecoder(r)
		for {
			var o k8sObject
			err := dec.Decode(&o)
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				r.Close()
				t.Fatalf("%s: %v", f, err)
			}
			o.file = filepath.Join(dir, filepath.Base(f))
			objs = append(objs, o)
		}
		r.Close()
	}
	return objs
}

// only returns the one object of a kind, failing the test unless there is
// exactly one.
func only(t *testing.T, objs []k8sObject, apiVersion, kind string) k8sObject {
	t.Helper()
	var found []k8sObject
	for _, o := range objs {
		if o.Kind == kind {
			found = append(found, o)
		}
	}
	if len(found) != 1 {
		t.Fatalf("%s: %d objects of kind %s, want 1", k8sDir, len(found), kind)
	}
	o := found[0]
	if o.APIVersion != apiVersion {
		t.Errorf("%s: %s has apiVersion %q, want %q", o.file, kind, o.APIVersion, apiVersion)
	}
	if !dnsLabel.MatchString(o.Metadata.Name) {
		t.Errorf("%s: %s's metadata.name %q is not a DNS label", o.file, kind, o.Metadata.Name)
	}
	return o
}

var dnsLabel = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$`)

func decodeSpec[T any](t *testing.T, o k8sObject) *T {
	t.Helper()
	if o.Spec.Kind == 0 {
		t.Fatalf("%s: %s has no spec", o.file, o.Kind)
	}
	var spec T
	if err := o.Spec.Decode(&spec); err != nil {
		t.Fatalf("%s: %s's spec: %v", o.file, o.Kind, err)
	}
	return &spec
}

// intPort is a port given as a number, or as the name of one of c's ports.
func intPort(n yaml.Node, c *container) (int, bool) {
	if n.Kind != yaml.ScalarNode {
		return 0, false
	}
	if n.Tag == "!!int" {
		p, err := strconv.Atoi(n.Value)
		return p, err == nil
	}
	if c != nil {
		for _, p := range c.Ports {
			if p.Name == n.Value {
				return p.ContainerPort, true
			}
		}
	}
	return 0, false
}

// envdContainer is the Sandbox's envd container, its pod's labels, and the
// file it is in.
func envdContainer(t *testing.T, objs []k8sObject) (*container, map[string]string, string) {
	t.Helper()
	o := only(t, objs, "agents.x-k8s.io/v1alpha1", "Sandbox")
	spec := decodeSpec[sandboxSpec](t, o)
	if spec.PodTemplate.Spec == nil || len(spec.PodTemplate.Spec.Containers) == 0 {
		t.Fatalf("%s: spec.podTemplate.spec.containers is empty: the CRD requires a pod spec, and a pod a container", o.file)
	}
	c := &spec.PodTemplate.Spec.Containers[0]
	return c, spec.PodTemplate.Metadata.Labels, o.file
}

// TestKubernetesManifests checks the Sandbox and the NetworkPolicy for what
// their APIs require and what this deployment promises: the envd image
// started with upstream's command line, probes on GET /health of port
// 49983, and ingress admitted only from the client's pods, only to 49983
// and 49999.
func TestKubernetesManifests(t *testing.T) {
	t.Parallel()
	objs := readManifests(t, k8sDir)
	c, podLabels, file := envdContainer(t, objs)
	if !dnsLabel.MatchString(c.Name) || c.Image == "" {
		t.Errorf("%s: container name %q, image %q: both are required", file, c.Name, c.Image)
	}
	if len(c.Command) == 0 {
		t.Errorf("%s: the container has no command: the test runs the command line the manifest gives", file)
	}
	argv := append(slices.Clone(c.Command), c.Args...)
	for _, flag := range []string{"--isnotfc", "--no-cgroups", "--verbose"} {
		if !slices.Contains(argv, flag) {
			t.Errorf("%s: command line %q lacks %s (upstream's: envd --isnotfc --no-cgroups --port 49983 --verbose)", file, argv, flag)
		}
	}
	if i := slices.Index(argv, "--port"); i < 0 || i+1 >= len(argv) || argv[i+1] != strconv.Itoa(envdPort) {
		t.Errorf("%s: command line %q lacks --port %d", file, argv, envdPort)
	}
	ports := map[int]bool{}
	for _, p := range c.Ports {
		if p.Protocol == "" || p.Protocol == "TCP" {
			ports[p.ContainerPort] = true
		}
	}
	if !ports[envdPort] || !ports[codePort] {
		t.Errorf("%s: container ports %v; want TCP %d and %d", file, slices.Sorted(maps.Keys(ports)), envdPort, codePort)
	}
	for name, p := range map[string]*probe{"readinessProbe": c.ReadinessProbe, "livenessProbe": c.LivenessProbe} {
		if p == nil || p.HTTPGet == nil {
			t.Errorf("%s: no %s.httpGet", file, name)
			continue
		}
		if port, ok := intPort(p.HTTPGet.Port, c); p.HTTPGet.Path != "/health" || !ok || port != envdPort {
			t.Errorf("%s: %s gets %q on port %q; want /health on %d", file, name, p.HTTPGet.Path, p.HTTPGet.Port.Value, envdPort)
		}
	}
	for _, e := range c.Env {
		switch {
		case e.Value != nil:
		case e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil:
			if o := e.ValueFrom.SecretKeyRef.Optional; o == nil || !*o {
				t.Errorf("%s: env %s comes from Secret %s without optional: true: the manifest must apply without it", file, e.Name, e.ValueFrom.SecretKeyRef.Name)
			}
		case e.ValueFrom != nil && e.ValueFrom.ResourceFieldRef != nil:
		default:
			t.Errorf("%s: env %s has neither a value nor a valueFrom this test knows", file, e.Name)
		}
	}

	np := only(t, objs, "networking.k8s.io/v1", "NetworkPolicy")
	spec := decodeSpec[networkPolicySpec](t, np)
	sel := spec.PodSelector
	if sel == nil || len(sel.MatchLabels) == 0 || len(sel.MatchExpressions) > 0 {
		t.Errorf("%s: spec.podSelector must select the sandbox's pod by matchLabels", np.file)
	} else {
		for k, v := range sel.MatchLabels {
			if podLabels[k] != v {
				t.Errorf("%s: podSelector %s=%s does not select the Sandbox's pod (labels %v)", np.file, k, v, podLabels)
			}
		}
	}
	if !slices.Equal(spec.PolicyTypes, []string{"Ingress"}) {
		t.Errorf("%s: policyTypes %q; want [Ingress]", np.file, spec.PolicyTypes)
	}
	if len(spec.Ingress) == 0 {
		t.Errorf("%s: no ingress rule: nothing would reach envd", np.file)
	}
	admitted := map[string]bool{}
	for i, rule := range spec.Ingress {
		// A rule without peers admits everyone, one without ports every port.
		if len(rule.From) == 0 || len(rule.Ports) == 0 {
			t.Errorf("%s: ingress[%d] has no from or no ports: it admits every peer or every port", np.file, i)
		}
		for _, from := range rule.From {
			if from.NamespaceSelector != nil || from.IPBlock != nil || from.PodSelector == nil ||
				len(from.PodSelector.MatchExpressions) > 0 || !maps.Equal(from.PodSelector.MatchLabels, map[string]string{"app": "envd-client"}) {
				t.Errorf("%s: ingress[%d] admits a peer other than the pods labelled app: envd-client", np.file, i)
			}
		}
		for _, p := range rule.Ports {
			port, ok := intPort(p.Port, nil)
			if !ok || (p.Protocol != "" && p.Protocol != "TCP") {
				t.Errorf("%s: ingress[%d] port %s/%q: want TCP port numbers", np.file, i, p.Protocol, p.Port.Value)
				continue
			}
			admitted[strconv.Itoa(port)] = true
		}
	}
	if want := []string{strconv.Itoa(envdPort), strconv.Itoa(codePort)}; !slices.Equal(slices.Sorted(maps.Keys(admitted)), want) {
		t.Errorf("%s: ingress admits ports %v; want exactly %v", np.file, slices.Sorted(maps.Keys(admitted)), want)
	}
}

// quantityBytes parses a Kubernetes memory quantity with a binary suffix
// (or none) into bytes, as resourceFieldRef gives limits.memory.
func quantityBytes(q string) (int64, error) {
	m := regexp.MustCompile(`^([0-9]+)(Ki|Mi|Gi|Ti)?$`).FindStringSubmatch(q)
	if m == nil {
		return 0, fmt.Errorf("memory quantity %q: this test reads a number with Ki, Mi, Gi or Ti only", q)
	}
	n, err := strconv.ParseInt(m[1], 10, 64)
	shift := map[string]uint{"": 0, "Ki": 10, "Mi": 20, "Gi": 30, "Ti": 40}[m[2]]
	return n << shift, err
}

// TestKubernetesSandboxRuns runs the Sandbox's container command line (the
// image's start-up.sh, with upstream's flags) with the environment the
// kubelet would give it when no Secret envd-token exists, without code
// execution.
func TestKubernetesSandboxRuns(t *testing.T) {
	t.Parallel()
	c, _, file := envdContainer(t, readManifests(t, k8sDir))
	if len(c.Command) == 0 {
		t.Fatalf("%s: the container has no command", file)
	}
	ep := entrypoint{file: file, argv: append(slices.Clone(c.Command), c.Args...)}
	for _, e := range c.Env {
		switch {
		case e.Value != nil:
			ep.env = append(ep.env, e.Name+"="+*e.Value)
		case e.ValueFrom != nil && e.ValueFrom.ResourceFieldRef != nil:
			res := e.ValueFrom.ResourceFieldRef.Resource
			q, ok := strings.CutPrefix(res, "limits.")
			if !ok || c.Resources.Limits[q] == "" {
				t.Fatalf("%s: env %s from %s: the container sets no such limit", file, e.Name, res)
			}
			n, err := quantityBytes(c.Resources.Limits[q])
			if err != nil {
				t.Fatalf("%s: env %s: %v", file, e.Name, err)
			}
			ep.env = append(ep.env, e.Name+"="+strconv.FormatInt(n, 10))
		}
		// A secretKeyRef is optional (TestKubernetesManifests): without the
		// Secret the kubelet sets nothing.
	}
	s := startSandbox(t, ep, runOptions{})
	s.checkServes(t)
	s.stop(t)
}
