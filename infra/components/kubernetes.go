package components

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"sort"
	"strings"

	"github.com/lockplane/lockplane/infra/nodes"
	appsv1 "github.com/pulumi/pulumi-kubernetes/sdk/v4/go/kubernetes/apps/v1"
	corev1 "github.com/pulumi/pulumi-kubernetes/sdk/v4/go/kubernetes/core/v1"
	metav1 "github.com/pulumi/pulumi-kubernetes/sdk/v4/go/kubernetes/meta/v1"
	policyv1 "github.com/pulumi/pulumi-kubernetes/sdk/v4/go/kubernetes/policy/v1"
	"github.com/pulumi/pulumi/sdk/v3/go/pulumi"
)

// deployArbiterKubernetes runs the arbiter as a Deployment spread across
// halls (one hall's loss leaves replicas serving), kept off the etcd
// nodes, behind a Service, with a PodDisruptionBudget so a drain never
// takes more than one replica at a time. etcd and Tang never run here.
func deployArbiterKubernetes(ctx *pulumi.Context, env *Env, arb *Arbiter, a ArbiterArgs, etcdClient, svid *nodes.Certificate, opts ...pulumi.ResourceOption) error {
	s := env.Stack
	ns := s.Kubernetes.Namespace
	labels := pulumi.StringMap{"app.kubernetes.io/name": pulumi.String("lockplane-arbiter"), "lockplane.io/region": pulumi.String(s.Region)}
	meta := func(name string) *metav1.ObjectMetaArgs {
		return &metav1.ObjectMetaArgs{Name: pulumi.String(name), Namespace: pulumi.String(ns), Labels: labels}
	}
	data := pulumi.StringMap{
		"etcd.crt": etcdClient.CertPem, "etcd.key": etcdClient.KeyPem, "etcd-ca.crt": a.EtcdCA.CertPem,
		"svid.crt": svid.CertPem, "svid.key": svid.KeyPem, "bundle.crt": a.SpiffeCA.CertPem,
		"etcd-credentials": a.EtcdUsers.credentials(), // mounted 0400, as --etcd-credentials wants
	}
	if a.Audit != nil {
		data["audit-credentials"] = a.Audit.credentials() // mounted 0400, as --audit-credentials wants
	}
	if a.Archive != nil {
		data["archive-credentials"], data["archive-ca.crt"] = archiveCredentials(a.Archive.ArchiverPassword), a.Archive.CA.CertPem
	}
	if env.OperatorsCA != "" {
		data["oidc-ca.crt"] = pulumi.String(env.OperatorsCA)
	}
	creds, err := corev1.NewSecret(ctx, s.Region+"-arbiter-credentials", &corev1.SecretArgs{
		Metadata: meta("lockplane-arbiter-credentials"), StringData: data,
	}, opts...)
	if err != nil {
		return err
	}
	// The policy set as a ConfigMap: Kubernetes refreshes the mounted
	// files and the arbiter reloads them.
	policyData := pulumi.StringMap{}
	for _, pf := range env.Policies {
		policyData[strings.ReplaceAll(pf.Path, "/", "__")] = pulumi.String(pf.Content)
	}
	policies, err := corev1.NewConfigMap(ctx, s.Region+"-arbiter-policies", &corev1.ConfigMapArgs{
		Metadata: meta("lockplane-arbiter-policies"), Data: policyData,
	}, opts...)
	if err != nil {
		return err
	}
	const dir = "/etc/lockplane/arbiter/"
	files := ArbiterFiles{EtcdCert: dir + "etcd.crt", EtcdKey: dir + "etcd.key", EtcdCA: dir + "etcd-ca.crt",
		SVID: dir + "svid.crt", SVIDKey: dir + "svid.key", Bundle: dir + "bundle.crt", Policies: "/etc/lockplane/policies"}
	if a.Archive != nil {
		files.ArchiveCredentials, files.ArchiveCA = dir+"archive-credentials", dir+"archive-ca.crt"
	}
	if env.OperatorsCA != "" {
		files.OperatorsCA = dir + "oidc-ca.crt"
	}
	args := pulumi.ToStringArray(ArbiterFlags(s, "0.0.0.0", a, files))
	deps := append([]pulumi.Resource{a.Coord}, a.Epochs...)
	deps = append(deps, a.EtcdAuth...) // the users exist on every cluster
	if a.Archive != nil {
		deps = append(deps, a.Archive.Buckets) // the archiver user exists
	}
	_, err = appsv1.NewDeployment(ctx, s.Region+"-arbiter", &appsv1.DeploymentArgs{
		Metadata: meta("lockplane-arbiter"),
		Spec: &appsv1.DeploymentSpecArgs{
			Replicas: pulumi.Int(s.Arbiter.Replicas),
			Selector: &metav1.LabelSelectorArgs{MatchLabels: labels},
			Strategy: &appsv1.DeploymentStrategyArgs{Type: pulumi.String("RollingUpdate"), RollingUpdate: &appsv1.RollingUpdateDeploymentArgs{
				MaxUnavailable: pulumi.Int(1), MaxSurge: pulumi.Int(1)}},
			Template: &corev1.PodTemplateSpecArgs{
				// The arbiter reads its credentials once, at start: a
				// changed one (a rotated password) rolls the pods.
				Metadata: &metav1.ObjectMetaArgs{Labels: labels, Annotations: pulumi.StringMap{
					"lockplane.io/credentials-sha256": digest(data)}},
				Spec: &corev1.PodSpecArgs{
					TopologySpreadConstraints: corev1.TopologySpreadConstraintArray{&corev1.TopologySpreadConstraintArgs{
						MaxSkew: pulumi.Int(1), TopologyKey: pulumi.String(s.Kubernetes.HallLabel),
						WhenUnsatisfiable: pulumi.String("DoNotSchedule"), LabelSelector: &metav1.LabelSelectorArgs{MatchLabels: labels},
					}},
					// The etcd nodes are tainted and labelled lock-etcd=true
					// (ADR-06); the arbiter never lands on them.
					Affinity: &corev1.AffinityArgs{NodeAffinity: &corev1.NodeAffinityArgs{
						RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelectorArgs{NodeSelectorTerms: corev1.NodeSelectorTermArray{
							&corev1.NodeSelectorTermArgs{MatchExpressions: corev1.NodeSelectorRequirementArray{&corev1.NodeSelectorRequirementArgs{
								Key: pulumi.String("lock-etcd"), Operator: pulumi.String("NotIn"), Values: pulumi.StringArray{pulumi.String("true")},
							}}},
						}},
					}},
					Containers: corev1.ContainerArray{&corev1.ContainerArgs{
						Name: pulumi.String("arbiter"), Image: pulumi.String(s.Kubernetes.Image),
						Args: args,
						Ports: corev1.ContainerPortArray{
							&corev1.ContainerPortArgs{Name: pulumi.String("grpc"), ContainerPort: pulumi.Int(s.Arbiter.Port)},
							&corev1.ContainerPortArgs{Name: pulumi.String("metrics"), ContainerPort: pulumi.Int(s.Arbiter.Metrics)},
						},
						VolumeMounts: corev1.VolumeMountArray{
							&corev1.VolumeMountArgs{Name: pulumi.String("credentials"), MountPath: pulumi.String(dir), ReadOnly: pulumi.Bool(true)},
							&corev1.VolumeMountArgs{Name: pulumi.String("policies"), MountPath: pulumi.String(files.Policies), ReadOnly: pulumi.Bool(true)},
						},
						ReadinessProbe: &corev1.ProbeArgs{Grpc: &corev1.GRPCActionArgs{Port: pulumi.Int(s.Arbiter.Port)}},
						Resources: &corev1.ResourceRequirementsArgs{
							Requests: pulumi.StringMap{"cpu": pulumi.String("500m"), "memory": pulumi.String("256Mi")},
							Limits:   pulumi.StringMap{"memory": pulumi.String("512Mi")},
						},
					}},
					Volumes: corev1.VolumeArray{
						&corev1.VolumeArgs{Name: pulumi.String("credentials"),
							Secret: &corev1.SecretVolumeSourceArgs{SecretName: creds.Metadata.Name().Elem(), DefaultMode: pulumi.Int(0o400)}},
						&corev1.VolumeArgs{Name: pulumi.String("policies"),
							ConfigMap: &corev1.ConfigMapVolumeSourceArgs{Name: policies.Metadata.Name().Elem()}},
					},
				},
			},
		},
	}, append(opts, pulumi.DependsOn(deps))...)
	if err != nil {
		return err
	}
	if _, err := corev1.NewService(ctx, s.Region+"-arbiter", &corev1.ServiceArgs{
		Metadata: meta("lockplane-arbiter"),
		Spec: &corev1.ServiceSpecArgs{Selector: labels, Ports: corev1.ServicePortArray{
			&corev1.ServicePortArgs{Name: pulumi.String("grpc"), Port: pulumi.Int(s.Arbiter.Port), TargetPort: pulumi.String("grpc")},
		}},
	}, opts...); err != nil {
		return err
	}
	if _, err := policyv1.NewPodDisruptionBudget(ctx, s.Region+"-arbiter", &policyv1.PodDisruptionBudgetArgs{
		Metadata: meta("lockplane-arbiter"),
		Spec:     &policyv1.PodDisruptionBudgetSpecArgs{MaxUnavailable: pulumi.Int(1), Selector: &metav1.LabelSelectorArgs{MatchLabels: labels}},
	}, opts...); err != nil {
		return err
	}
	arb.Endpoints = []string{fmt.Sprintf("lockplane-arbiter.%s.svc:%d", ns, s.Arbiter.Port)}
	return nil
}

// digest is a SHA-256 over every entry of data, in key order: it changes
// when any does.
func digest(data pulumi.StringMap) pulumi.StringOutput {
	keys := make([]string, 0, len(data))
	for k := range data {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	values := make([]any, len(keys))
	for i, k := range keys {
		values[i] = data[k]
	}
	return pulumi.All(values...).ApplyT(func(vs []any) string {
		h := sha256.New()
		for i, v := range vs {
			fmt.Fprintf(h, "%s\x00%s\x00", keys[i], v)
		}
		return hex.EncodeToString(h.Sum(nil))
	}).(pulumi.StringOutput)
}
