{{/* Names and labels shared by every template. */}}

{{- define "kopf-scheduler.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
The release's base name. Cluster-scoped objects (ClusterRole, ClusterRoleBinding) carry it too, so two
releases in different namespaces need different release names (or fullnameOverride).
*/}}
{{- define "kopf-scheduler.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{- define "kopf-scheduler.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "kopf-scheduler.selectorLabels" -}}
app.kubernetes.io/name: {{ include "kopf-scheduler.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "kopf-scheduler.labels" -}}
helm.sh/chart: {{ include "kopf-scheduler.chart" . }}
{{ include "kopf-scheduler.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/component: scheduler
{{- end }}

{{- define "kopf-scheduler.serviceAccountName" -}}
{{- default (include "kopf-scheduler.fullname" .) .Values.serviceAccount.name }}
{{- end }}

{{- define "kopf-scheduler.image" -}}
{{- if .Values.image.digest }}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest }}
{{- else }}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}
{{- end }}

{{/*
A CustomResourceDefinition from one document of a file under files/ (dict: "root" the chart's context, "crd" the
parsed document, "keep" whether `helm uninstall` leaves it): the file's spec and annotations, the chart's labels,
and `helm.sh/resource-policy: keep` when kept.
*/}}
{{- define "kopf-scheduler.crd" -}}
{{- $crd := deepCopy .crd }}
{{- $annotations := deepCopy ($crd.metadata.annotations | default dict) }}
{{- if .keep }}
{{- $_ := set $annotations "helm.sh/resource-policy" "keep" }}
{{- end }}
{{- $metadata := dict "name" $crd.metadata.name "labels" (include "kopf-scheduler.labels" .root | fromYaml) }}
{{- if $annotations }}
{{- $_ := set $metadata "annotations" $annotations }}
{{- end }}
{{- $_ := set $crd "metadata" $metadata }}
{{ toYaml $crd }}
{{- end }}

{{/*
"true" when the cluster has the CRD named .name and this release does not own it (Helm's release annotations
name another release, or none: applied with kubectl, by another chart, by an operator). Such a CRD is never
rendered: Helm would refuse to take it over, and replacing it would change someone else's API. `helm template`
looks nothing up and so renders every CRD.
*/}}
{{- define "kopf-scheduler.foreignCRD" -}}
{{- $existing := lookup "apiextensions.k8s.io/v1" "CustomResourceDefinition" "" .name }}
{{- if $existing }}
{{- $annotations := $existing.metadata.annotations | default dict }}
{{- $release := index $annotations "meta.helm.sh/release-name" | default "" }}
{{- $namespace := index $annotations "meta.helm.sh/release-namespace" | default "" }}
{{- if not (and (eq $release .root.Release.Name) (eq $namespace .root.Release.Namespace)) }}true{{ end }}
{{- end }}
{{- end }}

{{/* The `helm test` probe: its SchedulerProfile and its pod share this name. */}}
{{- define "kopf-scheduler.probeName" -}}
{{- printf "%s-probe" (include "kopf-scheduler.fullname" .) | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
The probe pod the `helm test` check creates (files/hooks.py, `test`), as JSON: scheduled by the probe profile,
placed as the chart's own pods are (nodeSelector, tolerations), tiny, Pod Security "restricted", no token. It
only has to be bound: the check deletes it right after, whether a kubelet started it or not.
*/}}
{{- define "kopf-scheduler.probePod" -}}
{{- $name := include "kopf-scheduler.probeName" . }}
{{- $labels := merge (dict "app.kubernetes.io/component" "test-probe") (include "kopf-scheduler.labels" . | fromYaml) }}
{{- $container := dict "name" "probe" "image" (include "kopf-scheduler.image" .) "imagePullPolicy" .Values.image.pullPolicy "command" (list "python3" "-c" "pass") "resources" (dict "requests" (dict "cpu" "1m" "memory" "8Mi") "limits" (dict "memory" "32Mi")) "securityContext" .Values.securityContext }}
{{- $spec := dict "schedulerName" $name "restartPolicy" "Never" "automountServiceAccountToken" false "terminationGracePeriodSeconds" 0 "securityContext" .Values.podSecurityContext "containers" (list $container) }}
{{- with .Values.nodeSelector }}{{- $_ := set $spec "nodeSelector" . }}{{- end }}
{{- with .Values.tolerations }}{{- $_ := set $spec "tolerations" . }}{{- end }}
{{- with .Values.imagePullSecrets }}{{- $_ := set $spec "imagePullSecrets" . }}{{- end }}
{{- dict "apiVersion" "v1" "kind" "Pod" "metadata" (dict "name" $name "namespace" .Release.Namespace "labels" $labels) "spec" $spec | toJson }}
{{- end }}

{{/* The pod spec of a hook Job (dict: "root", "account"): placed and secured as the chart's own pods. */}}
{{- define "kopf-scheduler.hookPodSpec" -}}
restartPolicy: Never
serviceAccountName: {{ .account }}
automountServiceAccountToken: true
{{- with .root.Values.imagePullSecrets }}
imagePullSecrets:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .root.Values.nodeSelector }}
nodeSelector:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .root.Values.tolerations }}
tolerations:
  {{- toYaml . | nindent 2 }}
{{- end }}
securityContext:
  {{- toYaml .root.Values.podSecurityContext | nindent 2 }}
{{- end }}

{{/* A hook container's environment, resources and securityContext (files/hooks.py needs little). */}}
{{- define "kopf-scheduler.hookContainer" -}}
env:
  - name: HOME
    value: /tmp
resources:
  requests:
    cpu: 10m
    memory: 32Mi
  limits:
    memory: 64Mi
securityContext:
  {{- toYaml .Values.securityContext | nindent 2 }}
{{- end }}

{{/*
`crds.enabled` and `crds.keep` ("true" or ""), true when unset: `helm upgrade --reuse-values` from a release made
by a chart without them reuses that release's values, where `crds` does not exist.
*/}}
{{- define "kopf-scheduler.crdsEnabled" -}}
{{- $crds := .Values.crds | default dict }}
{{- if or (not (hasKey $crds "enabled")) $crds.enabled }}true{{ end }}
{{- end }}

{{- define "kopf-scheduler.crdsKeep" -}}
{{- $crds := .Values.crds | default dict }}
{{- if or (not (hasKey $crds "keep")) $crds.keep }}true{{ end }}
{{- end }}
