{{/* Names and labels shared by every template. */}}

{{- define "iso.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "iso.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- $name := default .Chart.Name .Values.nameOverride -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{- define "iso.selectorLabels" -}}
app.kubernetes.io/name: {{ include "iso.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "iso.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{ include "iso.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/component: operator
{{- end -}}

{{- define "iso.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "iso.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- required "serviceAccount.name is required when serviceAccount.create is false" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{- define "iso.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) -}}
{{- end -}}

{{/*
What the operator does in the namespaces of its pools, in two parts. Only the verbs the code
uses (tests/integration/test_operator_rbac.py fails on a verb granted and never used, every
operator test on one missing; tests/unit/test_chart.py derives both parts from the code; see
docs/operating.md "Permissions").

iso.poolRules: following a pool and reporting on it, wherever it is (cluster-wide when every
namespace is watched): kopf lists and watches the pools, and patches one only to take off the
finalizer `ironicshards.io/operator` of earlier versions; the operator merge-patches their
status, lists (kopf watches) pods, lists ConfigMaps and Jobs by the pool's label, and creates
core/v1 Events (kopf's own event posting is off). None of it creates a pod or reads a Secret.
*/}}
{{- define "iso.poolRules" -}}
- apiGroups: [ironicshards.io]
  resources: [ironiccomputeshards]
  verbs: [list, watch, patch]
- apiGroups: [ironicshards.io]
  resources: [ironiccomputeshards/status]
  verbs: [patch]
- apiGroups: [""]
  resources: [pods]
  verbs: [list, watch]
- apiGroups: [""]
  resources: [configmaps]
  verbs: [list]
- apiGroups: [""]
  resources: [events]
  verbs: [create]
- apiGroups: [batch]
  resources: [jobs]
  verbs: [list]
{{- end -}}

{{/*
iso.workloadRules: running a pool's members, only in the namespaces named for pools
(iso.poolNamespaces), never cluster-wide: whoever may create a pod in a namespace may mount any
of its Secrets, and whoever reads pods' logs may read what they print.
- pods: created, deleted (with a uid precondition);
- ConfigMaps (one per member): created, patched when one was changed, deleted;
- Jobs (nova-manage: handovers, host mapping): created, deleted; pods/log: the last lines of a failed one;
- the pool's PodDisruptionBudget (policy): read by name, created, patched when it differs
  (never deleted: it goes with its pool by owner reference).
Not ironiccomputeshards/finalizers: the operator's owner references set no
blockOwnerDeletion (core/podspec.py says why), so clusters enforcing owner-reference
permissions need no such grant.
*/}}
{{- define "iso.workloadRules" -}}
- apiGroups: [""]
  resources: [pods]
  verbs: [create, delete]
- apiGroups: [""]
  resources: [configmaps]
  verbs: [create, patch, delete]
- apiGroups: [batch]
  resources: [jobs]
  verbs: [create, delete]
- apiGroups: [""]
  resources: [pods/log]
  verbs: [get]
- apiGroups: [policy]
  resources: [poddisruptionbudgets]
  verbs: [get, create, patch]
{{- end -}}

{{/*
The namespaces where the operator may run pools (iso.workloadRules) and read their Secrets (get;
only rbac.secretNames when set), as a YAML list: the watched namespaces, or with every namespace
watched, rbac.poolNamespaces. Never cluster-wide: a pool elsewhere reports the refused read of
its Secrets (SecretReadRefused) and runs nothing.
*/}}
{{- define "iso.poolNamespaces" -}}
{{- toYaml (default .Values.rbac.poolNamespaces .Values.watchNamespaces) -}}
{{- end -}}

{{/* Refuse value combinations a schema cannot express, naming the keys and the fix. */}}
{{- define "iso.checkValues" -}}
{{- if and .Values.watchNamespaces .Values.rbac.poolNamespaces -}}
{{- fail "rbac.poolNamespaces is for watchNamespaces: [] (every namespace) only: with watchNamespaces set, the operator runs pools and reads their Secrets in the watched namespaces; remove rbac.poolNamespaces" -}}
{{- end -}}
{{- if eq (int .Values.metrics.port) (int .Values.health.port) -}}
{{- fail (printf "metrics.port and health.port are both %v: give them different ports" .Values.metrics.port) -}}
{{- end -}}
{{- range .Values.extraEnv -}}
{{- if has .name (list "WATCH_NAMESPACES" "POD_NAMESPACE" "POD_NAME" "METRICS_PORT" "HEALTH_PORT") -}}
{{- fail (printf "extraEnv: %s is set by the chart itself (see watchNamespaces, metrics.port, health.port); remove it from extraEnv" .name) -}}
{{- end -}}
{{- end -}}
{{- $ca := .Values.extraCABundle | default dict -}}
{{- if and $ca.configMapName $ca.secretName -}}
{{- fail "extraCABundle: configMapName and secretName are both set: name the bundle's ConfigMap or its Secret, not both" -}}
{{- end -}}
{{- if or $ca.configMapName $ca.secretName -}}
{{- range .Values.extraEnv -}}
{{- if has .name (list "SSL_CERT_FILE" "REQUESTS_CA_BUNDLE") -}}
{{- fail (printf "extraEnv: %s is set by the chart itself when extraCABundle is set (to the image's CAs plus the bundle); remove it from extraEnv" .name) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- end -}}
